"""The plasticity diagnostics of a run: probe batch, references, rows in ``plasticity.csv``.

:class:`PlasticityTracker` is framework-neutral: a learner hands it a
:class:`NetworkProbe` (``baselines_sb3.plasticity.TorchProbe`` for torch modules,
``baselines_jax.plasticity.JaxProbe`` for JAX parameters and an apply function), feeds it
training observations (:meth:`PlasticityTracker.observe`), tells it when a task starts
(:meth:`PlasticityTracker.task_started`) and calls :meth:`PlasticityTracker.measure` at
every evaluation point. Each measurement appends rows to ``RUN_DIR/plasticity.csv``
(``RunLog.log_plasticity``; schema :data:`cl_suites.rundir.runlog.PLASTICITY_COLUMNS`).

The probe batch holds up to ``probe_size`` observations of every task seen so far, taken
from the training stream of the task's first steps (every ``probe_stride``-th vector step,
all sub-envs), in the order they were taken; it is saved in ``RUN_DIR/plasticity_probe.npz``
and in every checkpoint (:meth:`PlasticityTracker.state_dict`), with the reference weights
(run start, task start) and the outputs of the last measurement (churn), so a resumed run
measures on the same batch against the same references.

A diagnostic that fails (a singular SVD, a module that raises) is logged as NaN with the
reason in the row's ``reason`` cell; the run goes on.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from cl_suites.metrics import plasticity as P
from cl_suites.rundir.fsutil import atomic_write

logger = logging.getLogger(__name__)

PROBE_FILE = "plasticity_probe.npz"
METRICS: tuple[str, ...] = (
    "dormant_ratio",
    "active_fraction",
    "stable_rank",
    "effective_rank",
    "feature_norm",
    "weight_norm",
    "weight_change_task",
    "weight_change_run",
    "grad_norm",
    "churn",
)
"""The diagnostics' names in ``plasticity.csv`` (definitions: ``docs/metrics.md``)."""
WHOLE = "all"
"""The ``layer`` cell of a whole-network row."""


