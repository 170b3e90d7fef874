"""Our side of the CORA parity cases (``cora_cases.py``): the learner a run builds, fed the
cases' rollouts, and our suites' task envs behind the learner's wrappers.

Our learner is built as a run builds it: ``hyperparameters.preset_settings(suite, "vtrace",
method, "paper")``, ``factory.wrap_env`` and ``factory.build_model`` on a stand-in VecEnv
with the suite's spaces and a schedule cursor (it is never stepped), ``cl.attach_method``;
only the sizes of ``cora_cases.HARNESS_SIZES`` are changed. Each rollout goes through the
path a real one takes: the switch fires inside its last env step, SB3's rollout buffer
holds it, the method's ``on_rollout_end`` sees it, then ``VTrace.train``. No CORA code is
imported here (the CI test runs this side alone).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecEnv

from baselines_sb3.cl import attach_method, make_method
from baselines_sb3.cl.base import rollout_from_buffer
from baselines_sb3.cora_weights import cora_names
from baselines_sb3.factory import build_model, wrap_env
from benchmarks.parity import cora_cases as cc
from cl_suites.core.task import Segment, TaskSwitch
from cl_suites.job import hyperparameters


class _Cursor(SimpleNamespace):
    """The parts of ``SequenceCursor`` the learner and the methods read."""

    @property
    def segment(self) -> Segment:
        return self.segments[self.index]


class ScheduleOnlyVecEnv(VecEnv):
    """A VecEnv with the suite's spaces and a schedule cursor, never stepped: the learner
    and the methods read the task position from it as from a sequence env."""

    def __init__(
        self,
        observation_space: spaces.Space,
        num_actions: int,
        num_envs: int,
        segments: list[Segment],
    ):
        super().__init__(num_envs, observation_space, spaces.Discrete(num_actions))
        self.cursor = _Cursor(num_envs=num_envs, segments=segments, index=0, task_step=0)
        self._listeners: list[Callable[[TaskSwitch], None]] = []

    @property
    def current_task(self) -> Segment:
        return self.cursor.segment

    def on_task_switch(self, callback: Callable[[TaskSwitch], None]) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def switch(self, total_step: int) -> None:
        previous = self.cursor.segment
        self.cursor.index += 1
        self.cursor.task_step = 0
        current = (
            self.cursor.segments[self.cursor.index]
            if self.cursor.index < len(self.cursor.segments)
            else None
        )
        for listener in list(self._listeners):
            listener(TaskSwitch(previous, current, total_step))

    def reset(self):
        raise NotImplementedError("the parity env is never stepped")

    def step_async(self, actions):
        raise NotImplementedError("the parity env is never stepped")

    def step_wait(self):
        raise NotImplementedError("the parity env is never stepped")

    def close(self) -> None:
        pass

    def get_attr(self, attr_name, indices=None):
        return [None] * self.num_envs

    def set_attr(self, attr_name, value, indices=None) -> None:
        pass

    def env_method(self, method_name, *args, indices=None, **kwargs):
        return [None] * self.num_envs

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * self.num_envs


class _Sequence(SimpleNamespace):
    """The parts of ``TaskSequence`` the factory reads."""

    def action_masks(self) -> np.ndarray | None:
        return self.masks


class ScriptedGenerator:
    """Stands in for a ``np.random.Generator``: ``integers(low, high, size)`` returns the
    planned draws in order (and checks they fit the bounds asked)."""

    def __init__(self) -> None:
        self.draws: deque[np.ndarray] = deque()

    def integers(self, low: int, high: int | None = None, size: int | None = None) -> np.ndarray:
        low, high = (0, low) if high is None else (low, high)
        if not self.draws:  # e.g. a consolidation in another update than CORA's
            raise AssertionError(
                f"a draw of {size} from [{low}, {high}) that the case does not plan"
            )
        draw = self.draws.popleft()
        if (size is not None and len(draw) != size) or draw.min() < low or draw.max() >= high:
            raise AssertionError(
                f"planned draw {draw.tolist()} does not fit [{low}, {high}) x {size}"
            )
        return draw


def method_kwargs(case: cc.Case, hp: dict) -> dict:
    """The preset's method settings with the harness's sizes."""
    kw = dict(hp["method"])
    fam = case.family
    frames = 8 * fam.unroll * fam.batch
    if case.method in ("ewc", "online-ewc", "pnc"):
        kw.update(fisher_batches=cc.FISHER_BATCHES, buffer_frames=frames)
    if case.method in ("ewc", "online-ewc"):
        kw["min_task_steps"] = 0
    if case.method == "pnc":
        kw["progress_updates"] = 0
    if case.method == "clear":
        kw["buffer_size"] = frames
    return kw


class OurSide:
    """Our learner for ``case``, built as a run builds it (see the module docstring);
    ``learner_changes``: learner settings changed from the preset (tests of the pins)."""

    def __init__(self, case: cc.Case, learner_changes: Mapping[str, Any] | None = None):
        th.manual_seed(case.seed)
        self.case = case
        fam = case.family
        self.hp = hyperparameters.preset_settings(fam.suite, "vtrace", case.method, "paper")
        self.hp["learner"]["n_steps"] = fam.unroll
        self.hp["learner"]["policy_lag"] = 0  # update for update: lockstep, as CORA's learner step
        self.hp["learner"].update(learner_changes or {})
        masks = np.zeros((len(fam.task_actions), fam.num_actions), dtype=bool)
        for task, k in enumerate(fam.task_actions):
            masks[task, :k] = True
        sequence = _Sequence(
            name=fam.suite,
            tasks=list(range(len(fam.task_actions))),
            observation_space=spaces.Box(0, 255, fam.raw_obs, np.uint8),
            masks=masks if fam.name == "minihack" else None,
        )
        self.base = ScheduleOnlyVecEnv(
            sequence.observation_space, fam.num_actions, fam.batch, cc.task_segments(case)
        )
        env, _ = wrap_env(self.base, sequence, self.hp, multi_head=False, task_id_input=False)
        self.method = make_method(case.method, seed=case.seed, **method_kwargs(case, self.hp))
        self.model = build_model(
            "vtrace",
            env,
            sequence,
            self.hp,
            self.method,
            method=case.method,
            seed=case.seed,
            multi_head=False,
            task_id_input=False,
            device="cpu",
        )
        self.model.set_logger(Logger(folder=None, output_formats=[]))
        attach_method(self.model, self.method, env)
        self.policy = self.model.policy
        cc.initial_parameters(self.policy, case.seed)
        self.names = {ours: keys[0] for ours, keys in cora_names(self.policy).items()}
        self.rng = ScriptedGenerator()
        for holder in (self.method, getattr(self.method, "buffer", None)):
            if holder is not None and hasattr(holder, "rng"):
                holder.rng = self.rng
        self.replay_terms: list[dict[str, float]] = []
        if case.method == "clear":
            self._fill_replay()

    # -- inputs in our layout --------------------------------------------------------------
    def observation(self, batch: Mapping[str, np.ndarray], t: Any, task: int) -> dict:
        """Frames ``t`` of ``batch`` as the policy's observation (``(..., B, *space)``)."""
        fam = self.case.family
        frames = np.asarray(batch["frame"][t])
        lead = frames.shape[:-4]
        obs = {
            "obs": frames.reshape(*lead, *fam.channels_first_obs),
            "prev_action": np.asarray(batch["last_action"][t], np.int64),
            "prev_reward": np.clip(np.asarray(batch["reward"][t], np.float32), -1, 1)[..., None],
        }
        if "task_id" in self.policy.observation_space.spaces:
            obs["task_id"] = np.full(lead, task, dtype=np.int64)
        return obs

    def learner_rewards(self, rewards: np.ndarray) -> np.ndarray:
        clip = self.hp.get("reward_clip")
        return np.clip(rewards, *clip) if clip is not None else rewards

    def _fill_replay(self) -> None:
        batch = cc.replay_batch(self.case)
        obs = self.observation(batch, slice(None), 0)
        obs["prev_action"] = obs["prev_action"][..., None]
        if "task_id" in obs:
            obs["task_id"] = obs["task_id"][..., None]
        self.method.buffer.add(
            obs,
            batch["action"][1:],
            batch["policy_logits"],
            batch["baseline"],
            self.learner_rewards(batch["reward"][1:]),
            batch["done"],
        )
        self.method.buffer.rng = self.rng

    # -- one rollout -----------------------------------------------------------------------
    def load_state(self, record: Mapping[str, Any]) -> None:
        """Start the next update from another run's state: its parameters before the update
        (``record["before"]``) and RMSProp's state (``record["optimizer"]``), by CORA's
        names. The methods' anchors then follow (they are the parameters at consolidation)."""
        optimizer = self.policy.optimizer
        with th.no_grad():
            for name, param in self.policy.named_parameters():
                key = self.names[name]
                param.copy_(th.as_tensor(record["before"][key]))
                state = record["optimizer"].get(key)
                if state is None:
                    optimizer.state.pop(param, None)
                else:
                    optimizer.state[param] = {k: th.as_tensor(v).clone() for k, v in state.items()}

    def play(self, step_index: int, step: cc.Step, batch: Mapping[str, np.ndarray]) -> dict:
        """Collect ``batch`` as rollout ``step_index`` (the switch, when it is the task's
        last, inside its last env step), hand it to the method, update; return the record."""
        fam, model = self.case.family, self.model
        t_len, b = fam.unroll, fam.batch
        first = model.num_timesteps
        model.num_timesteps += t_len * b - b
        self.base.cursor.task_step += t_len * b
        if step.last_of_task:
            self.base.switch(first + t_len * b)
        model.num_timesteps += b
        buf = model.rollout_buffer
        buf.reset()
        behaviour = th.log_softmax(th.as_tensor(batch["policy_logits"]), -1)
        for t in range(t_len):
            action = batch["action"][t + 1]
            buf.add(
                self.observation(batch, t, step.task),
                action.reshape(b, 1),
                self.learner_rewards(batch["reward"][t + 1]),
                batch["done"][t].astype(np.float32),
                th.as_tensor(batch["baseline"][t + 1]).view(b, 1),
                behaviour[t + 1].gather(-1, th.as_tensor(action).view(b, 1)).view(b),
            )
        last_obs = self.observation(batch, t_len, step.task)
        with th.no_grad():
            tensors = {k: th.as_tensor(v) for k, v in last_obs.items()}
            last_values = self.policy.predict_values(tensors)
        buf.compute_returns_and_advantage(last_values, batch["done"][t_len])
        model._last_obs = last_obs
        model._last_episode_starts = batch["done"][t_len].astype(np.float32)
        for call, (kind, entries) in enumerate(step.samples):
            pairs = cc.sample_plan(self.case, step_index, call, kind, entries)
            self.rng.draws.append(
                np.array([a if kind == "replay" else e * b + a for a, e in pairs])
            )
        self.method.on_rollout_end(rollout_from_buffer(model, first))
        before = {n: p.detach().clone() for n, p in self.policy.named_parameters()}
        lr = model.current_learning_rate()
        model.logger.name_to_value.clear()
        self.replay_terms.clear()
        th.manual_seed(cc.update_seed(self.case, step_index))
        model.train()
        if self.rng.draws:
            raise AssertionError(f"{len(self.rng.draws)} planned draws were not taken")
        return self._record(lr, before)

    def _record(self, lr: float, before: Mapping[str, th.Tensor]) -> dict:
        logged = dict(self.model.logger.name_to_value)
        hp = self.model
        losses: dict[str, float] = {}
        if "train/policy_loss" in logged:
            losses = {
                "pg_loss": logged["train/policy_loss"],
                "baseline_loss": hp.vf_coef * logged["train/value_loss"],
                "entropy_loss": hp.ent_coef * logged["train/entropy_loss"],
            }
        for terms in self.replay_terms:  # CLEAR: CORA's losses run over new + replayed unrolls
            losses["pg_loss"] += terms["policy_gradient"]
            losses["baseline_loss"] += hp.vf_coef * terms["value"]
            losses["entropy_loss"] -= hp.ent_coef * terms["entropy"]
            losses["policy_cloning_loss"] = self.method.policy_cloning * terms["policy_cloning"]
            losses["value_cloning_loss"] = self.method.value_cloning * terms["value_cloning"]
        if self.case.method in ("ewc", "online-ewc"):
            losses["ewc_loss"] = logged.get("train/cl_loss", 0.0)
        if "train/pnc_distill_kl" in logged:
            losses["kl_div_loss"] = logged["train/pnc_distill_kl"]
            losses["ewc_loss"] = logged.get("train/pnc_kb_ewc", 0.0)
        losses["total_loss"] = sum(losses.values())
        record: dict[str, Any] = {
            "lr": lr,
            "losses": losses,
            "grad_norm": logged["train/grad_norm"],
            "grads": {},
            "params": {},
            "before": {},
        }
        for name, param in self.policy.named_parameters():
            key = self.names[name]
            record["params"][key] = param.detach().numpy().copy()
            record["before"][key] = before[name].numpy()
            grad = param.grad
            record["grads"][key] = (
                np.zeros(param.shape, np.float32) if grad is None else grad.numpy().copy()
            )
        normalizer = getattr(self.policy, "reward_normalizer", None)
        if normalizer is not None:
            record["moments"] = {
                m: float(getattr(normalizer, m))
                for m in ("reward_sum", "reward_m2", "reward_count")
            }
        record["terms"] = self.terms()
        return record

    def terms(self) -> dict[str, dict[str, np.ndarray]]:
        """The method's consolidated ``(importance, anchor)`` per term, under CORA's names
        (EWC: by task id; online EWC: ``"online"``; P&C: the KB's, ``"online"``, named as
        the parameters of CORA's KB column)."""
        out: dict[str, dict[str, np.ndarray]] = {}
        if self.case.method in ("ewc", "online-ewc"):
            items = self.method.terms.items()
            rename = self.names.__getitem__
        elif self.case.method == "pnc" and self.method.kb_terms is not None:
            items = [("online", self.method.kb_terms)]
            rename = lambda n: self.names[n][len("knowledge_base.") :]  # noqa: E731
        else:
            return out
        for key, (importance, anchor) in items:
            out[f"{key}/importance"] = {rename(n): v.numpy().copy() for n, v in importance.items()}
            out[f"{key}/anchor"] = {rename(n): v.numpy().copy() for n, v in anchor.items()}
        return out

    def run(self, start_from: list[Mapping[str, Any]] | None = None) -> list[dict]:
        """Play the case's schedule; one record per update. ``start_from``: another run's
        records (CORA's), whose state each update starts from (``load_state``): then every
        update is compared from the same state, and float32 noise cannot compound (it
        does, through RMSProp's small eps and EWC's lambda of 1e4, over a free run)."""
        if self.case.method == "clear":
            self._watch_replay_terms()
        _, steps = cc.FLOWS[self.case.method]
        records = []
        for i, step in enumerate(steps):
            if start_from is not None:
                self.load_state(start_from[i])
            records.append(self.play(i, step, cc.unroll_batch(self.case, i, step.task)))
        return records

    def _watch_replay_terms(self) -> None:
        method = self.method
        compute = method.replay_terms

        def replay_terms(policy, batch):
            terms = compute(policy, batch)
            self.replay_terms.append({k: float(v.detach()) for k, v in terms.items()})
            return terms

        method.replay_terms = replay_terms


