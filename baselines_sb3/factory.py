"""Building a baseline from resolved hyperparameters: the env wrappers a preset asks for and
the SB3 learner with its policy, for every suite (MEAL's IPPO included).

``cl_suites.job.hyperparameters.preset_settings`` says *what* to build (a plain dict of
hyperparameters); this module builds it. The main job, and any user script, call
:func:`wrap_env` on the sequence's SB3 VecEnv (``SB3VecEnv`` or ``MealSB3VecEnv``) and
then :func:`build_model`.
"""

from __future__ import annotations

from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from baselines_sb3.cl.base import ContinualMethod
from baselines_sb3.keywords import check_keywords
from baselines_sb3.learners import ContinualPPO, VTrace
from baselines_sb3.networks import FEATURE_EXTRACTORS, CReLU
from baselines_sb3.pnc_policy import ProgressCompressPolicy
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.wrappers import (
    PreviousActionReward,
    TaskIdObservation,
    VecClipReward,
    VecSignReward,
    VecTimeLimitAsTermination,
)
from cl_suites.core.task import TaskSequence

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "crelu": CReLU}
"""Hidden activations of the MLP trunks by name (``"crelu"``: twice as wide, Plasticine's
CReLU; the CNN feature extractors keep their ReLU)."""
_LEARNER_CLASSES = {"ppo": ContinualPPO, "vtrace": VTrace}
LEARNERS: tuple[str, ...] = tuple(_LEARNER_CLASSES)
"""The torch learners' names (each registered with the job: ``cl_suites.job.learners``)."""


def learner_class(learner: str) -> type[OnPolicyAlgorithm]:
    """``ContinualPPO`` for ``"ppo"``, ``VTrace`` for ``"vtrace"``."""
    if learner not in _LEARNER_CLASSES:
        raise ValueError(f"unknown learner {learner!r}; valid: {', '.join(LEARNERS)}")
    return _LEARNER_CLASSES[learner]


def wrap_env(
    env: VecEnv,
    sequence: TaskSequence,
    hp: dict[str, Any],
    *,
    multi_head: bool,
    task_id_input: bool,
) -> tuple[VecEnv, TaskIdObservation | None]:
    """The training env as the learner sees it.

    In order: the task id as an observation key when the policy needs it (multi-head,
    task-id input, or per-task action masks), the previous action and reward
    (``hp["previous_action_reward"]``), time-limit ends as terminal
    (``hp["time_limit_terminal"]``), reward clipping (``hp["reward_clip"]``) or sign
    (``hp["reward_sign"]``).

    Returns the wrapped env and the ``TaskIdObservation`` layer (``None`` if absent; a
    resumed run restores its task ids).
    """
    task_wrapper = None
    if multi_head or task_id_input or sequence.action_masks() is not None:
        env = task_wrapper = TaskIdObservation(env, len(sequence.tasks))
    if hp.get("previous_action_reward"):
        env = PreviousActionReward(env)
    if hp.get("time_limit_terminal"):
        env = VecTimeLimitAsTermination(env)
    if hp.get("reward_clip") is not None:
        env = VecClipReward(env, *hp["reward_clip"])
    if hp.get("reward_sign"):
        env = VecSignReward(env)
    return env, task_wrapper


def policy_kwargs(
    env: VecEnv,
    sequence: TaskSequence,
    hp: dict[str, Any],
    *,
    multi_head: bool,
    task_id_input: bool,
) -> dict[str, Any]:
    """``policy_kwargs`` of the learner for ``hp`` (network, heads, masks, init)."""
    kwargs: dict[str, Any] = {
        "num_tasks": len(sequence.tasks),
        "multi_head": multi_head,
        "task_id_input": task_id_input,
        "net_arch": list(hp["net_arch"]),
        "action_masks": sequence.action_masks(),
        "action_mask_mode": hp.get("action_mask_mode", "sampling"),
        "trunk_layer_norm": bool(hp.get("trunk_layer_norm", False)),
        "ortho_init": bool(hp.get("ortho_init", True)),
        "normalize_images": bool(hp.get("normalize_images", True)),
    }
    if hp.get("optimizer_kwargs"):
        kwargs["optimizer_kwargs"] = dict(hp["optimizer_kwargs"])
    activation = hp.get("activation", "tanh")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
    kwargs["activation_fn"] = ACTIVATIONS[activation]
    network = check_network(hp.get("network", "mlp"), sequence)
    if network != "mlp":
        kwargs["features_extractor_class"] = FEATURE_EXTRACTORS[network]
        if hp.get("cnn_features_dim"):
            kwargs["features_extractor_kwargs"] = {"features_dim": hp["cnn_features_dim"]}
    return kwargs


