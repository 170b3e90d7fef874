"""Continual-RL metrics on cl-suites run logs: CORA, MEAL and DARPA L2M.

Pure functions on pandas frames first (see the submodules), a report second::

    from cl_suites.metrics import build_report
    build_report(["runs/ft-0", "runs/ft-1", "runs/clear-0"], "report/")

Submodules: :mod:`~cl_suites.metrics.runs` (loading, validation),
:mod:`~cl_suites.metrics.preprocess`, :mod:`~cl_suites.metrics.cora`,
:mod:`~cl_suites.metrics.meal`, :mod:`~cl_suites.metrics.l2m`,
:mod:`~cl_suites.metrics.stats`, :mod:`~cl_suites.metrics.l2logger_export`,
:mod:`~cl_suites.metrics.tables`, :mod:`~cl_suites.metrics.plots`,
:mod:`~cl_suites.metrics.report` (with :mod:`~cl_suites.metrics.report_data`,
:mod:`~cl_suites.metrics.report_figures`, :mod:`~cl_suites.metrics.report_files`,
:mod:`~cl_suites.metrics.report_html`), :mod:`~cl_suites.metrics.published` (the papers'
results), :mod:`~cl_suites.metrics.videos`, :mod:`~cl_suites.metrics.safe_names`.
"""

from cl_suites.metrics.cora import (
    continual_eval_curves,
    cora_matrices,
    cora_summary,
    cora_table,
    final_performance,
)
from cl_suites.metrics.l2logger_export import export_l2logger
from cl_suites.metrics.l2m import (
    contrast,
    l2m_metrics,
    l2m_preprocess,
    l2m_task_name,
    lifetime_log,
    performance_maintenance,
    performance_recovery,
    ratio,
    recovery_times,
    relative_performance,
    sample_efficiency,
    transfer,
)
from cl_suites.metrics.meal import (
    coordination_forgetting,
    coordination_matrix,
    coordination_retention,
    forgetting_per_task,
    forward_transfer,
    forward_transfer_values,
    meal_end_index,
    meal_forgetting,
    meal_metrics,
    repetition_plasticity,
    role_heterogeneity,
    run_coordination_matrix,
    run_heterogeneity,
    score_matrix,
    task_auc,
    training_score_curves,
)
from cl_suites.metrics.preprocess import (
    causal_moving_average,
    l2m_clamp,
    l2m_normalize,
    l2m_smooth,
)
from cl_suites.metrics.report import ReportResult, build_report, report_from_runs
from cl_suites.metrics.runs import MetricsInputError, RunData, load_run, load_runs
from cl_suites.metrics.stats import iqm_interval, mean_ci95, mean_sem

__all__ = [
    "MetricsInputError",
    "ReportResult",
    "RunData",
    "build_report",
    "causal_moving_average",
    "continual_eval_curves",
    "contrast",
    "coordination_forgetting",
    "coordination_matrix",
    "coordination_retention",
    "cora_matrices",
    "cora_summary",
    "cora_table",
    "export_l2logger",
    "final_performance",
    "forgetting_per_task",
    "forward_transfer",
    "forward_transfer_values",
    "iqm_interval",
    "l2m_clamp",
    "l2m_metrics",
    "l2m_normalize",
    "l2m_preprocess",
    "l2m_smooth",
    "l2m_task_name",
    "lifetime_log",
    "load_run",
    "load_runs",
    "meal_end_index",
    "meal_forgetting",
    "meal_metrics",
    "mean_ci95",
    "mean_sem",
    "performance_maintenance",
    "performance_recovery",
    "ratio",
    "recovery_times",
    "relative_performance",
    "repetition_plasticity",
    "report_from_runs",
    "role_heterogeneity",
    "run_coordination_matrix",
    "run_heterogeneity",
    "sample_efficiency",
    "score_matrix",
    "task_auc",
    "training_score_curves",
    "transfer",
]
