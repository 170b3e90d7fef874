"""CORA's side of the update-for-update cases (``cora_cases.py``, beside this file); CORA's
interpreter only.

For a case, CORA's own policy class is built from CORA's own config file (over its config
class's defaults) with the harness's sizes (``cora_cases.HARNESS_SIZES``), as its
experiment runner builds it (``ImpalaPolicy(config, observation_space, action_spaces)``,
``set_task_ids`` for EWC and P&C). The case's parameters are loaded into its learner and
actor models; then every rollout of the schedule is stored by CORA's
``on_act_unroll_complete`` (one actor per unroll) and trained on by CORA's
``Monobeast.learn`` with CORA's optimizer and a ``LambdaLR`` built per task as
``Monobeast.train`` builds it (``monobeast.py:641-652``). CORA's replay and Fisher draws
(``np.random.RandomState()`` in ``ewc_monobeast.py`` and ``clear_monobeast.py``) take the
case's planned draws: a scripted ``RandomState`` while ``learn`` runs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from baselines_sb3.cora_weights import cora_state_dict
from benchmarks.parity import cora_cases as cc
from benchmarks.parity.cora_ours import OurSide

CORA_KEYS = (
    "frame",
    "reward",
    "done",
    "episode_return",
    "episode_step",
    "policy_logits",
    "baseline",
    "uncertainty",
    "last_action",
    "action",
)
"""TorchBeast's buffer keys (``Monobeast.create_buffer_specs``)."""

CORA_POLICY = {
    "ft": "impala",
    "ewc": "ewc",
    "online-ewc": "online_ewc",
    "pnc": "progress_and_compress",
    "clear": "clear",
}


class ScriptedRandomState:
    """``np.random.RandomState()`` of CORA's samplers, drawing the planned numbers:
    ``randint`` returns the next number, ``choice(seq)`` the next number's entry of
    ``seq``; both check the planned number fits."""

    def __init__(self, draws: deque[int]):
        self.draws = draws

    def randint(self, low: int, high: int | None = None) -> int:
        low, high = (0, low) if high is None else (low, high)
        if not self.draws:
            raise AssertionError(f"CORA drew from [{low}, {high}) beyond the case's plan")
        value = self.draws.popleft()
        if not low <= value < high:
            raise AssertionError(f"planned draw {value} outside [{low}, {high})")
        return value

    def choice(self, seq: Any) -> Any:
        if not self.draws:
            raise AssertionError(f"CORA chose among {len(seq)} beyond the case's plan")
        index = self.draws.popleft()
        if not 0 <= index < len(seq):
            raise AssertionError(f"planned choice {index} outside a sequence of {len(seq)}")
        return seq[index]


@contextlib.contextmanager
def scripted_random_state(draws: deque[int]) -> Iterator[None]:
    original = np.random.RandomState
    np.random.RandomState = lambda *args, **kwargs: ScriptedRandomState(draws)
    try:
        yield
    finally:
        np.random.RandomState = original


def cora_settings(case: cc.Case, repo: Path, workdir: Path) -> tuple[str, dict]:
    """CORA's policy name and config dict for ``case``: its config file, the case's
    additions (``None`` removes a key), the harness's sizes."""
    (config,) = json.loads((repo / "configs" / case.cora_config).read_text())
    for key, value in case.cora_extra.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    policy = config.pop("policy")
    config.pop("experiment", None)
    fam = case.family
    config.update(
        unroll_length=fam.unroll, batch_size=fam.batch, num_actors=fam.batch, device="cpu"
    )
    if policy != "impala":
        config.update(
            replay_buffer_frames=8 * fam.unroll * fam.batch, large_file_path=str(workdir / "large")
        )
    if policy in ("ewc", "online_ewc", "progress_and_compress"):
        config["n_fisher_samples"] = cc.FISHER_BATCHES
    if policy in ("ewc", "online_ewc"):
        config["ewc_per_task_min_frames"] = 0
    if policy == "progress_and_compress":
        config["num_train_steps_of_progress"] = 0
    if policy != CORA_POLICY[case.method]:
        raise AssertionError(f"{case.name}: CORA config runs {policy!r}")
    return policy, config


