"""AGEM, PackNet (issue 52 item 3) and MAPPO (issue 51 item 4) on MEAL-2 beside MEAL's code.

    python -m benchmarks.learning.meal_replay --meal-repo /tmp/refs/meal057 check
    python -m benchmarks.learning.meal_replay --meal-repo /tmp/refs/meal057 meal \\
        [--methods agem packnet] [--seeds 1 2 3]
    python -m benchmarks.learning.meal_replay --meal-repo /tmp/refs/meal057 ours
    python -m benchmarks.learning.meal_replay --meal-repo /tmp/refs/meal057 ours-mlp \
        --methods packnet           # diagnostic: our PackNet on the every-layer-norm network
    python -m benchmarks.learning.meal_replay --meal-repo /tmp/refs/meal057 compare
    python -m benchmarks.learning.meal_replay --meal-repo /tmp/refs/meal057 meal \
        --methods mappo-ft        # MAPPO (issue 51): then ours, then compare with --out

MEAL's side is its trainer at 057f862 (``experiments/train.py ippo``, TTomilin/MEAL; pass a
checkout or export with ``--meal-repo``; nothing of it is copied here), run through its own
tyro CLI in a child process. Our side is ``cl-suites run --suite MEAL-2 --learner ppo-jax
--method agem|packnet``. One training process at a time, each under ``nice -n 10`` with
XLA's CPU thread pool off (one core a run); every run writes ``<root>/<side>/<method>_s<seed>``
and ends with ``result.json``: a rerun skips finished runs and starts an unfinished one
again from scratch. ``<root>/runs.jsonl`` logs each finished run as it ends.

**Same kitchens.** 057 builds a sequence with ``meal.make_sequence(strategy="generate",
seed=seed)``: meal-bench 0.3.1's generator (057's ``meal/`` package is file for file the
meal-bench 0.3.1 we install), kitchen ``i`` from ``seed + i``, observations padded with
zeros (``PadObsToMax``). Our suite gives the same with ``layout_seed=seed,
generator="meal-bench", dynamics="meal-bench", obs_padding="zeros"`` (our defaults are the
paper-time generator and rules, which 057 no longer uses). ``check`` prints both sides'
kitchens per seed and compares their indices, then steps both envs from the same keys with
the same random actions (one whole episode, 8 envs a task) and compares observations,
rewards and soups.

**Same settings** (``Budget``, ``meal_argv``, ``ours_command``): MEAL-2 easy, random
episode starts (057's ``--env.random-reset``; ``cl-suites run``'s default), each agent's own
delivery and shaping reward on both sides (057 ``--env.individual-rewards``, ours
``individual_rewards``: 057's default sums both agents' delivery *and* shaping, ours sums
the delivery only, so no default pair is equal), shaping annealed over half a task's
budget; 16 envs x 128 steps, 8 epochs x 8 minibatches, lr 3e-4 linearly annealed to 0 per
task with a fresh Adam per task, gamma 0.99, GAE lambda 0.957, clip 0.2 (policy and value),
entropy 0.01, value 0.5, gradient norm 0.5, two ReLU layers of 128 per trunk with
LayerNorm, separate actor/critic trunks, one-hot task id input, a head per task; AGEM
memory 100,000 transitions, 1,024 per gradient; PackNet fine-tuning ``finetune_steps``
after each task's training. 057's flags set every one of these to our ppo-jax values.

**MAPPO** (``mappo-ft``, ``mappo-ewc``): 057's ``experiments/train.py mappo`` beside
``cl-suites run --learner mappo-jax`` with the settings above but MAPPO's own PPO values
(``MAPPO_PPO``: lr 1e-3 held constant, GAE lambda 0.95, gradient norm 1.0, 16
minibatches; agent ids in the actor's input), the same on both sides. The scorer plays
057's actor with each row's agent id (as it trains; 057's own evaluation gives both
agents id 0, ``meal_eval.json`` keeps it).

Differences the two trainers leave (also in the results note):

* 057 anneals the learning rate per gradient step (``optax.linear_schedule`` over the
  task's ``minibatches x epochs x updates`` steps, to ``--lr-end 0``); ours per update
  (MEAL's paper-time rule: constant within an update). PackNet: both re-create Adam at
  the pruning, so fine-tuning starts again at 3e-4 on both sides.
* LayerNorm epsilon 1e-6 (057's ``model/mlp.py``) vs 1e-5 (ours, the paper-time network's)
  for AGEM. PackNet runs on 057's PackNet network (``model/mlp_packnet.py``: LayerNorm
  after the first trunk layer only, eps 1e-6) on both sides: ours builds it by default
  for PackNet (``IPPOConfig.network``).
* 057's network also computes a dormant-unit ratio (no effect on the outputs).

**One scorer** (``score_matrix``): the saved parameters of every task's end on both sides
are played on our engine (= 057's env, ``check``) for the same ``score_episodes`` episodes
per task (random starts from fixed keys), the whole 400 steps, greedy actions (argmax; 057's
evaluation takes ``pi.mode()``), each side through its own network; PackNet's policies with
its evaluation masks (057: ``Packnet.get_eval_mask`` + ``apply_eval_mask`` with the CL
state of the task's end, as its ``evaluation.py`` does; ours: the learner's). The score is
soups delivered per episode (both agents). 057's own evaluation is not comparable as
logged: 10 envs x ``num_steps`` (128) steps, part of an episode, so its training-time
evaluation is off (``--no-evaluation``); instead its ``make_eval_fn`` is called at each
task's end with whole 400-step episodes (greedy, its masks) and kept beside our scorer's
numbers as a check of the scorer on MEAL's side (``meal_eval.json``).

**Cells and verdict** (``verdict``): per method, soups per episode on task 0 right after
task 0, on task 0 and task 1 at the end of the sequence, A (mean final soups over the
tasks) and F (task 0's drop from its own end to the sequence's end). A cell is *within seed
noise* when our 3-seed mean lies inside MEAL's seed range widened by MEAL's standard
deviation on each side: ``min - sd <= mean_ours <= max + sd``. Welch's t-test p (two
sided) is printed beside it for information. ``compare`` writes
``benchmarks/results/meal-replay-learning.{md,json,png}`` and exits 1 when a cell is
outside; the note's text from ``NOTES_MARK`` on is written by hand and kept.

**Diagnostic side** ``ours-mlp``: our PackNet on the network of the other methods
(``--set network="mlp"``: LayerNorm after every trunk layer, eps 1e-5), in training and
scoring; it shows what the network alone changes (it was our PackNet default until this
comparison found it outside MEAL's seed noise).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_ROOT = Path("/tmp/meal_replay")
METHODS = ("agem", "packnet", "mappo-ft", "mappo-ewc")
"""What a run trains: IPPO with ``agem`` or ``packnet``, or MAPPO (``mappo-<cl method>``)."""
DEFAULT_METHODS = ("agem", "packnet")
MAPPO_PPO = {  # MEAL 057f862 algos/on_policy.py:24-38, MAPPO's own values, both sides
    "lr": 1e-3,
    "gae_lambda": 0.95,
    "max_grad_norm": 1.0,
    "num_minibatches": 16,
}
SEEDS = (1, 2, 3)
SIDES = ("meal", "ours", "ours-mlp")
"""``ours-mlp``: a diagnostic side, ours with ``network="mlp"`` (a norm after every layer)."""
POLL_S = 3.0
SCORE_KEY = 7_000_000
"""Scoring episodes of seed ``s``, task ``j``: env keys from ``SCORE_KEY + 1000 s + j``
(same episodes for both sides and every task end)."""
CHILD_ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
"""Both sides' processes: CPU, XLA's thread pool off (one core each)."""
AGEM_MEMORY = 100_000
CELLS = ("task 0 after task 0", "task 0 final", "task 1 final", "A", "F")


@dataclass(frozen=True)
class Budget:
    """What both sides train and how they are scored."""

    steps_per_task: int = 122_880
    """Env steps of training per task: 60 updates of 16 x 128 (what a run of either side
    affords in about 4-8 CPU minutes on this 2-core machine: 057's AGEM update costs
    2.5x its plain update once a task is in its memory)."""
    finetune_steps: int = 12_288
    """PackNet: env steps of fine-tuning after each task's pruning (6 updates, 10%)."""
    num_envs: int = 16
    num_steps: int = 128
    eval_episodes: int = 32
    """Episodes per task of each side's own evaluation at a task's end."""
    score_episodes: int = 256
    """Episodes per task and task end of the one scorer (both sides): at 32, its standard
    error at these scores (about 0.7 soups) was 0.14 soups."""

    @property
    def shaping_horizon(self) -> int:
        return self.steps_per_task // 2

    def task_steps(self, method: str) -> int:
        """Env steps a task trains with ``method`` (PackNet: fine-tuning included)."""
        return self.steps_per_task + (self.finetune_steps if method == "packnet" else 0)

    @property
    def updates(self) -> int:
        return self.steps_per_task // (self.num_envs * self.num_steps)

    @property
    def finetune_updates(self) -> int:
        return self.finetune_steps // (self.num_envs * self.num_steps)