def our_observation_stream(case: cc.ObservationCase) -> dict[str, np.ndarray]:
    """Our side: ``frames`` ``(steps + 1, C, H, W)`` uint8 (the policy's layout),
    ``rewards``, ``dones`` ``(steps,)``, ``prev_actions``, ``prev_rewards`` ``(steps + 1,)``
    (the previous action and clipped reward inputs of each frame)."""
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.vec_env import DummyVecEnv

    from baselines_sb3.wrappers import PreviousActionReward
    from cl_suites.suites import find_suite

    sequence = find_suite(case.suite).build_sequence()
    venv = PreviousActionReward(DummyVecEnv([sequence.tasks[case.task].make_train]))
    venv = BaseAlgorithm._wrap_env(venv, verbose=0, monitor_wrapper=False)  # as the learner
    venv.seed(case.seed)
    out: dict[str, list] = {k: [] for k in cc.STREAM_KEYS}

    def frame(obs: dict) -> None:
        out["frames"].append(obs["obs"][0])
        out["prev_actions"].append(int(obs["prev_action"][0]))
        out["prev_rewards"].append(float(obs["prev_reward"][0, 0]))

    frame(venv.reset())
    for action in cc.observation_actions(case):
        obs, reward, done, _ = venv.step(np.array([action]))
        frame(obs)
        out["rewards"].append(float(reward[0]))
        out["dones"].append(bool(done[0]))
    venv.close()
    return cc.stream_arrays(out)
