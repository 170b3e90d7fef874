"""A toy learner in one folder: what a new learner needs to run end to end.

``TOY`` is a ``cl_suites.job.learners.LearnerEntry`` that "trains" a uniformly random
policy on the Diagnostic suite: it steps the run's training env over the whole schedule,
logs the training episodes and evaluates at the suite's points, with the run pieces both
wings share (``cl_suites.job.shared``: run directory, metadata, evaluator, progress,
report). A test registers it with one line,
``register("toy", "tests.helpers.toy_learner:TOY")``, and runs ``cl-suites run --learner
toy``: no other file of the project changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.interrupts import outcome_of
from cl_suites.job import hyperparameters, shared
from cl_suites.job.option_specs import Option, integer


@dataclass(frozen=True)
class ToyLearner:
    """A uniformly random policy, seeded by ``action_seed`` (its one option)."""

    name: str = "toy"
    suites: tuple[str, ...] = ("diagnostic",)
    methods: tuple[str, ...] | None = ("ft",)
    own_methods: bool = False
    seed_groups: bool = False
    refused_job_options: tuple[str, ...] = ()

    def options(self) -> Mapping[str, Option]:
        return {"action_seed": Option("learner", integer(0), "seed of the random actions")}

    def settings(self, suite, method, preset, job, overrides):
        hp = hyperparameters.compose(suite.family, suite.preset_key, "ppo", method, preset)
        hp["learner"] = {"action_seed": overrides.pop("action_seed", 0), "n_steps": 1}
        hp["method"] = {}
        return hp, overrides

    def refuse_foreign(self, overrides, learner):
        return None

    def own_method_options(self, method, info):
        return {}

    def option_names(self, method, hp, job_options):
        return {"learner": ("action_seed",), "method": (), "policy": ()}

    def device(self, job, hp, suite, probe):
        return "cpu"

    def rollout_steps(self, hp):
        return 1

    def finish(self, hp, num_envs):
        return None

    def check_sequence(self, hp, sequence):
        return None

    def defaults(self, method, hp):
        return {"action_seed": 0}, {}

    def train(self, specs: Sequence[Any], seeds: Sequence[int], run_dirs: Sequence[Path],
              resume: bool) -> None:  # fmt: skip
        spec, seed, run_dir = specs[0], int(seeds[0]), Path(run_dirs[0])
        shared.clean_unstarted([run_dir], resume, lambda: _train(spec, seed, run_dir))
        shared.write_report(run_dir, spec.options)


def _train(spec: Any, seed: int, run_dir: Path) -> None:
    """Random actions over the whole schedule; evaluations at the suite's points."""
    metadata = shared.metadata(spec, seed, "cpu")
    run_log, evaluator, progress = shared.open_run(
        spec, seed, run_dir, False, 0, meta=metadata, show_progress=False
    )
    env, _ = spec.suite.runtime.vector_env(spec.instance, spec.schedule, "sync")
    rng = np.random.default_rng(spec.hp["learner"]["action_seed"])
    n = env.num_envs
    policy = lambda obs, task_ids: rng.integers(env.single_action_space.n, size=len(obs))  # noqa: E731
    error = None
    try:
        env.reset(seed=seed)
        returns, lengths, step = np.zeros(n), np.zeros(n, dtype=int), 0
        evaluator.maybe_evaluate(step, policy)
        while step < spec.schedule[-1].end_step:
            task = env.cursor.segment.task_id
            _, rewards, terminated, truncated, _ = env.step(policy(np.zeros(n), None))
            step += n
            returns, lengths = returns + rewards, lengths + 1
            ended = np.flatnonzero(terminated | truncated)
            run_log.log_episodes(
                {"total_step": step, "task_id": task, "episode_return": float(returns[i]),
                 "episode_length": int(lengths[i])}
                for i in ended
            )  # fmt: skip
            returns[ended], lengths[ended] = 0.0, 0
            evaluator.maybe_evaluate(step, policy)
            progress.update(step)
        if evaluator.last_eval_step != step:
            evaluator.evaluate(step, policy)
    except BaseException as e:
        error = e
        raise
    finally:
        env.close()
        progress.close(*outcome_of(error))
        evaluator.close()
        run_log.close()


TOY = ToyLearner()
"""The toy learner's entry (``"tests.helpers.toy_learner:TOY"``)."""