# ----------------------------------------------------------------------------- settings
def algo_of(method: str) -> tuple[str, str]:
    """``(MEAL's algorithm, CL method)`` of a run kind: ``mappo-ewc`` -> ``(mappo, ewc)``,
    ``agem`` -> ``(ippo, agem)``."""
    algo, _, cl = method.rpartition("-") if method.startswith("mappo-") else ("ippo", "", method)
    return algo, cl


def meal_argv(method: str, seed: int, budget: Budget) -> list[str]:
    """057's ``experiments/train.py`` arguments for ``method`` and ``seed`` at our ppo-jax
    values (module docstring); MAPPO at MAPPO's own PPO values (``MAPPO_PPO``, constant
    learning rate, as 057's defaults)."""
    algo, cl = algo_of(method)
    if algo == "mappo":
        lr = ("--lr", str(MAPPO_PPO["lr"]), "--no-anneal-lr", "--reset-optimizer")
        ppo = ("--num-minibatches", str(MAPPO_PPO["num_minibatches"]))
        ppo += ("--gae-lambda", str(MAPPO_PPO["gae_lambda"]))
        ppo += ("--max-grad-norm", str(MAPPO_PPO["max_grad_norm"]), "--use-agent-id")
    else:
        lr = ("--lr", "3e-4", "--anneal-lr", "--lr-end", "0.0", "--reset-optimizer")
        ppo = ("--num-minibatches", "8", "--gae-lambda", "0.957", "--max-grad-norm", "0.5")
    return [
        algo,
        *("--cl-method", cl, "--seed", str(seed), "--seq-length", "2"),
        *lr,
        *("--num-envs", str(budget.num_envs), "--num-steps", str(budget.num_steps)),
        *("--steps-per-task", str(float(budget.steps_per_task))),
        *("--reward-shaping-horizon", str(float(budget.shaping_horizon))),
        *("--update-epochs", "8", "--gamma", "0.99", *ppo),
        *("--clip-eps", "0.2", "--ent-coef", "0.01", "--vf-coef", "0.5"),
        *("--hidden-size", "128", "--num-layers", "2", "--activation", "relu"),
        *("--encoder", "mlp", "--use-layer-norm", "--no-shared-backbone"),
        *("--use-task-id", "--use-multihead", "--no-regularize-critic"),
        *("--agem-memory-size", str(AGEM_MEMORY), "--agem-sample-size", "1024"),
        *("--finetune-timesteps", str(float(budget.finetune_steps))),
        *("--no-evaluation", "--no-record-video", "--no-use-wandb", "--log-interval", "5"),
        "env:overcooked",
        *("--env.difficulty", "easy", "--env.random-reset", "--env.individual-rewards"),
    ]


SUITE_OPTIONS = {
    "difficulty": "easy",
    "generator": "meal-bench",
    "dynamics": "meal-bench",
    "obs_padding": "zeros",
    "random_reset": True,
    "individual_rewards": True,
}
"""Our MEAL-2 as 057 builds its sequence (module docstring), plus the run's layout seed."""


