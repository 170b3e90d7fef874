"""IPPO baselines on MEAL: ``cl-suites run --suite MEAL-20 --method ewc --preset small``.

One SB3 PPO policy acts for every agent (parameter sharing): the training env is
``MealSB3VecEnv`` (one slot per agent per env, stepped by one jitted JAX call). MEAL's
setup is the default: multi-head outputs per task and the task id as input
(``TaskIdObservation``), an MLP on the flattened grid, no reward clipping, the IPPO
hyperparameters of MEAL appendix B.2 (``preset="paper"``). Every CL method of
``baselines_sb3`` that MEAL evaluates (``ft``, ``l2``, ``ewc``, ``online-ewc``, ``mas``) is
attached unchanged: it subscribes to the env's task switches.

Units: the schedule, evaluation cadence and logs count **env steps** (one joint action of
all agents); SB3's ``num_timesteps`` counts slots, i.e. ``num_agents`` per env step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList

from baselines_sb3 import presets
from baselines_sb3.callbacks import make_eval_policy
from baselines_sb3.cl import attach_method, make_method
from baselines_sb3.factory import build_model, wrap_env
from baselines_sb3.main_job import _write_report
from cl_suites.core.runlog import RunLog
from cl_suites.meal import build_suite, parse_meal_id
from cl_suites.meal.batched import MealBatchedEnv
from cl_suites.meal.evaluation import MealEvaluator
from cl_suites.meal.sb3_vec import MealSB3VecEnv

MEAL_METHODS: tuple[str, ...] = presets.MEAL_METHODS
MEAL_JOB_OPTIONS: tuple[str, ...] = ("multi_head", "task_id_input", "progress", "device", "report")


class MealEvalCallback(BaseCallback):
    """Evaluates on MEAL's schedule (env steps), logs training episodes, stops at the end."""

    def __init__(self, env: MealSB3VecEnv, evaluator: MealEvaluator, run_log: RunLog, method: Any):
        super().__init__()
        self.meal_env = env
        self.evaluator = evaluator
        self.run_log = run_log
        self.method = method
        self._policy: Any = None

    def _act(self):
        if self._policy is None:
            self._policy = make_eval_policy(self.model, self.method)
        return self._policy

    def _on_training_start(self) -> None:
        self.evaluator.maybe_evaluate(self.meal_env.cursor.total_step, self._act())

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", [])
        total = self.meal_env.cursor.total_step
        n = self.meal_env.num_agents
        episodes = [  # one row per env (its agent_0 slot); returns are per-agent team rewards
            {
                "total_step": total,
                "task_id": info["episode"]["task_id"],
                "episode_return": info["episode"]["r"],
                "episode_length": info["episode"]["l"],
            }
            for slot, info in enumerate(infos)
            if "episode" in info and slot % n == 0
        ]
        self.run_log.log_episodes(episodes)
        self.evaluator.maybe_evaluate(total, self._act())
        return not (infos and infos[0].get("sequence_done", False))


def run_meal_job(
    *,
    suite: str,
    method: str,
    learner: str,
    preset: str,
    seed: int,
    run_dir: Path,
    resume: bool,
    num_envs: int | None,
    overrides: dict[str, Any],
) -> Path:
    """Train IPPO + ``method`` over ``suite`` (``"MEAL-20"``, ``"CLSuite/MEAL-20-v0"``).

    Same signature as ``baselines_sb3.main_job.run_main_job``. ``overrides`` holds MEAL
    suite kwargs (``difficulty``, ``num_agents``, ``steps_per_task``, ``eval_every``, ...),
    job options (``multi_head``, ``task_id_input``, ``device``, ``progress``, ``report``)
    and PPO / method hyperparameters (``learning_rate``, ``lam``, ...).
    """
    overrides = {k: v for k, v in dict(overrides or {}).items() if v is not None}
    n_tasks = parse_meal_id(suite)
    if learner != "ppo":
        raise ValueError(f"MEAL baselines use IPPO (learner 'ppo'), got learner {learner!r}")
    if method not in MEAL_METHODS:
        raise ValueError(f"unknown method {method!r} for MEAL; valid: {', '.join(MEAL_METHODS)}")
    if preset not in presets.PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(presets.PRESETS)}")
    if resume:
        raise ValueError(
            "resuming MEAL runs is not supported yet (no JAX env checkpoint); start a new --run-dir"
        )
    hp = presets.resolve(f"MEAL-{n_tasks}", learner, method, preset)
    job = {k: overrides.pop(k) for k in MEAL_JOB_OPTIONS if k in overrides}
    overrides = presets.route_overrides(hp, learner, method, overrides)
    multi_head = bool(job.get("multi_head", hp["multi_head"]))
    task_id_input = bool(job.get("task_id_input", hp["task_id_input"]))
    suite_kwargs = {**hp["suite_defaults"], **overrides}
    meal_suite = build_suite(n_tasks, **suite_kwargs)
    sequence = meal_suite.sequence
    n_envs = int(num_envs or hp["num_envs"])
    batched = MealBatchedEnv(meal_suite, n_envs)
    schedule = batched.schedule()
    run_dir = Path(run_dir)
    description = meal_suite.describe()
    metadata = {
        "suite_id": f"CLSuite/MEAL-{n_tasks}-v0",
        "suite": f"MEAL-{n_tasks}",
        "method": method,
        "learner": "ppo (IPPO, shared parameters)",
        "preset": preset,
        "seed": int(seed),
        "env_kwargs": suite_kwargs,
        "tasks": description["tasks"],
        "layouts": description["layouts"],
        "schedule": [s.as_dict() for s in schedule],
        "steps_per_task": [t.budget for t in sequence.tasks],
        "cycles": sequence.cycles,
        "eval_every": sequence.eval_every,
        "eval_episodes": sequence.eval_episodes,
        "num_envs": n_envs,
        "num_agents": meal_suite.num_agents,
        "metric_settings": description["metric_settings"],
        "score_normalizers": meal_suite.score_normalizers(),
        "hyperparameters": {
            **{k: v for k, v in hp.items() if k not in ("suite_defaults", "num_envs")},
            "multi_head": multi_head,
            "task_id_input": task_id_input,
        },
        "step_unit": "env steps (one joint action of all agents)",
    }
    th.manual_seed(seed)
    run_log = RunLog(run_dir, metadata)
    vec = MealSB3VecEnv(batched)
    vec.seed(int(seed))
    env, _ = wrap_env(vec, sequence, hp, multi_head=multi_head, task_id_input=task_id_input)
    cl = make_method(method, seed=int(seed), **hp["method"])
    model = build_model(
        learner,
        env,
        sequence,
        hp,
        cl,
        method=method,
        seed=int(seed),
        multi_head=multi_head,
        task_id_input=task_id_input,
        device=job.get("device", "auto"),
    )
    cl_callback = attach_method(model, cl, env)
    evaluator = MealEvaluator(meal_suite, seed=int(seed), run_log=run_log, engine=batched.engine)
    total_slot_steps = schedule[-1].end_step * meal_suite.num_agents
    try:
        model.learn(
            total_timesteps=total_slot_steps,
            callback=CallbackList([cl_callback, MealEvalCallback(vec, evaluator, run_log, cl)]),
            progress_bar=False,
        )
        if evaluator.last_eval_step != vec.cursor.total_step:
            evaluator.evaluate(vec.cursor.total_step, make_eval_policy(model, cl))
    finally:
        run_log.close()
        env.close()
    _write_report(run_dir, job)
    return run_dir
