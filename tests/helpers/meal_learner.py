"""MEAL's torch learner built as the main job builds it, without a run directory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def meal_ft_learner(job: Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(model, env)``: the FT ``ContinualPPO`` of the MEAL run ``job`` (``resolve_job``'s
    suite, learner, preset, seed and num_envs) with ``overrides``, and its wrapped SB3 env
    seeded 0, both as ``cl_suites.job.main_job`` builds them."""
    from baselines_sb3.cl import make_method
    from baselines_sb3.factory import build_model, wrap_env
    from cl_suites.job.main_job import resolve_job
    from cl_suites.job.torch.train import training_env

    spec = resolve_job(method="ft", overrides=dict(overrides), **job)
    _, sb3_env, _ = training_env(spec)
    sb3_env.seed(0)
    env, _ = wrap_env(
        sb3_env, spec.sequence, spec.hp, multi_head=spec.multi_head,
        task_id_input=spec.task_id_input,
    )  # fmt: skip
    model = build_model(
        "ppo", env, spec.sequence, spec.hp, make_method("ft"), method="ft", seed=0,
        multi_head=spec.multi_head, task_id_input=spec.task_id_input, device=spec.device,
    )  # fmt: skip
    return model, env