def check_network(network: str, sequence: TaskSequence) -> str:
    """``network`` when the policy can use it on ``sequence``'s observations (a CNN needs
    images); ``ValueError`` naming the valid ones otherwise. The run specification calls it
    before anything is built, the factory again when it builds the policy."""
    if network not in FEATURE_EXTRACTORS:
        raise ValueError(f"unknown network {network!r}; valid: {', '.join(FEATURE_EXTRACTORS)}")
    image = is_image_space(sequence.observation_space, check_channels=False)
    if network != "mlp" and not image:
        raise ValueError(
            f"network {network!r} needs image observations; {sequence.name} has "
            f"{sequence.observation_space} (use network 'mlp')"
        )
    return network


def build_model(
    learner: str,
    env: VecEnv,
    sequence: TaskSequence,
    hp: dict[str, Any],
    cl: ContinualMethod,
    *,
    method: str,
    seed: int,
    multi_head: bool,
    task_id_input: bool,
    device: str = "auto",
) -> OnPolicyAlgorithm:
    """The SB3 learner (``"ppo"``: ``ContinualPPO``; ``"vtrace"``: ``VTrace``) with a
    ``ContinualPolicy`` (``ProgressCompressPolicy`` for P&C) over ``env``.

    ``hp`` is ``hyperparameters.preset_settings(...)``'s dict. PPO's ``n_minibatches`` becomes the
    minibatch size from the env's width (``n_steps * env.num_envs // n_minibatches``; on
    MEAL ``env.num_envs`` counts agent slots, so IPPO's minibatches span every agent).
    Raises ``ValueError`` naming an option the learner does not support.
    """
    cls = learner_class(learner)
    kw = dict(hp["learner"])
    check_keywords("learner", learner, cls, kw)
    policy_cls = ProgressCompressPolicy if method == "pnc" else ContinualPolicy
    return cls(
        policy_cls,
        env,
        cl_method=cl,
        policy_kwargs=policy_kwargs(
            env, sequence, hp, multi_head=multi_head, task_id_input=task_id_input
        ),
        seed=seed,
        device=device,
        verbose=0,
        **kw,
    )


class _SpacesVecEnv(VecEnv):
    """A VecEnv of one env that has spaces and nothing else: what :func:`build_policy`
    wraps to get the observation layout the learner's policy takes."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space):
        super().__init__(1, observation_space, action_space)

    def _no_env(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a policy rebuilt from its spaces has no env to step")

    reset = step_async = step_wait = set_attr = env_method = _no_env

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [None]

    def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
        return [False]

    def close(self) -> None:
        pass


def build_policy(
    observation_space: spaces.Space,
    action_space: spaces.Space,
    sequence: TaskSequence,
    hp: dict[str, Any],
    *,
    method: str,
    multi_head: bool,
    task_id_input: bool,
) -> ContinualPolicy:
    """The policy :func:`build_model` gives the learner over a training env with these
    (per-env) spaces, built alone on the CPU: the observation layout of :func:`wrap_env`
    (task id, previous action and reward) and of SB3's own wrapping (image channels
    first), the policy class (``ProgressCompressPolicy`` for P&C) and ``policy_kwargs``.
    Its parameters are freshly initialised (torch's global generator is left as it was):
    load a saved state dict into it. A learner may attach more to its policy (V-trace's
    reward normaliser), which acting does not use."""
    env, _ = wrap_env(
        _SpacesVecEnv(observation_space, action_space),
        sequence,
        hp,
        multi_head=multi_head,
        task_id_input=task_id_input,
    )
    env = OnPolicyAlgorithm._wrap_env(env, verbose=0, monitor_wrapper=False)
    policy_cls = ProgressCompressPolicy if method == "pnc" else ContinualPolicy
    kwargs = policy_kwargs(env, sequence, hp, multi_head=multi_head, task_id_input=task_id_input)
    with th.random.fork_rng(devices=[]):
        return policy_cls(env.observation_space, env.action_space, lambda _: 0.0, **kwargs)