def ours_command(method: str, seed: int, run_dir: Path, budget: Budget) -> list[str]:
    """``cl-suites run`` of our side (``ppo-jax``, the paper preset's IPPO values, which
    are the ones 057 is given; ``mappo-jax`` with ``MAPPO_PPO``), evaluation only at the
    tasks' ends."""
    algo, cl = algo_of(method)
    cmd = [str(REPO / ".venv" / "bin" / "cl-suites"), "run", "--suite", "MEAL-2"]
    cmd += ["--learner", f"{algo}-jax", "--method", cl, "--preset", "paper"]
    cmd += ["--seed", str(seed), "--run-dir", str(run_dir)]
    cmd += ["--steps-per-task", str(budget.steps_per_task)]
    cmd += ["--eval-every", str(budget.task_steps(method))]  # the tasks' ends only
    cmd += ["--eval-episodes", str(budget.eval_episodes)]
    sets = {
        **SUITE_OPTIONS,
        "layout_seed": seed,
        "shaping_horizon": budget.shaping_horizon,
        "learning_rate": 3e-4,
        "anneal_lr": True,
        "num_steps": budget.num_steps,
        "update_epochs": 8,
        "num_minibatches": 8,
        "gamma": 0.99,
        "gae_lambda": 0.957,
        "clip_eps": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "hidden_sizes": [128, 128],
        "activation": "relu",
        "layer_norm": True,
        "shared_backbone": False,
        "keep_task_policies": True,
        "plasticity": False,
        "report": False,
    }
    if algo == "mappo":
        sets.update(
            learning_rate=MAPPO_PPO["lr"],
            anneal_lr=False,
            num_minibatches=MAPPO_PPO["num_minibatches"],
            gae_lambda=MAPPO_PPO["gae_lambda"],
            max_grad_norm=MAPPO_PPO["max_grad_norm"],
            agent_id_input=True,
        )
    if method == "agem":  # the options a method does not read are refused
        sets.update(agem_memory_size=AGEM_MEMORY, agem_sample_size=1024)
    if method == "packnet":
        sets["packnet_finetune_steps"] = budget.finetune_steps
    cmd += ["--num-envs", str(budget.num_envs)]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    return cmd


def replay_suite(seed: int, budget: Budget):
    """Our MEAL-2 with 057's kitchens and env options for ``seed``."""
    from cl_suites.meal import build_suite

    return build_suite(
        2,
        layout_seed=seed,
        steps_per_task=budget.steps_per_task,
        shaping_horizon=budget.shaping_horizon,
        **SUITE_OPTIONS,
    )


# ----------------------------------------------------------------------------- MEAL's side
def _meal_import(repo: Path) -> None:
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    os.environ["WANDB_MODE"] = "disabled"


def meal_envs(repo: Path, seed: int) -> list:
    """The envs 057's Overcooked adapter builds for MEAL-2 easy with ``seed`` (our flags)."""
    _meal_import(repo)
    from experiments.envs.overcooked import OvercookedAdapter, OvercookedEnvConfig

    cfg = argparse.Namespace(
        env=OvercookedEnvConfig(difficulty="easy", random_reset=True, individual_rewards=True),
        max_episode_steps=None,
        seq_length=2,
        seed=seed,
        num_agents=None,
    )
    return OvercookedAdapter().build_sequence(cfg)


def meal_child(repo: Path, method: str, seed: int, out: Path, budget: Budget) -> None:
    """Run 057's trainer (its CLI, ``meal_argv``) in this process with runtime patches of
    where it writes and what it keeps, never of what it computes: checkpoints go to
    ``out``; each ``train_on_environment`` is compiled apart and timed
    (``timing.json``); at each task's end the evaluation parameters of every task
    (PackNet: 057's eval masks from the task's CL state) go to
    ``policies_task{i}.msgpack`` and 057's ``make_eval_fn`` plays whole episodes
    (``meal_eval.json``); its TensorBoard scalars of soups go to ``curve.jsonl`` and
    ``progress.json`` as it logs them."""
    _meal_import(repo)
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    import experiments.algos.base as mbase
    import flax.serialization
    import jax
    from experiments import train as mtrain
    from experiments.algos.ippo import IPPO
    from experiments.algos.mappo import MAPPO
    from experiments.continual.packnet import Packnet
    from experiments.evaluation import evaluate_all_envs, make_eval_fn

    mbase.AbstractAlgo.checkpoint_path = lambda self, i: str(out / "ckpt" / f"model_env_{i + 1}")
    timing: list[dict] = []
    evals: list[dict] = []
    curve = open(out / "curve.jsonl", "a")  # noqa: SIM115 (open for the whole run)
    last = {"task": 0, "update": 0}

    class Writer:
        def __init__(self, writer):
            self.writer = writer

        def add_scalar(self, key, value, step):
            self.writer.add_scalar(key, value, step)
            if key == "General/env_index":
                last["task"] = int(value)
            elif key == "General/update_step":
                last["update"] = int(value)
                (out / "progress.json").write_text(json.dumps(last))
            elif key == "Soup/total":
                row = {"task": last["task"], "update": last["update"], "soups": float(value)}
                curve.write(json.dumps(row) + "\n")
                curve.flush()

        def __getattr__(self, name):
            return getattr(self.writer, name)

    real_init = mbase.init_wandb_and_tensorboard
    mbase.init_wandb_and_tensorboard = lambda *a, **k: Writer(real_init(*a, **k))
    algo_class = MAPPO if algo_of(method)[0] == "mappo" else IPPO
    real_build = algo_class.build_train_on_environment

    def build(self):
        jitted = real_build(self)
        compiled: dict[str, Any] = {}
        cfg = self.cfg
        evaluate_env = make_eval_fn(
            self.cl,
            self.reset_switch,
            self.step_switch,
            self.network,
            self.agents,
            budget.eval_episodes,
            400,
            cfg.use_cnn,
            True,
            cfg.seed,
        )

        def run(rng, train_state, cl_state, env_idx):
            t0 = time.perf_counter()
            if "fn" not in compiled:
                compiled["fn"] = jitted.lower(rng, train_state, cl_state, env_idx).compile()
            t1 = time.perf_counter()
            result = compiled["fn"](rng, train_state, cl_state, env_idx)
            jax.block_until_ready(result)
            t2 = time.perf_counter()
            params, cl_after = result[0][0].params, result[0][-1]
            per_task = {}
            for j in range(cfg.seq_length):
                if isinstance(self.cl, Packnet):
                    mask = self.cl.get_eval_mask(j, cl_after)
                    per_task[str(j)] = self.cl.apply_eval_mask(params, mask)
                else:
                    per_task[str(j)] = params
            (out / f"policies_task{env_idx}.msgpack").write_bytes(
                flax.serialization.to_bytes(per_task)
            )
            key = jax.random.PRNGKey(seed)
            _, soups, _ = evaluate_all_envs(cl_after, key, params, cfg.seq_length, evaluate_env)
            evals.append({"after_task": int(env_idx), "soups": np.asarray(soups).tolist()})
            (out / "meal_eval.json").write_text(json.dumps(evals))
            timing.append(
                {
                    "task": int(env_idx),
                    "compile_s": t1 - t0,
                    "train_s": t2 - t1,
                    "updates": int(cfg.num_updates),
                    "finetune_updates": int(cfg.finetune_updates)
                    if cfg.cl_method == "packnet"
                    else 0,
                }
            )
            (out / "timing.json").write_text(json.dumps(timing, indent=1))
            return result

        return run

    algo_class.build_train_on_environment = build
    sys.argv = ["train", *meal_argv(method, seed, budget)]
    (out / "argv.json").write_text(json.dumps(sys.argv[1:]))
    mtrain.main()
    curve.close()