class CoraSide:
    """CORA's learner for ``case`` (see the module docstring)."""

    def __init__(self, case: cc.Case, repo: Path, workdir: Path, ours: OurSide):
        import gym
        from continual_rl.available_policies import get_available_policies

        self.case = case
        fam = case.family
        name, settings = cora_settings(case, repo, workdir)
        struct = get_available_policies()[name]
        config = struct.config()
        config.load_from_dict(dict(settings))
        expected = cc.CORA_ARCH[ours.hp["network"]]
        if config.conv_net_arch != expected:
            raise AssertionError(
                f"{case.name}: CORA's arch {config.conv_net_arch!r}, ours {expected!r}"
            )
        out = workdir / case.name.replace("/", "_")
        out.mkdir(parents=True, exist_ok=True)
        config.set_output_dir(str(out))
        observation_space = gym.spaces.Box(0, 255, fam.cora_obs, np.uint8)
        action_spaces = {i: gym.spaces.Discrete(k) for i, k in enumerate(fam.task_actions)}
        self.policy = struct.policy(config, observation_space, action_spaces)
        if hasattr(self.policy, "set_task_ids"):
            self.policy.set_task_ids(list(range(len(fam.task_actions))))
        self.mb = mb = self.policy.impala_trainer
        mb._stats_lock = threading.Lock()
        state = cora_state_dict(ours.policy)
        for model in (mb.learner_model, mb.actor_model):
            missing, unexpected = model.load_state_dict(state, strict=False)
            if unexpected or any(
                not k.endswith(("reward_sum", "reward_m2", "reward_count")) for k in missing
            ):
                raise AssertionError(
                    f"{case.name}: CORA's model lacks {unexpected}, ours lacks {missing}"
                )
        self.segments = cc.task_segments(case)
        self.scheduler = None
        self.scheduled: int | None = None
        if case.deviation.startswith("EWC consolidation time"):
            self._fisher_without_moment_updates()

    def _fisher_without_moment_updates(self) -> None:
        """The documented form: CORA's ``checkpoint_task`` with the model's running reward
        moments left as they are (CORA's ``compute_loss`` would also update them)."""
        checkpoint = self.mb.checkpoint_task

        def frozen(task_id, task_flags, model, online=False):
            model.update_running_moments = lambda rewards: None
            try:
                return checkpoint(task_id, task_flags, model, online=online)
            finally:
                del model.update_running_moments

        self.mb.checkpoint_task = frozen

    @staticmethod
    def tensors(batch: dict) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(np.ascontiguousarray(batch[k])) for k in CORA_KEYS}

    def task_flags(self, segment: int):
        """CORA's flags of a task run (``ImpalaEnvironmentRunner._create_task_flags``)."""
        from dotmap import DotMap

        task = self.segments[segment].task_id
        return DotMap(
            task_id=task,
            action_space_id=task,
            env_spec=None,
            mode="train",
            total_steps=self.segments[segment].steps,
        )

    def store(self, segment: int, batch: dict, extra: dict | None = None) -> None:
        """Each unroll of ``batch`` through CORA's ``on_act_unroll_complete`` (actor = column)."""
        tensors = self.tensors(batch)
        flags = self.task_flags(segment)
        for actor in range(self.case.family.batch):
            unroll = {k: v[:, actor] for k, v in tensors.items()}
            unroll.update(extra or {})
            self.mb.on_act_unroll_complete(flags, actor, None, None, unroll)

    def _lr_scheduler(self, segment: int):
        if segment != self.scheduled:  # Monobeast.train builds one per task run
            t_len, b = self.case.family.unroll, self.case.family.batch
            total = self.segments[segment].steps

            def lr_lambda(epoch):
                return 1 - min(epoch * t_len * b, total) / total

            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.mb.optimizer, lr_lambda)
            self.scheduled = segment
        return self.scheduler

    def play(self, index: int, step: cc.Step, batch: dict) -> dict:
        mb = self.mb
        segment = cc.step_segments(self.case)[index]
        if self.case.method != "ft":
            self.store(segment, batch)
        draws: deque[int] = deque()
        for call, (kind, entries) in enumerate(step.samples):
            for actor, entry in cc.sample_plan(self.case, index, call, kind, entries):
                draws.extend([0, 0] if kind == "replay" else [actor, entry])
        scheduler = self._lr_scheduler(segment)
        lr = mb.optimizer.param_groups[0]["lr"]
        model = mb.learner_model
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer = {  # RMSProp's state before the update, by parameter name
            n: {k: v.clone() if torch.is_tensor(v) else v for k, v in mb.optimizer.state[p].items()}
            for n, p in model.named_parameters()
            if mb.optimizer.state.get(p)
        }
        torch.manual_seed(cc.update_seed(self.case, index))
        with scripted_random_state(draws):
            stats = mb.learn(
                mb._model_flags,
                self.task_flags(segment),
                mb.actor_model,
                model,
                self.tensors(batch),
                (),
                mb.optimizer,
                scheduler,
                threading.Lock(),
            )
        if draws:
            raise AssertionError(f"{len(draws)} planned draws were not taken by CORA")
        record = self.record(lr, stats, before)
        record["optimizer"] = optimizer
        return record

    def record(self, lr: float, stats: dict, before: dict) -> dict:
        model = self.mb.learner_model
        keys = ["pg_loss", "baseline_loss", "entropy_loss"]
        if "kl_div_loss" in stats:  # P&C compress: CORA logs zeros for the RL losses
            keys = ["kl_div_loss"]
        keys += [k for k in ("ewc_loss", "policy_cloning_loss", "value_cloning_loss") if k in stats]
        losses = {k: float(stats[k]) for k in keys}
        losses["total_loss"] = float(stats["total_loss"])
        rec: dict[str, Any] = {
            "lr": lr,
            "losses": losses,
            "grad_norm": float(stats["total_norm"]),
            "grads": {},
            "params": {},
            "before": {},
        }
        for name, param in model.named_parameters():
            rec["params"][name] = param.detach().numpy().copy()
            rec["before"][name] = before[name].numpy()
            grad = param.grad
            rec["grads"][name] = (
                np.zeros(param.shape, np.float32) if grad is None else grad.numpy().copy()
            )
        if self.mb._model_flags.normalize_reward:
            rec["moments"] = {
                m: float(getattr(model, m)) for m in ("reward_sum", "reward_m2", "reward_count")
            }
        rec["terms"] = {}
        for task_id, info in (getattr(self.mb, "_tasks", None) or {}).items():
            if info.ewc_regularization_terms is not None:
                anchor, importance = info.ewc_regularization_terms
                rec["terms"][f"{task_id}/importance"] = {
                    k: v.numpy().copy() for k, v in importance.items()
                }
                rec["terms"][f"{task_id}/anchor"] = {k: v.numpy().copy() for k, v in anchor.items()}
        return rec

    def run(self) -> list[dict]:
        if self.case.method == "clear":
            replay = cc.replay_batch(self.case)
            self.store(0, replay, {"reservoir_val": torch.ones(1)})  # never evicted
        _, steps = cc.FLOWS[self.case.method]
        return [
            self.play(i, step, cc.unroll_batch(self.case, i, step.task))
            for i, step in enumerate(steps)
        ]