@dataclass(frozen=True)
class PlasticitySettings:
    """How the diagnostics are computed (the job options ``plasticity_*``).

    ``tau``: dormant threshold in (0, 1); ``pooling``, ``stable_rank``, ``weight_scale``:
    ``DORMANT_POOLINGS``, ``STABLE_RANKS``, ``WEIGHT_SCALES`` of
    :mod:`cl_suites.metrics.plasticity`; ``probe_size``: observations per
    task (>= 1); ``probe_stride``: vector steps between two takes from the training stream.
    """

    tau: float = P.DEFAULT_TAU
    pooling: str = "redo"
    stable_rank: str = "srank"
    weight_scale: str = "rms"
    probe_size: int = 256
    probe_stride: int = 4

    def __post_init__(self) -> None:
        P.check_tau(self.tau)
        for name, value, allowed in (
            ("plasticity_pooling", self.pooling, P.DORMANT_POOLINGS),
            ("plasticity_stable_rank", self.stable_rank, P.STABLE_RANKS),
            ("plasticity_weight_scale", self.weight_scale, P.WEIGHT_SCALES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        for name, value in (
            ("plasticity_probe_size", self.probe_size),
            ("plasticity_probe_stride", self.probe_stride),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


class Capture(NamedTuple):
    """One network's pass over the probe batch.

    ``activations``: hidden layer name -> post-activation output ``(B, ..., U)``, units
    last; ``features``: the penultimate features ``(B, F)``; ``outputs``: action logits
    ``(B, A)`` (``kind="policy"``) or values ``(B,)`` (``kind="value"``); ``activation``:
    the hidden layers' activation (:data:`~cl_suites.metrics.plasticity.ACTIVATIONS`).
    """

    activations: dict[str, np.ndarray]
    features: np.ndarray
    outputs: np.ndarray
    kind: str
    activation: str = "relu"


class NetworkProbe(Protocol):
    """What the tracker reads of a learner's networks (one probe gives them all)."""

    def capture(self, obs: Any, task_ids: np.ndarray) -> dict[str, Capture]:
        """Network name (``actor``, ``critic``, ``kb/actor``, ...) -> its :class:`Capture`
        on ``obs`` (the probe's rows, the learner's observation layout)."""
        ...

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        """Network name -> parameter name -> value (copied to numpy)."""
        ...

    def gradient_norms(self) -> dict[str, float]:
        """Network name -> gradient norm of the last update (NaN before the first)."""
        ...


def _copy_tree(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {k: _copy_tree(v) for k, v in tree.items()}
    return np.array(tree, copy=True)


def _concat(parts: list[Any]) -> Any:
    if isinstance(parts[0], Mapping):
        return {k: _concat([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


def _rows_of(tree: Any, index: np.ndarray | slice) -> Any:
    if isinstance(tree, Mapping):
        return {k: _rows_of(v, index) for k, v in tree.items()}
    if hasattr(tree, "detach"):  # a torch tensor (observations kept on the learner's device)
        return tree[index].detach().cpu().numpy()
    return np.asarray(tree)[index]


def _digest(tree: Any) -> str:
    """SHA-256 of an observation array or dict of arrays (keys in order), for checking
    that a probe file still holds a checkpoint's rows."""
    h = hashlib.sha256()
    items = sorted(tree.items()) if isinstance(tree, Mapping) else [("", tree)]
    for key, value in items:
        a = np.ascontiguousarray(value)
        h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.data)
    return h.hexdigest()


def _length(tree: Any) -> int:
    if isinstance(tree, Mapping):
        return _length(next(iter(tree.values())))
    return len(tree)


@dataclass
class ProbeBatch:
    """Observations of every task seen so far, in the order taken.

    ``obs``: the learner's observation layout, an array ``(N, *obs_shape)`` or a dict of
    such arrays; ``task_ids (N,)``; ``steps (N,)``: the run's step at which each row was
    taken (a resume keeps the rows taken up to its checkpoint).
    """

    size: int
    stride: int = 1
    obs: Any = None
    task_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    calls: dict[int, int] = field(default_factory=dict)
    _full: set[int] = field(default_factory=set, repr=False)

    def __len__(self) -> int:
        return len(self.task_ids)

    def count(self, task_id: int) -> int:
        return int(np.sum(self.task_ids == task_id))

    def add(self, task_id: int, obs: Any, step: int) -> int:
        """Take rows of ``obs`` (``(n, ...)`` or a dict of such) for ``task_id`` at every
        ``stride``-th call, until the task holds ``size`` rows; returns the rows taken."""
        task_id = int(task_id)
        call = self.calls.get(task_id, 0)
        self.calls[task_id] = call + 1
        if call % self.stride or task_id in self._full:
            return 0
        room = self.size - self.count(task_id)
        if room <= 0:
            self._full.add(task_id)
            return 0
        take = min(room, _length(obs))
        rows = _copy_tree(_rows_of(obs, slice(0, take)))
        self.obs = rows if self.obs is None else _concat([self.obs, rows])
        self.task_ids = np.concatenate([self.task_ids, np.full(take, task_id, np.int64)])
        self.steps = np.concatenate([self.steps, np.full(take, int(step), np.int64)])
        return take

    def state_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "stride": self.stride,
            "obs": self.obs,
            "task_ids": self.task_ids,
            "steps": self.steps,
            "calls": {str(k): v for k, v in self.calls.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.obs = state["obs"]
        self.task_ids = np.asarray(state["task_ids"], np.int64)
        self.steps = np.asarray(state["steps"], np.int64)
        self.calls = {int(k): int(v) for k, v in dict(state["calls"]).items()}
        self._full = set()

    def save(self, path: Path) -> None:
        """Write the batch to ``path`` (``.npz``: ``task_ids``, ``steps``, ``obs`` or
        ``obs/<key>`` per key of a dict layout), atomically."""
        arrays = {"task_ids": self.task_ids, "steps": self.steps}
        if isinstance(self.obs, Mapping):
            arrays.update({f"obs/{k}": np.asarray(v) for k, v in self.obs.items()})
        elif self.obs is not None:
            arrays["obs"] = np.asarray(self.obs)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        atomic_write(path, lambda f: f.write(buffer.getvalue()))


def load_probe(path: str | Path) -> tuple[Any, np.ndarray, np.ndarray]:
    """``(obs, task_ids, steps)`` of a saved probe batch (``RUN_DIR/plasticity_probe.npz``)."""
    with np.load(path) as data:
        task_ids, steps = data["task_ids"], data["steps"]
        keys = [k for k in data.files if k.startswith("obs/")]
        obs = (
            {k[4:]: data[k] for k in keys}
            if keys
            else (data["obs"] if "obs" in data.files else None)
        )
    return obs, task_ids, steps


def _attempt(read: Callable[[], dict]) -> tuple[dict, str]:
    """``(read(), "")``, or ``({}, reason)`` when it raised: a diagnostic never stops a run."""
    try:
        return read(), ""
    except Exception as e:
        return {}, _reason(e)


def _row(
    step: int, task: int, network: str, layer: str, metric: str, value: float, reason: str = ""
) -> dict[str, Any]:
    value = float(value)
    if not math.isfinite(value) and not reason:
        reason = "not finite"
    return {
        "total_step": int(step),
        "task_id": int(task),
        "network": network,
        "layer": layer,
        "metric": metric,
        "value": value,
        "reason": reason,
    }


class PlasticityTracker:
    """The diagnostics of one run (see the module docstring).

    Args:
        settings: :class:`PlasticitySettings`.
        log: ``rows -> None`` (``RunLog.log_plasticity``); ``None``: rows are only returned.
        probe_file: where the probe batch is saved when it grows (``None``: not saved).
    """

    def __init__(
        self,
        settings: PlasticitySettings | None = None,
        log: Callable[[list[dict[str, Any]]], None] | None = None,
        probe_file: str | Path | None = None,
    ):
        self.settings = settings or PlasticitySettings()
        self.log = log
        self.probe_file = Path(probe_file) if probe_file is not None else None
        self.probe = ProbeBatch(self.settings.probe_size, self.settings.probe_stride)
        self.run_reference: dict[str, dict[str, np.ndarray]] | None = None
        self.task_reference: dict[str, dict[str, np.ndarray]] | None = None
        self.task: int | None = None
        self.previous: dict[str, np.ndarray] = {}
        self._saved_rows = -1
        self._warned: set[str] = set()

    # -- feeding ----------------------------------------------------------------------
    def observe(self, task_id: int, obs: Any, step: int) -> None:
        """Offer training observations ``obs`` (``(n, ...)`` or a dict of such) of
        ``task_id`` taken at the run's step ``step`` to the probe batch."""
        try:
            self.probe.add(task_id, obs, step)
        except Exception as e:  # never let a diagnostic stop training
            self._warn("probe", f"observations of task {task_id} not taken: {e}")

    def task_started(self, task_id: int, net: NetworkProbe) -> None:
        """Task ``task_id`` starts now: its weights are the task-start reference (and the
        run-start reference at the first call)."""
        try:
            params = net.parameters()
        except Exception as e:
            self._warn("params", f"weights not read at the start of task {task_id}: {e}")
            params = None
        if params is not None:
            params = _copy_tree(params)
            if self.run_reference is None:
                self.run_reference = params
            self.task_reference = params
        self.task = int(task_id)

    # -- measuring --------------------------------------------------------------------
    def measure(self, step: int, task_id: int, net: NetworkProbe) -> list[dict[str, Any]]:
        """Every diagnostic of every network of ``net`` at the run's step ``step``, rows
        tagged with ``task_id`` (the task trained up to ``step``); logged and returned."""
        rows: list[dict[str, Any]] = []
        try:
            rows = self._measure(int(step), int(task_id), net)
        except Exception as e:  # the last line of defence: one NaN row with the reason
            rows = [_row(step, task_id, WHOLE, WHOLE, m, math.nan, _reason(e)) for m in METRICS]
        if self.log is not None and rows:
            try:
                self.log(rows)
            except Exception as e:
                self._warn("log", f"plasticity rows not written: {e}")
        self._save_probe()
        return rows

    def _measure(self, step: int, task: int, net: NetworkProbe) -> list[dict[str, Any]]:
        s = self.settings
        rows: list[dict[str, Any]] = []
        params, params_error = _attempt(net.parameters)
        if self.task is None and params:
            self.task_started(task, net)
        grads, grad_error = _attempt(net.gradient_norms)
        captures: dict[str, Capture] = {}
        capture_error = ""
        if len(self.probe) == 0:
            capture_error = "the probe batch is empty (no training observation yet)"
        else:
            try:
                captures = net.capture(self.probe.obs, self.probe.task_ids)
            except Exception as e:
                capture_error = f"the forward pass on the probe batch failed: {_reason(e)}"
        names = list(dict.fromkeys([*params, *captures]))
        for name in names:

            def add(
                metric: str,
                fn: Callable[[], Any],
                layer: str = WHOLE,
                name: str = name,
                rows: list = rows,
            ) -> None:
                try:
                    value = fn()
                except Exception as e:
                    rows.append(_row(step, task, name, layer, metric, math.nan, _reason(e)))
                    return
                rows.append(_row(step, task, name, layer, metric, value))

            def missing(metric: str, reason: str, name: str = name, rows: list = rows) -> None:
                rows.append(_row(step, task, name, WHOLE, metric, math.nan, reason))

            cap = captures.get(name)
            if cap is None:
                reason = capture_error or "no forward pass for this network"
                for metric in (*METRICS[:5], "churn"):
                    missing(metric, reason)
            else:
                try:
                    whole, layers = P.dormant_ratios(cap.activations, s.tau, s.pooling)
                    if not layers:
                        missing("dormant_ratio", "no hidden activation layer found")
                    else:
                        rows.append(_row(step, task, name, WHOLE, "dormant_ratio", whole))
                        rows += [
                            _row(step, task, name, k, "dormant_ratio", v) for k, v in layers.items()
                        ]
                except Exception as e:
                    missing("dormant_ratio", _reason(e))
                add(
                    "active_fraction",
                    lambda c=cap: P.active_fraction(_last_hidden(c), c.activation),
                )
                try:
                    sv = P.singular_values(cap.features)
                except Exception as e:
                    sv, sv_error = None, e
                else:
                    sv_error = None

                add(
                    "stable_rank",
                    lambda sv=sv, e=sv_error: _rank(sv, e, P.stable_rank_of, s.stable_rank),
                )
                add("effective_rank", lambda sv=sv, e=sv_error: _rank(sv, e, P.effective_rank_of))
                add("feature_norm", lambda c=cap: P.feature_norm(c.features))
                add("churn", lambda c=cap, n=name: self._churn(n, c))
            weights = params.get(name)
            if weights is None:
                for metric in ("weight_norm", "weight_change_task", "weight_change_run"):
                    missing(metric, params_error or "no parameters for this network")
            else:
                for metric, ref in (
                    ("weight_norm", None),
                    ("weight_change_task", self.task_reference),
                    ("weight_change_run", self.run_reference),
                ):
                    if ref is not None and name not in ref:
                        missing(metric, "no reference weights for this network")
                        continue
                    try:
                        whole, layers = P.weight_norms(
                            weights, None if ref is None else ref[name], s.weight_scale
                        )
                    except Exception as e:
                        missing(metric, _reason(e))
                        continue
                    rows.append(_row(step, task, name, WHOLE, metric, whole))
                    rows += [_row(step, task, name, k, metric, v) for k, v in layers.items()]
            g = grads.get(name, math.nan)
            rows.append(
                _row(
                    step,
                    task,
                    name,
                    WHOLE,
                    "grad_norm",
                    g,
                    grad_error or ("" if math.isfinite(g) else "no update yet"),
                )
            )
        return rows

    def _churn(self, name: str, cap: Capture) -> float:
        out = np.asarray(cap.outputs, dtype=np.float64)
        previous = self.previous.get(name)
        self.previous[name] = out.copy()
        if previous is None:
            raise ValueError("no previous measurement (first point)")
        n = min(len(previous), len(out))  # the probe only grows by appending rows
        if cap.kind == "policy":
            return P.policy_churn(out[:n], previous[:n])
        return P.value_churn(out[:n], previous[:n])

    # -- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to measure the same values (numpy arrays).

        The probe batch's observations (a Procgen run's 1,536 images are 19 MB, 50 times
        its network) are not copied when the run's probe file holds them: the batch only
        grows, so the checkpoint keeps their count and digest (``"obs_in_file"``) and a
        resume reads those first rows back from the file; without a file they are in the
        state."""
        probe = self.probe.state_dict()
        self._save_probe()
        if self.probe_file is not None and len(self.probe) and self._saved_rows == len(self.probe):
            probe["obs"] = None
            probe["obs_in_file"] = {"rows": len(self.probe), "digest": _digest(self.probe.obs)}
        return {
            "probe": probe,
            "run_reference": self.run_reference,
            "task_reference": self.task_reference,
            "task": self.task,
            "previous": dict(self.previous),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        probe = dict(state["probe"])
        in_file = probe.pop("obs_in_file", None)
        if in_file is not None:
            probe["obs"] = self._rows_from_file(int(in_file["rows"]), str(in_file["digest"]))
            if probe["obs"] is None:  # the file lost them: the batch starts again
                probe.update(task_ids=np.zeros(0, np.int64), steps=np.zeros(0, np.int64))
        self.probe.load_state_dict(probe)
        self.run_reference = state["run_reference"]
        self.task_reference = state["task_reference"]
        self.task = state["task"]
        self.previous = {k: np.asarray(v) for k, v in dict(state["previous"]).items()}
        self._saved_rows = -1

    def _rows_from_file(self, rows: int, digest: str) -> Any:
        """The first ``rows`` observations of the probe file, checked against ``digest``;
        ``None`` (with a warning) when the file no longer holds them."""
        try:
            obs, _, _ = load_probe(self.probe_file)  # type: ignore[arg-type]
            obs = _rows_of(obs, slice(0, rows))
            if _length(obs) == rows and _digest(obs) == digest:
                return obs
            problem = "its rows differ from the checkpoint's"
        except Exception as e:
            problem = str(e)
        self._warn(
            "resume",
            f"probe batch not restored from {self.probe_file} ({problem}): it is taken "
            "again from the tasks still to come",
        )
        return None

    def _save_probe(self) -> None:
        if self.probe_file is None or len(self.probe) == self._saved_rows:
            return
        try:
            self.probe.save(self.probe_file)
            self._saved_rows = len(self.probe)
        except Exception as e:
            self._warn("save", f"probe batch not saved to {self.probe_file}: {e}")

    def _warn(self, key: str, line: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("plasticity diagnostics: %s", line)


def _rank(sv: np.ndarray | None, error: BaseException | None, fn: Callable, *args: Any) -> float:
    """``fn(sv, *args)``, or the singular values' own error again."""
    if sv is None:
        raise error  # type: ignore[misc]
    return fn(sv, *args)


def _last_hidden(cap: Capture) -> np.ndarray:
    """The last hidden layer's post-activation output ``(B, U)`` (the features themselves
    when the network has no activation layer): where the activation's zeros are, also
    when a LayerNorm sits between it and the head (MEAL's trunks)."""
    if not cap.activations:
        return cap.features
    last = np.asarray(list(cap.activations.values())[-1])
    return last.reshape(len(last), -1)


def _reason(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text[:200]
