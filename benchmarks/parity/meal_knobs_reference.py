"""Overcooked's knobs: MEAL 057f862's envs beside ours, same seed, keys and actions.

For every case of ``benchmarks/parity/meal_knobs_cases.py`` (one knob each), MEAL's
trainer-side env sequence is built by its own adapter
(``experiments/envs/overcooked.py`` ``OvercookedAdapter.build_sequence``, from a checkout
of TTomilin/MEAL at 057f862, ``--meal-repo``, default ``/tmp/refs/meal057``; nothing of it
is copied): ``make_sequence`` with the knob, ``PadObsToMax``, ``StickyActions``,
``SlipperyTiles``, ``LogWrapper``. Both sides play one episode per task with the same reset
and step keys and actions, MEAL's through ``LogWrapper.step`` as its trainer does (the
episode ends at its last step, so MEAL's in-step reset never starts another); MEAL's
rewards are its adapter's ``compute_reward`` (shared, sparse or individual) at a constant
shaping weight in the reward cases (``cases.REWARD_CASES``); in the others, its env's
delivery and shaped rewards under our shared rule (the team's delivery plus the agent's
own shaping), so that the reward modes' one difference is not counted in every case.
Compared per step: the observations' bytes (but at the episode's last step, where MEAL's
in-step reset returns its next episode's first observation), the agents' rewards (to
1e-5), the episode ends. Cases listed in ``KNOWN_DIFFERENCES`` are
expected to differ (the ledger row says which side is wrong); every other field must
agree.

``--write`` pins our streams, each task's agreement with MEAL and the knob's sensitivity
(its stream differs from the knob-off stream) in ``tests/golden/meal_knobs_reference.json``,
which ``tests/meal/test_meal_knobs.py`` replays without MEAL::

    python -m benchmarks.parity.meal_knobs_reference --write

``parity_meal.py env --meal057-repo PATH`` runs the same comparison after the env parity.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.parity import meal_knobs_cases as cases

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "meal_knobs_reference.json"
KNOWN_DIFFERENCES = cases.KNOWN_DIFFERENCES


def meal_sequence(repo: Path, name: str) -> tuple[Any, Any, list]:
    """MEAL's adapter, run config and envs of case ``name`` (its options as MEAL's
    ``OvercookedEnvConfig`` fields)."""
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from experiments.envs.overcooked import OvercookedAdapter, OvercookedEnvConfig

    on = cases.CASES[name]["on"]
    flags = {k: v for k, v in on.items() if k in OvercookedEnvConfig.__dataclass_fields__}
    env_cfg = OvercookedEnvConfig(
        difficulty=cases.COMMON["difficulty"],
        curriculum=on.get("strategy") == "curriculum",
        **flags,
    )
    cfg = types.SimpleNamespace(
        seq_length=cases.CASES[name]["tasks"],
        seed=cases.SEED,
        num_agents=2,
        max_episode_steps=cases.STEPS,
        env=env_cfg,
    )
    adapter = OvercookedAdapter()
    return adapter, cfg, adapter.build_sequence(cfg)


def play_meal(repo: Path, name: str) -> tuple[list[dict[str, Any]], list[dict[str, int]]]:
    """Case ``name``'s stream on MEAL's envs (the layout of ``cases.play_ours``), and per
    task the knob's events: actions replaced (sticky), agents that slipped."""
    import jax
    import jax.numpy as jnp

    adapter, cfg, envs = meal_sequence(repo, name)
    coef = cases.coef(name)
    streams, events = [], []
    for task, menv in enumerate(envs):
        agents = list(menv.agents)
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
            jax.random.PRNGKey(100 * cases.SEED + task), jnp.arange(cases.NUM_ENVS)
        )
        halves = jax.vmap(jax.random.split)(keys)
        keys = halves[:, 0]
        obs, state = jax.jit(jax.vmap(menv.reset))(halves[:, 1])
        step = jax.jit(jax.vmap(menv.step))
        digests, rewards, dones = [cases.digest(_stack(agents, obs))], [], []
        replaced = slipped = 0
        for act in cases.actions(task):
            halves = jax.vmap(jax.random.split)(keys)
            keys = halves[:, 0]
            chosen = {a: jnp.asarray(act[:, i], dtype=jnp.int32) for i, a in enumerate(agents)}
            obs, state, reward, done, info = step(halves[:, 1], state, chosen)
            if name in cases.REWARD_CASES:  # 057f862's reward modes
                shaped = adapter.compute_reward(reward, info, agents, cfg, 0, lambda _: coef)
            else:  # the env's outputs under our (the paper-time) shared rule
                team = sum(reward[a] for a in agents)
                shaped = {a: team + coef * info["shaped_reward"][a] for a in agents}
            digests.append(cases.digest(_stack(agents, obs)))
            rewards.append(np.round(_stack(agents, shaped).astype(np.float64), 5).tolist())
            dones.append(bool(np.all(np.asarray(done["__all__"]))))
            if "applied_action" in info:
                replaced += int((_stack(agents, info["applied_action"]) != act).sum())
            if "slipped" in info:
                slipped += int(np.asarray(info["slipped"]).sum())
        streams.append({"obs": digests, "rewards": rewards, "dones": dones})
        events.append({"actions_replaced": replaced, "slipped": slipped})
    return streams, events