# ------------------------------------------------------------------------------ observations
def cora_observation_stream(case: cc.ObservationCase) -> dict[str, np.ndarray]:
    """CORA's side of ``case`` (see ``cora_cases.ObservationCase``): its task factory's env
    (innermost simulator seeded as ours, ``seeded_innermost_envs``) in TorchBeast's
    ``Environment``; frames flattened to ``(S * C, H, W)``."""
    from continual_rl.experiments.tasks import (
        make_atari_task,
        make_minihack_task,
        make_procgen_task,
    )
    from continual_rl.policies.impala.torchbeast.core.environment import Environment
    from continual_rl.utils.utils import Utils

    from benchmarks.parity.cora_reference import seeded_innermost_envs

    task_id = f"parity_{case.name}_{next(_TASK_IDS)}"  # CORA refuses a task id seen before
    with seeded_innermost_envs(case.seed):
        if case.family == "atari":  # atari_6_tasks_5_cycles
            task = make_atari_task.get_single_atari_task(
                task_id, 0, case.cora_env, 5e7, max_episode_steps=10000, full_action_space=True
            )
        elif case.family == "procgen":  # procgen_6_tasks_5_cycles
            task = make_procgen_task.get_single_procgen_task(
                task_id,
                0,
                case.cora_env,
                5e6,
                num_levels=200,
                start_level=0,
                distribution_mode="easy",
            )
        else:  # minihack_nav_paired_2_cycles
            task = make_minihack_task.get_single_minihack_task(task_id, 0, case.cora_env, 10e6)
        gym_env, _ = Utils.make_env(task._task_spec.env_spec, seed_to_set=case.seed)
    env = Environment(gym_env)
    out: dict[str, list] = {k: [] for k in cc.STREAM_KEYS}

    def frame(output: dict) -> None:
        out["frames"].append(output["frame"].reshape(-1, *output["frame"].shape[-2:]).numpy())
        out["prev_actions"].append(int(output["last_action"]))
        out["prev_rewards"].append(float(torch.clamp(output["reward"], -1, 1)))

    frame(env.initial())
    for action in cc.observation_actions(case):
        output = env.step(torch.tensor([[int(action)]]))
        frame(output)
        out["rewards"].append(float(output["reward"]))
        out["dones"].append(bool(output["done"]))
    env.close()
    return cc.stream_arrays(out)


_TASK_IDS = itertools.count()