def meal_network(repo: Path, method: str, num_tasks: int):
    """057's actor-critic as its ``IPPO.init_network`` builds it with ``meal_argv``."""
    _meal_import(repo)
    if method == "packnet":
        from experiments.model.mlp_packnet import ActorCritic
    else:
        from experiments.model.mlp import ActorCritic
    return ActorCritic(6, "relu", num_tasks, True, False, 128, 2, True, True)


def meal_mappo_actor(repo: Path, num_tasks: int):
    """057's MAPPO actor as its ``MAPPO.init_network`` builds it with ``meal_argv``."""
    _meal_import(repo)
    from experiments.model.decoupled_mlp import Actor

    return Actor(
        action_dim=6, activation="relu", num_tasks=num_tasks, use_multihead=True,
        use_task_id=True, use_layer_norm=True, hidden_size=128, num_layers=2,
        use_agent_id=True, num_agents=2,
    )  # fmt: skip


def meal_policies(repo: Path, run: Path, method: str, num_tasks: int) -> Callable:
    """``act_for(i, j)``: greedy actions of MEAL's policy after task ``i`` on task ``j``
    (MAPPO: its actor with each row's agent id, as it trains)."""
    import flax.serialization
    import jax
    import jax.numpy as jnp

    mappo = algo_of(method)[0] == "mappo"
    network = meal_mappo_actor(repo, num_tasks) if mappo else meal_network(repo, method, num_tasks)
    trees = [
        flax.serialization.msgpack_restore((run / f"policies_task{i}.msgpack").read_bytes())
        for i in range(num_tasks)
    ]

    @jax.jit
    def act(params, obs, task):
        m, n = obs.shape[:2]
        flat = jnp.swapaxes(obs, 0, 1).reshape(n * m, -1).astype(jnp.float32)  # batchify
        if mappo:
            ids = jnp.arange(n * m) // m  # batchify's agent-major rows
            pi, _ = network.apply(params["actor"], flat, env_idx=task, agent_id=ids)
        else:
            pi, _, _ = network.apply(params, flat, env_idx=task)
        return pi.mode().reshape(n, m).T

    def act_for(i: int, j: int) -> Callable:
        params = trees[i][str(j)]
        return lambda obs: act(params, obs, j)

    return act_for


# ----------------------------------------------------------------------------- our side
def ours_policies(run: Path, seed: int, num_tasks: int) -> Callable:
    """``act_for(i, j)``: greedy actions of our policy after task ``i`` on task ``j``: the
    run's task policy of task ``i`` (``checkpoint/task-00i.npz``) through its network;
    with a method that masks its evaluation (PackNet), through ``JaxIPPO.eval_params``
    with the CL state of the run's final checkpoint (the masks of tasks ``<= j`` are
    fixed once task ``j`` ends, so they are the ones of task ``i``'s end for ``j <= i``)."""
    import jax

    from baselines_jax import JaxIPPO
    from baselines_jax.learner import act_with
    from cl_suites.job.jax.checkpoint import jax_checkpoint_path, load_jax_checkpoint
    from cl_suites.job.jax.task_policies import network_params
    from cl_suites.job.task_policies import run_spec
    from cl_suites.rundir.task_policies import task_policy_path

    spec = run_spec(run)
    loaded = [network_params(task_policy_path(run, i, "npz"), spec) for i in range(num_tasks)]
    network, _, obs_dim = loaded[0]
    learner = None
    if spec.learner_config.cl_method == "packnet":
        learner = JaxIPPO(spec.meal, spec.learner_config, [seed])
        arrays, _ = load_jax_checkpoint(jax_checkpoint_path(run))
        state = learner.load_state_dict({k: v[None] for k, v in arrays.items()})  # seed axis
        cl = jax.tree.map(lambda x: x[0], state.cl)

    def act_for(i: int, j: int) -> Callable:
        params = loaded[i][1]
        if learner is not None:
            params = learner.eval_params(params, cl, j)
        return lambda obs: act_with(network, obs_dim, params, obs, j, True, None)

    return act_for


def ours_own_eval(run: Path, method: str, budget: Budget, num_tasks: int = 2) -> list[dict]:
    """Our run's own evaluation at each task's end (``eval.csv``: greedy, whole episodes,
    PackNet masked): soups per episode per task (``mean_return`` is 20 x soups)."""
    import pandas as pd

    from cl_suites.meal.layouts import REWARD_PER_SOUP

    evals = pd.read_csv(run / "eval.csv")
    out = []
    for i in range(num_tasks):
        step = (i + 1) * budget.task_steps(method)
        rows = evals[evals["total_step"] == step]
        soups = [
            float(rows[rows["task_id"] == j]["mean_return"].mean() / REWARD_PER_SOUP)
            for j in range(num_tasks)
        ]
        out.append({"after_task": i, "step": int(step), "soups": soups})
    return out


# ----------------------------------------------------------------------------- scorer
def score_matrix(
    seed: int, budget: Budget, act_for: Callable[[int, int], Callable], num_tasks: int = 2
) -> list[list[float]]:
    """Soups per episode after task ``i`` (rows) on task ``j`` (columns): ``score_episodes``
    whole episodes per task on our engine, the same episodes for every row and side."""
    from cl_suites.meal.engine import MealEngine

    suite = replay_suite(seed, budget)
    engine = MealEngine(suite)
    n = budget.score_episodes
    matrix = []
    for i in range(num_tasks):
        row = []
        for j in range(num_tasks):
            act = act_for(i, j)
            state, obs = engine.reset(
                np.full(n, j), engine.env_keys(SCORE_KEY + 1000 * seed + j, n)
            )
            soups = np.zeros(n)
            for _ in range(suite.episode_len):
                state, obs, _, delivered = engine.step(state, np.asarray(act(obs)), 0.0)
                soups += np.asarray(delivered)
            row.append(float(soups.mean()))
        matrix.append(row)
    return matrix


def cells_of(matrix: Sequence[Sequence[float]]) -> dict[str, float]:
    """The compared cells (``CELLS``) of a 2-task score matrix."""
    m = np.asarray(matrix)
    return {
        "task 0 after task 0": float(m[0, 0]),
        "task 0 final": float(m[1, 0]),
        "task 1 final": float(m[1, 1]),
        "A": float(m[1].mean()),
        "F": float(m[0, 0] - m[1, 0]),
    }


