"""How long a grid takes: per-suite training rates of the paper preset, as package data.

The figures and the model are ``cl_suites.job.cost_model``'s (``cl_suites/data/costs.json``,
measured in ``benchmarks/``): for Atari6 and MiniHack15 the V-trace learner's per-agent-step
CPU costs and GPU fit through the model, for Procgen6 (the paper's residual network) and
MEAL (``ppo-jax``) the rates measured at given core counts. CHORES has none (its simulator
needs a Unity build the measuring machines lacked). Every figure is of fine-tuning; CL
methods cost more."""

from __future__ import annotations

from dataclasses import dataclass

from cl_suites.job.cost_model import cost_data, predict, predict_gpu


@dataclass(frozen=True)
class Rate:
    """One run's training rate on a machine: steps per second and how it was found."""

    steps_per_s: float
    basis: str


def _measured(table: dict[str, float], cores: int) -> tuple[float, int]:
    """The rate measured at the largest core count <= ``cores`` (else the smallest)."""
    counts = sorted(int(k) for k in table)
    below = [n for n in counts if n <= cores]
    n = below[-1] if below else counts[0]
    return float(table[str(n)]), n


def _key(suite: str) -> str:
    return "MEAL" if suite.startswith("MEAL") else suite


def rate(suite: str, cores: int, gpu: bool) -> Rate | None:
    """One paper-preset run's rate of ``suite`` (short name) on ``cores`` cores, with or
    without a GPU; ``None`` where nothing was measured (CHORES). CPU: the envs in the
    learner's process (what ``vectorization_mode=auto`` picks on CPU for V-trace); GPU:
    ``cores - 2`` env workers where the model has them (what ``auto`` picks there)."""
    data = cost_data()
    key = _key(suite)
    if key in data["model"]:
        entry = data["model"][key]
        if gpu:
            workers = max(cores - 2, 1)
            return Rate(predict_gpu(entry["gpu"], cores), f"model, {workers} env workers + GPU")
        return Rate(predict(entry["cpu"], cores, 1, 0, None), "model, CPU")
    if key in data["measured"]:
        table = data["measured"][key]["gpu" if gpu else "cpu"]
        value, n = _measured(table, cores)
        where = f"{n} cores + GPU" if gpu else f"{n} core{'s' if n != 1 else ''}"
        return Rate(value, f"measured on {where}")
    return None


def measured_where(suite: str) -> str | None:
    """Where ``suite``'s figures were measured (``None``: not measured)."""
    data = cost_data()
    key = _key(suite)
    for group in ("model", "measured"):
        if key in data[group]:
            return data[group][key]["measured"]
    return None
