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

import copy
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.utils import get_linear_fn

from baselines_sb3 import presets
from baselines_sb3.callbacks import make_eval_policy
from baselines_sb3.cl import attach_method, make_method
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.main_job import _write_report
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.wrappers import TaskIdObservation
from cl_suites.core.runlog import RunLog
from cl_suites.meal import build_suite, parse_meal_id
from cl_suites.meal.batched import MealBatchedEnv
from cl_suites.meal.evaluation import MealEvaluator
from cl_suites.meal.sb3_vec import MealSB3VecEnv

MEAL_METHODS: tuple[str, ...] = ("ft", "l2", "ewc", "online-ewc", "mas")
MEAL_JOB_OPTIONS: tuple[str, ...] = ("multi_head", "task_id_input", "progress", "device", "report")
MEAL_NET_ARCH = {"paper": [128, 128], "small": [64]}
"""MEAL appendix B.1: MLP of width 128 on the flattened observation (small: one layer of 64)."""
MEAL_SMALL_SUITE: dict[str, Any] = {
    "steps_per_task": 2_000,
    "eval_every": 2_000,
    "eval_episodes": 2,
}
MEAL_MINIBATCHES = 8


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
    small = preset == "small"
    hp = presets.resolve("MEAL", "ppo", method, preset)
    if not small:
        hp["method"] = copy.deepcopy(presets.MEAL_METHODS[method])
    job = {k: overrides.pop(k) for k in MEAL_JOB_OPTIONS if k in overrides}
    for key in list(overrides):
        for section in ("learner", "method"):
            if key in hp[section]:
                hp[section][key] = overrides.pop(key)
    multi_head = bool(job.get("multi_head", True))
    task_id_input = bool(job.get("task_id_input", True))
    suite_kwargs = {**(MEAL_SMALL_SUITE if small else {}), **overrides}
    meal_suite = build_suite(n_tasks, **suite_kwargs)
    sequence = meal_suite.sequence
    n_envs = int(num_envs or hp["num_envs"])
    batched = MealBatchedEnv(meal_suite, n_envs)
    schedule = batched.schedule()
    run_dir = Path(run_dir)
    learner_kw = dict(hp["learner"])
    slots = n_envs * meal_suite.num_agents
    learner_kw["batch_size"] = max(1, learner_kw["n_steps"] * slots // MEAL_MINIBATCHES)
    net_arch = MEAL_NET_ARCH["small" if small else "paper"]
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
            "learner": learner_kw,
            "method": hp["method"],
            "multi_head": multi_head,
            "task_id_input": task_id_input,
            "network": "mlp",
            "net_arch": net_arch,
        },
        "step_unit": "env steps (one joint action of all agents)",
    }
    th.manual_seed(seed)
    run_log = RunLog(run_dir, metadata)
    vec = MealSB3VecEnv(batched)
    vec.seed(int(seed))
    env: Any = vec
    if multi_head or task_id_input:
        env = TaskIdObservation(vec, len(sequence.tasks))
    cl = make_method(method, seed=int(seed), **hp["method"])
    if learner_kw.pop("lr_anneal", False):
        learner_kw["learning_rate"] = get_linear_fn(learner_kw["learning_rate"], 0.0, 1.0)
    policy_kwargs = {
        "num_tasks": len(sequence.tasks),
        "multi_head": multi_head,
        "task_id_input": task_id_input,
        "net_arch": list(net_arch),
        "normalize_images": False,  # counts and flags, not pixels
    }
    model = ContinualPPO(
        ContinualPolicy,
        env,
        cl_method=cl,
        policy_kwargs=policy_kwargs,
        seed=int(seed),
        device=job.get("device", "auto"),
        verbose=0,
        **learner_kw,
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
