"""Building a baseline from resolved hyperparameters: the env wrappers a preset asks for and
the SB3 learner with its policy.

``baselines_sb3.presets.resolve`` says *what* to build (a plain dict of hyperparameters);
this module builds it. The main job, and any user script, call :func:`wrap_env` on the
sequence's SB3 VecEnv and then :func:`build_model`.
"""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import get_linear_fn
from stable_baselines3.common.vec_env import VecEnv

from baselines_sb3.cl.base import ContinualMethod
from baselines_sb3.learners import ContinualPPO, VTrace
from baselines_sb3.networks import FEATURE_EXTRACTORS
from baselines_sb3.policies import ContinualPolicy, ProgressCompressPolicy
from baselines_sb3.wrappers import TaskIdObservation, VecClipReward
from cl_suites.core.task import TaskSequence

LEARNERS: tuple[str, ...] = ("ppo", "vtrace")


def wrap_env(
    env: VecEnv,
    sequence: TaskSequence,
    hp: dict[str, Any],
    *,
    multi_head: bool,
    task_id_input: bool,
) -> tuple[VecEnv, TaskIdObservation | None]:
    """The training env as the learner sees it: the task id as an observation key when the
    policy needs it, and reward clipping when the preset clips (``hp["reward_clip"]``).

    Returns the wrapped env and the ``TaskIdObservation`` layer (``None`` if absent; a
    resumed run restores its task ids).
    """
    task_wrapper = None
    if multi_head or task_id_input:
        env = task_wrapper = TaskIdObservation(env, len(sequence.tasks))
    if hp.get("reward_clip") is not None:
        env = VecClipReward(env, *hp["reward_clip"])
    return env, task_wrapper


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

    ``hp`` is ``presets.resolve(...)``'s dict: ``learner`` (algorithm kwargs), ``network``,
    ``net_arch``, ``cnn_features_dim``.
    """
    if learner not in LEARNERS:
        raise ValueError(f"unknown learner {learner!r}; valid: {', '.join(LEARNERS)}")
    policy_cls = ProgressCompressPolicy if method == "pnc" else ContinualPolicy
    policy_kwargs: dict[str, Any] = {
        "num_tasks": len(sequence.tasks),
        "multi_head": multi_head,
        "task_id_input": task_id_input,
        "net_arch": list(hp["net_arch"]),
    }
    if hp.get("network") == "mlp":  # MEAL: an MLP on the flattened grid of counts and flags
        policy_kwargs["normalize_images"] = False
    elif is_image_space(sequence.observation_space, check_channels=False):
        extractor = FEATURE_EXTRACTORS[hp["network"]]
        policy_kwargs["features_extractor_class"] = extractor
        if hp.get("cnn_features_dim"):
            policy_kwargs["features_extractor_kwargs"] = {"features_dim": hp["cnn_features_dim"]}
    kw = dict(hp["learner"])
    if learner == "ppo" and kw.pop("lr_anneal", False):
        kw["learning_rate"] = get_linear_fn(kw["learning_rate"], 0.0, 1.0)
    algorithm = ContinualPPO if learner == "ppo" else VTrace
    return algorithm(
        policy_cls,
        env,
        cl_method=cl,
        policy_kwargs=policy_kwargs,
        seed=seed,
        device=device,
        verbose=0,
        **kw,
    )