# ----------------------------------------------------------------------------- check
def check(repo: Path, seeds: Sequence[int], budget: Budget, steps: int = 400) -> bool:
    """Same kitchens (printed side by side) and, from the same keys and random actions,
    the same observations, rewards and soups over ``steps`` steps, 8 envs a task."""
    import jax
    import jax.numpy as jnp

    from cl_suites.meal.engine import MealEngine

    ok = True
    keys_of = ("wall_idx", "agent_idx", "goal_idx", "plate_pile_idx", "onion_pile_idx", "pot_idx")
    for seed in seeds:
        theirs = meal_envs(repo, seed)
        suite = replay_suite(seed, budget)
        engine = MealEngine(suite)
        for task, menv in enumerate(theirs):
            ours_layout = engine._padded[task][0]
            same = all(
                sorted(set(np.asarray(ours_layout[k]).tolist()))
                == sorted(set(np.asarray(menv.layout[k]).tolist()))
                for k in keys_of
            ) and (ours_layout["height"], ours_layout["width"]) == (
                int(menv.layout["height"]),
                int(menv.layout["width"]),
            )
            print(
                f"seed {seed} task {task}: 057 {menv.layout_name} | ours {suite.layouts[task].name}"
            )
            for a, b in zip(
                _grid(menv.layout).splitlines(), _grid(ours_layout).splitlines(), strict=True
            ):
                print(f"    {a}    {b}")
            num_envs, rng = 8, np.random.default_rng(seed)
            keys = engine.env_keys(1000 * seed + task, num_envs)
            state, obs = engine.reset(np.full(num_envs, task), keys)
            m_reset = jax.jit(jax.vmap(menv.reset))
            m_step = jax.jit(jax.vmap(menv.step))
            m_obs, m_state = m_reset(jax.vmap(lambda k: jax.random.split(k)[1])(keys))
            diff = {"obs": 0.0, "reward": 0.0, "soups": 0.0}
            coef, delivered = 0.7, 0
            for t in range(steps):
                stacked = np.stack([np.asarray(m_obs[a]) for a in menv.agents], axis=1)
                diff["obs"] = max(
                    diff["obs"], float(np.abs(np.asarray(obs, float) - stacked).max())
                )
                actions = rng.integers(6, size=(num_envs, 2))
                subs = jax.vmap(lambda k: jax.random.split(k)[1])(state.keys)
                state, obs, rewards, soups = engine.step(state, actions, coef)
                m_act = {a: jnp.asarray(actions[:, i]) for i, a in enumerate(menv.agents)}
                m_obs, m_state, m_rew, _, m_info = m_step(subs, m_state, m_act)
                m_rewards = np.stack(
                    [np.asarray(m_rew[a] + coef * m_info["shaped_reward"][a]) for a in menv.agents],
                    1,
                )
                m_soups = np.asarray(sum(m_info["soups"][a] for a in menv.agents))
                diff["reward"] = max(
                    diff["reward"], float(np.abs(np.asarray(rewards) - m_rewards).max())
                )
                diff["soups"] = max(diff["soups"], float(np.abs(np.asarray(soups) - m_soups).max()))
                delivered += int(np.asarray(soups).sum())
                if t == suite.episode_len - 2:
                    break  # the next step ends the episode (057's env starts a new one)
            good = same and max(diff.values()) < 1e-5
            ok &= good
            print(
                f"    kitchens {'identical' if same else 'DIFFER'}; {t + 1} steps x "
                f"{num_envs} envs: "
                f"max |diff| obs {diff['obs']:.3g}, reward {diff['reward']:.3g}, soups "
                f"{diff['soups']:.3g} ({delivered} soups by random actions)  "
                f"{'ok' if good else 'FAIL'}"
            )
    return ok


def _grid(layout) -> str:
    """A kitchen as text: W wall, A agent, X goal, B plate pile, O onion pile, P pot."""
    h, w = int(layout["height"]), int(layout["width"])
    cells = np.full(h * w, ".")
    for key, ch in (
        ("wall_idx", "W"),
        ("goal_idx", "X"),
        ("plate_pile_idx", "B"),
        ("onion_pile_idx", "O"),
        ("pot_idx", "P"),
        ("agent_idx", "A"),
    ):
        cells[np.asarray(layout[key], int)] = ch
    return "\n".join("".join(cells[r * w : (r + 1) * w]) for r in range(h))


# ----------------------------------------------------------------------------- running
def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _self_cmd(repo: Path, budget: Budget, *args: str) -> list[str]:
    """A child of this script (``nice -n 10``) with the same repo and budget."""
    return [
        "nice",
        "-n",
        "10",
        sys.executable,
        "-m",
        "benchmarks.learning.meal_replay",
        "--meal-repo",
        str(repo),
        "--steps-per-task",
        str(budget.steps_per_task),
        "--finetune-steps",
        str(budget.finetune_steps),
        "--eval-episodes",
        str(budget.eval_episodes),
        "--score-episodes",
        str(budget.score_episodes),
        *args,
    ]