def _stack(agents: list[str], per_agent: dict[str, Any]) -> np.ndarray:
    """``(M, n, ...)``: MEAL's per-agent dict of ``(M, ...)`` arrays, agents in order."""
    return np.stack([np.asarray(per_agent[a]) for a in agents], axis=1)


def agreement(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """Per field of one task's stream: True, or the first step where the sides differ
    (0: the reset), and the largest reward difference. The last step's observations are
    not compared: MEAL's in-step reset replaces them with its next episode's first."""
    out: dict[str, Any] = {}
    for field in ("obs", "rewards", "dones"):
        a, b = ours[field], theirs[field]
        if field == "obs":  # at the episode's end MEAL's step returns its next episode's
            a, b = a[:-1], b[:-1]  # first observation, ours the last (the caller resets)
        bad = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if field == "rewards":
            diff = float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
            out["reward_max_diff"] = round(diff, 6)
            bad = [] if diff <= 1e-5 else bad
        out[field] = True if not bad else bad[0] + (field != "obs")
    return out


def compare(repo: Path, names: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Play cases ``names`` on both sides and print a line per task: their pins (our
    streams, MEAL's agreement and events, the knob's sensitivity) and what failed (a
    field that differs outside ``KNOWN_DIFFERENCES``, a known one that agrees, a pin the
    knob does not change)."""
    pins: dict[str, Any] = {}
    failed: list[str] = []
    for name in names:
        ours = cases.play_ours(name)
        theirs, events = play_meal(repo, name)
        off = cases.CASES[name].get("off", {})
        sensitive = None if off is None else cases.play_ours(name, knob=False) != ours
        rows = [agreement(o, t) for o, t in zip(ours, theirs, strict=True)]
        for task, row in enumerate(rows):
            known = KNOWN_DIFFERENCES.get(name, {}).get(task, ())
            ok = all((row[f] is True) == (f not in known) for f in ("obs", "rewards", "dones"))
            print(f"{name} task {task}: {row} events {events[task]}  {'ok' if ok else 'FAIL'}")
            if not ok:
                failed.append(f"{name} task {task}")
        print(f"{name}: the knob changes our stream: {sensitive}")
        if sensitive is False:
            failed.append(f"{name} (insensitive)")
        pins[name] = {
            "options": cases.options(name),
            "sensitive": sensitive,
            "meal": rows,
            "meal_events": events,
            "streams": ours,
        }
    return pins, failed


def check_repo(repo: Path) -> Path:
    """The checkout path, or a ValueError naming what is missing."""
    if not (Path(repo) / "experiments" / "envs" / "overcooked.py").exists():
        raise ValueError(f"a checkout of TTomilin/MEAL at 057f862 is needed; got {repo}")
    return Path(repo).resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meal-repo", type=Path, default=Path("/tmp/refs/meal057"))
    parser.add_argument("--cases", nargs="+", default=list(cases.CASES), choices=cases.CASES)
    parser.add_argument("--write", action="store_true", help=f"pin the streams in {GOLDEN}")
    args = parser.parse_args()
    try:
        repo = check_repo(args.meal_repo)
    except ValueError as err:
        parser.error(f"--meal-repo: {err}")
    pins, failed = compare(repo, args.cases)
    if args.write:
        old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        GOLDEN.write_text(json.dumps({**old, **pins}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
    print("FAILED: " + ", ".join(failed) if failed else "all knobs agree (or differ as known)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