def _progress(side: str, method: str, run_dir: Path, budget: Budget) -> tuple[int, int] | None:
    """(done, total) of a running run: env steps (ours) or updates (MEAL)."""
    if side != "meal":
        from cl_suites.rundir.progress import read_progress

        p = read_progress(run_dir)
        return None if p is None else (int(p["total_step"]), int(p["total_steps"]))
    try:
        p = json.loads((run_dir / "progress.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    per_task = budget.updates + (budget.finetune_updates if method == "packnet" else 0)
    return p["task"] * per_task + p["update"], 2 * per_task


def _run_logged(cmd: list[str], log: Path, env: dict, follow: Callable[[], None]) -> int:
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(POLL_S)
            follow()
    return proc.returncode


def run_side(side: str, repo: Path, methods, seeds, root: Path, budget: Budget) -> None:
    """Train and score every (method, seed) of ``side`` not finished under ``root``, one
    process at a time; progress on a rich bar; ``runs.jsonl`` gets a line per run."""
    from rich.console import Console

    console = Console()
    for method in methods:
        for seed in seeds:
            run_one(side, repo, method, seed, root, budget, console)


def run_one(side, repo: Path, method: str, seed: int, root: Path, budget: Budget, console):
    """One run of ``side`` (skipped when finished; an unfinished one starts again)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    name = f"{side}/{method}_s{seed}"
    run_dir = root / side / f"{method}_s{seed}"
    if (run_dir / "result.json").exists():
        done = json.loads((run_dir / "result.json").read_text())
        if done.get("score_episodes") == budget.score_episodes:
            console.print(f"{name}: finished, skipped")
            return
        console.print(f"{name}: finished, scored again with {budget.score_episodes} episodes")
        _score(repo, side, method, seed, run_dir, budget, done, root, console)
        return
    if run_dir.exists():  # an unfinished run starts again from scratch
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    log = root / side / f"{method}_s{seed}.log"
    if side == "meal":
        cmd = _self_cmd(repo, budget, "_meal-child", "--method", method)
        cmd += ["--seed", str(seed), "--out", str(run_dir)]
    elif side == "ours":
        cmd = ["nice", "-n", "10", *ours_command(method, seed, run_dir, budget)]
    else:  # the diagnostic: the every-layer-norm network
        cmd = ["nice", "-n", "10", *ours_command(method, seed, run_dir, budget)]
        cmd += ["--set", 'network="mlp"']
    loads: list[float] = []
    last = [0.0]
    start, cpu0 = time.time(), _children_cpu()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        task = bar.add_task(name, total=None, info="starting")

        def follow() -> None:
            loads.append(os.getloadavg()[0])
            p = _progress(side, method, run_dir, budget)
            if p is None:
                return
            unit = "updates" if side == "meal" else "env steps"
            info = f"{p[0]:,}/{p[1]:,} {unit}, load {loads[-1]:.1f}"
            bar.update(task, completed=p[0], total=p[1], info=info)
            if not console.is_terminal and time.time() - last[0] > 60:
                console.print(f"  {name}: {info}")
                last[0] = time.time()

        rc = _run_logged(cmd, log, env, follow)
    train_wall, train_cpu = time.time() - start, _children_cpu() - cpu0
    if rc != 0:
        raise SystemExit(f"{name} failed (exit {rc}); see {log}; rerun to redo it")
    result = {
        "side": side,
        "method": method,
        "seed": seed,
        "train_wall_s": train_wall,
        "train_cpu_s": train_cpu,
        "load_mean": float(np.mean(loads)) if loads else float("nan"),
        "command": cmd,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if side == "meal" and (run_dir / "timing.json").exists():
        result["meal_timing"] = json.loads((run_dir / "timing.json").read_text())
    _score(repo, side, method, seed, run_dir, budget, result, root, console)


def _score(repo, side, method, seed, run_dir: Path, budget: Budget, result, root, console):
    """Score a trained run (``_score`` child), write ``result.json`` (``result`` with the
    scores) and its line in ``runs.jsonl``, print its summary."""
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    name = f"{side}/{method}_s{seed}"
    log = root / side / f"{method}_s{seed}.log"
    score_cmd = _self_cmd(repo, budget, "_score", "--side", side, "--method", method)
    score_cmd += ["--seed", str(seed), "--run", str(run_dir)]
    t0, c0 = time.time(), _children_cpu()
    rc = _run_logged(score_cmd, log, env, lambda: None)
    if rc != 0:
        raise SystemExit(f"{name}: scoring failed (exit {rc}); see {log}")
    scores = json.loads((run_dir / "scores.json").read_text())
    result = {
        **result,
        **scores,
        "score_wall_s": time.time() - t0,
        "score_cpu_s": _children_cpu() - c0,
        "budget": asdict(budget),
    }
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    with open(root / "runs.jsonl", "a") as f:
        f.write(json.dumps(result) + "\n")
    c = result["cells"]
    console.print(
        f"{name}: task 0 after task 0 {c['task 0 after task 0']:.2f}, final "
        f"[{c['task 0 final']:.2f}, {c['task 1 final']:.2f}] soups/episode; A "
        f"{c['A']:.2f} F {c['F']:.2f}; own eval {scores['own_eval_matrix']}; "
        f"train {result['train_wall_s'] / 60:.1f} min wall, "
        f"{result['train_cpu_s'] / 60:.1f} min CPU, load {result['load_mean']:.1f}"
    )


def score_run(repo: Path, side: str, method: str, seed: int, run: Path, budget: Budget) -> None:
    """``scores.json`` of one run: the one scorer's matrix and cells, and the side's own
    evaluation at the tasks' ends (MEAL: 057's ``make_eval_fn`` on whole episodes)."""
    if side == "meal":
        act_for = meal_policies(repo, run, method, 2)
        own = json.loads((run / "meal_eval.json").read_text())
    else:
        act_for = ours_policies(run, seed, 2)
        own = ours_own_eval(run, method, budget)
    matrix = score_matrix(seed, budget, act_for)
    out = {
        "score_episodes": budget.score_episodes,
        "matrix": matrix,
        "cells": cells_of(matrix),
        "own_eval": own,
        "own_eval_matrix": [[round(x, 3) for x in row["soups"]] for row in own],
    }
    (run / "scores.json").write_text(json.dumps(out, indent=1))


# ----------------------------------------------------------------------------- compare
def verdict(meal: Sequence[float], ours: Sequence[float]) -> tuple[bool, float, float, float]:
    """(within, low, high, Welch p): ours' mean inside MEAL's seed range widened by MEAL's
    standard deviation (ddof 1) on both sides; Welch's two-sided p for information."""
    from scipy import stats

    m, o = np.asarray(meal, float), np.asarray(ours, float)
    sd = float(m.std(ddof=1)) if len(m) > 1 else 0.0
    low, high = float(m.min()) - sd, float(m.max()) + sd
    mean = float(o.mean())
    within = low - 1e-9 <= mean <= high + 1e-9
    if np.ptp(m) == 0 and np.ptp(o) == 0:
        p = 1.0 if m[0] == o[0] else 0.0
    else:
        p = float(stats.ttest_ind(m, o, equal_var=False).pvalue)
    return within, low, high, p


def load_results(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/*/result.json"))]


def compare(root: Path, methods, seeds, budget: Budget, out_md: Path, out_png: Path) -> bool:
    """The table (method x cell, both sides mean +- sd, verdict) into ``out_md``, the
    plot into ``out_png``, all per-run numbers into ``out_md``'s ``.json``."""
    results = [r for r in load_results(root) if r["method"] in methods and r["seed"] in seeds]
    by = {(r["side"], r["method"]): [] for r in results}
    for r in results:
        by[(r["side"], r["method"])].append(r)
    rows, all_ok = [], True
    for method in methods:
        meal, ours = by.get(("meal", method), []), by.get(("ours", method), [])
        for cell in CELLS:
            mv = [r["cells"][cell] for r in sorted(meal, key=lambda r: r["seed"])]
            ov = [r["cells"][cell] for r in sorted(ours, key=lambda r: r["seed"])]
            row = {"method": method, "cell": cell, "meal": mv, "ours": ov}
            if len(mv) >= 2 and ov:
                row["within"], row["low"], row["high"], row["p"] = verdict(mv, ov)
                all_ok &= row["within"]
            diag = sorted(by.get(("ours-mlp", method), []), key=lambda r: r["seed"])
            row["ours-mlp"] = [r["cells"][cell] for r in diag]
            if len(mv) >= 2 and diag:  # the diagnostic side: its verdict, apart
                row["mlp_within"], _, _, row["mlp_p"] = verdict(mv, row["ours-mlp"])
            rows.append(row)
    lines = _markdown(rows, results, methods, seeds, budget)
    old = out_md.read_text() if out_md.exists() else ""
    notes = old[old.index(NOTES_MARK) :] if NOTES_MARK in old else f"{NOTES_MARK}\n"
    out_md.write_text(lines + "\n" + notes)
    out_md.with_suffix(".json").write_text(
        json.dumps({"budget": asdict(budget), "rows": rows, "runs": results}, indent=1)
    )
    plot(rows, methods, budget, out_png)
    print(lines)
    return all_ok


def _ms(values: Sequence[float]) -> str:
    if not values:
        return "-"
    v = np.asarray(values, float)
    sd = v.std(ddof=1) if len(v) > 1 else 0.0
    return f"{v.mean():.2f} ± {sd:.2f}"


PREAMBLE = """# AGEM and PackNet on MEAL-2 beside MEAL's code (057f862)

Issue 52 item 3, written by `python -m benchmarks.learning.meal_replay --meal-repo M compare`
(module docstring: how each side is run, the one scorer, the rule). {date}; 2-core CPU
shared with other work (load in the run table), each run one process under `nice -n 10`
with XLA's CPU thread pool off.

**Budget and settings, both sides**: MEAL-2 easy, 057's kitchens for the seed (seed `s`:
meal-bench's generator, kitchen `i` from `s + i`; ours `layout_seed=s,
generator=meal-bench, dynamics=meal-bench, obs_padding=zeros`; `check` found the kitchens
and 399 steps of 8 envs a task identical; so seed `s`'s task 1 is seed `s + 1`'s task 0),
random episode starts, each agent's own delivery and shaping reward (057's default sums
both agents' delivery and shaping, ours the delivery only: the one reward both implement
alike is the individual one), shaping annealed over {horizon:,} env steps; {updates}
updates of {num_envs} envs x {num_steps} steps = {steps:,} env steps per task (PackNet:
+{ft_updates} fine-tuning updates, {ft:,} env steps); lr 3e-4 annealed to 0 per task,
fresh Adam per task, 8 epochs x 8 minibatches, gamma 0.99, GAE lambda 0.957, clip 0.2,
entropy 0.01, value 0.5, grad norm 0.5, 2 x 128 ReLU per trunk with LayerNorm, task-id
input, a head per task; AGEM memory 100,000, 1,024 per gradient. Seeds {seeds}.

**Score**: soups delivered per episode (both agents), {episodes} greedy episodes of 400
steps per task on our engine, the same episodes for both sides, each side's saved
parameters of every task's end through its own network (PackNet with its eval masks).
A = mean final soups over the 2 tasks, F = task 0's soups after task 0 minus at the end.
**Rule**: a cell is within seed noise when our mean lies in
[min(MEAL) - sd(MEAL), max(MEAL) + sd(MEAL)] over MEAL's seeds (sd with ddof 1); Welch's
two-sided p beside it for information.

**Differences left** between the trainers: 057 anneals the learning rate per gradient step
(ours per update, MEAL's paper-time rule); AGEM's network has LayerNorm epsilon 1e-6 (057)
vs 1e-5 (ours, the paper-time network's); PackNet runs 057's PackNet network on both sides
(LayerNorm after the first trunk layer only, eps 1e-6: ours by default for PackNet,
`IPPOConfig.network`); 057 re-creates Adam after PackNet's pruning,
so its fine-tuning restarts the schedule at 3e-4 (ours does the same: `JaxIPPO.end_train`).
057's own evaluation logs 10 envs x 128 steps (part of an episode) and was switched off;
its `make_eval_fn` on whole episodes at each task's end ({own} episodes a task, greedy, its
masks) is the "own eval" column below, ours our run's `eval.csv` ({own} episodes; other
episodes than the scorer's).

```bash
M=/tmp/refs/meal057   # TTomilin/MEAL at 057f862 (a checkout or export)
python -m benchmarks.learning.meal_replay --meal-repo $M check      # kitchens and env
python -m benchmarks.learning.meal_replay --meal-repo $M meal       # agem packnet, seeds 1 2 3
python -m benchmarks.learning.meal_replay --meal-repo $M ours
python -m benchmarks.learning.meal_replay --meal-repo $M ours-mlp --methods packnet  # diagnostic
python -m benchmarks.learning.meal_replay --meal-repo $M compare    # this note and its plot
```

"""
NOTES_MARK = "<!-- notes: kept by compare -->"
"""Text from this line on in the results note is written by hand and kept by ``compare``."""


def _markdown(rows, results, methods, seeds, budget: Budget) -> str:
    out = [
        PREAMBLE.format(
            date=time.strftime("%Y-%m-%d"),
            horizon=budget.shaping_horizon,
            updates=budget.updates,
            num_envs=budget.num_envs,
            num_steps=budget.num_steps,
            steps=budget.steps_per_task,
            ft_updates=budget.finetune_updates,
            ft=budget.finetune_steps,
            seeds=", ".join(map(str, seeds)),
            episodes=budget.score_episodes,
            own=budget.eval_episodes,
        ),
        "| method | cell (soups per episode) | MEAL 057 (mean ± sd) | MEAL seeds | ours "
        "(mean ± sd) | ours seeds | MEAL range ± sd | within seed noise | Welch p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seeds_m = " / ".join(f"{x:.2f}" for x in r["meal"]) or "-"
        seeds_o = " / ".join(f"{x:.2f}" for x in r["ours"]) or "-"
        if "within" in r:
            rng = f"[{r['low']:.2f}, {r['high']:.2f}]"
            ok = "yes" if r["within"] else "**no**"
            p = f"{r['p']:.2f}"
        else:
            rng = ok = p = "-"
        out.append(
            f"| {r['method']} | {r['cell']} | {_ms(r['meal'])} | {seeds_m} | {_ms(r['ours'])} "
            f"| {seeds_o} | {rng} | {ok} | {p} |"
        )
    diag = [r for r in rows if r["ours-mlp"]]
    if diag:
        out += [
            "",
            "**Diagnostic** (side `ours-mlp`: our PackNet on the other methods' network, "
            '`--set network="mlp"`: LayerNorm after every trunk layer, eps 1e-5; the same '
            "seeds, settings and scorer):",
            "",
            "| method | cell | MEAL 057 (mean ± sd) | ours, network mlp (mean ± sd) "
            "| its seeds | within seed noise | Welch p |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in diag:
            seeds_d = " / ".join(f"{x:.2f}" for x in r["ours-mlp"])
            ok = "-" if "mlp_within" not in r else ("yes" if r["mlp_within"] else "**no**")
            p = f"{r['mlp_p']:.2f}" if "mlp_p" in r else "-"
            out.append(
                f"| {r['method']} | {r['cell']} | {_ms(r['meal'])} | {_ms(r['ours-mlp'])} | "
                f"{seeds_d} | {ok} | {p} |"
            )
    out += [
        "",
        "| side | method | seed | train wall (min) | train CPU (min) | compile (s) | load | "
        "own eval after task 0 | own eval after task 1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["method"], r["side"], r["seed"])):
        compile_s = (
            f"{sum(t['compile_s'] for t in r['meal_timing']):.0f}" if "meal_timing" in r else "-"
        )
        own = r["own_eval_matrix"]
        out.append(
            f"| {r['side']} | {r['method']} | {r['seed']} | {r['train_wall_s'] / 60:.1f} | "
            f"{r['train_cpu_s'] / 60:.1f} | {compile_s} | {r['load_mean']:.1f} | {own[0]} | "
            f"{own[-1]} |"
        )
    return "\n".join(out) + "\n"


def plot(rows, methods, budget: Budget, out_png: Path) -> None:
    """Per method: each cell's per-seed values (dots) and mean +- sd (bars) of both sides,
    the verdict's band (MEAL's range widened by its sd) shaded behind them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(methods), figsize=(6.5 * len(methods), 5.4), squeeze=False)
    colors = {"meal": "#4c72b0", "ours": "#dd8452", "ours-mlp": "#55a868"}
    labels = {
        "meal": "MEAL 057f862",
        "ours": "ours ({algo}-jax)",
        "ours-mlp": "ours, network mlp (diagnostic)",
    }
    for ax, method in zip(axes[0], methods, strict=True):
        mrows = [r for r in rows if r["method"] == method]
        x = np.arange(len(mrows))
        sides = ["meal", "ours"] + (["ours-mlp"] if any(r["ours-mlp"] for r in mrows) else [])
        width = 0.8 / len(sides)
        for k, side in enumerate(sides):
            off = (k - (len(sides) - 1) / 2) * width
            means = [np.mean(r[side]) if r[side] else np.nan for r in mrows]
            sds = [np.std(r[side], ddof=1) if len(r[side]) > 1 else 0.0 for r in mrows]
            ax.bar(x + off, means, width * 0.94, yerr=sds, color=colors[side], alpha=0.55,
                   capsize=3, label=labels[side].format(algo=algo_of(method)[0]))  # fmt: skip
            for xi, r in zip(x, mrows, strict=True):
                vals = r[side]
                ax.scatter(np.full(len(vals), xi + off), vals, color=colors[side],
                           edgecolor="black", s=22, zorder=3)  # fmt: skip
        for xi, r in zip(x, mrows, strict=True):
            if "within" in r:
                ax.fill_between([xi - 0.42, xi + 0.42], r["low"], r["high"], color="grey",
                                alpha=0.15, lw=0, zorder=0,
                                label="MEAL range ± sd" if xi == 0 else None)  # fmt: skip
                ax.annotate("within" if r["within"] else "OUTSIDE", (xi, 1.0),
                            xycoords=("data", "axes fraction"), ha="center", va="bottom",
                            fontsize=8, color="green" if r["within"] else "red")  # fmt: skip
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xticks(x, [r["cell"].replace(" after ", "\nafter ") for r in mrows], fontsize=9)
        ax.set_ylabel(f"soups per episode ({budget.score_episodes} greedy episodes a task)")
        title = {"agem": "AGEM", "packnet": "PackNet", "mappo-ft": "MAPPO (FT)",
                 "mappo-ewc": "MAPPO (EWC)"}.get(method, method)  # fmt: skip
        ax.set_title(f"MEAL-2 easy, {title}: MEAL 057f862 vs ours, 3 seeds each", pad=16)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI
def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # a redirected log gets every line as it comes
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meal-repo", type=Path, required=True, help="MEAL at 057f862")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="run directories")
    parser.add_argument("--steps-per-task", type=int, default=Budget.steps_per_task)
    parser.add_argument("--finetune-steps", type=int, default=Budget.finetune_steps)
    parser.add_argument("--eval-episodes", type=int, default=Budget.eval_episodes)
    parser.add_argument("--score-episodes", type=int, default=Budget.score_episodes)
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("check", help="same kitchens and env on both sides").add_argument(
        "--seeds", type=int, nargs="+", default=list(SEEDS)
    )
    for mode in ("meal", "ours", "ours-mlp", "compare"):
        p = sub.add_parser(mode, help={"meal": "run MEAL 057's side", "ours": "run our side",
                                       "ours-mlp": "our side with network=mlp",
                                       "compare": "table and plot"}[mode])  # fmt: skip
        p.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS))
        p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
        if mode == "compare":
            p.add_argument("--out", type=Path, default=RESULTS / "meal-replay-learning.md")
    child = sub.add_parser("_meal-child")
    child.add_argument("--method", required=True)
    child.add_argument("--seed", type=int, required=True)
    child.add_argument("--out", type=Path, required=True)
    sc = sub.add_parser("_score")
    sc.add_argument("--side", choices=SIDES, required=True)
    sc.add_argument("--method", required=True)
    sc.add_argument("--seed", type=int, required=True)
    sc.add_argument("--run", type=Path, required=True)
    args = parser.parse_args()
    repo = args.meal_repo.resolve()
    if not (repo / "experiments" / "algos" / "ippo.py").exists():
        parser.error(f"--meal-repo {repo} is not MEAL at 057f862 (no experiments/algos/ippo.py)")
    budget = Budget(
        args.steps_per_task,
        args.finetune_steps,
        eval_episodes=args.eval_episodes,
        score_episodes=args.score_episodes,
    )
    root = args.root.resolve()
    if args.mode == "check":
        sys.exit(0 if check(repo, args.seeds, budget) else 1)
    if args.mode == "_meal-child":
        meal_child(repo, args.method, args.seed, args.out.resolve(), budget)
    elif args.mode == "_score":
        score_run(repo, args.side, args.method, args.seed, args.run.resolve(), budget)
    elif args.mode in SIDES:
        run_side(args.mode, repo, args.methods, args.seeds, root, budget)
    else:
        ok = compare(root, args.methods, args.seeds, budget, args.out, args.out.with_suffix(".png"))
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
