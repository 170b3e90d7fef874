"""Continual-RL baselines on stable-baselines3: PPO and V-trace learners, their policies
and networks, EWC, online EWC, L2, MAS, P&C, CLEAR, the env wrappers and the evaluation
callback. The main job that trains them (``cl-suites run``, ``run_main_job``) is the job
layer ``cl_suites.job``."""

from cl_suites.errors import silence_legacy_gym_banner

silence_legacy_gym_banner()  # before stable-baselines3 imports the legacy gym package

from baselines_sb3.callbacks import ContinualEvalCallback, ProgressBarCallback, make_eval_policy
from baselines_sb3.cl import METHODS, ContinualMethod, attach_method, make_method
from baselines_sb3.learners import ContinualPPO, VTrace
from baselines_sb3.networks import CoraResidualCNN, ImpalaDeepCNN, ImpalaShallowCNN
from baselines_sb3.pnc_policy import ProgressCompressPolicy
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.vtrace import vtrace_targets
from baselines_sb3.wrappers import (
    PreviousActionReward,
    TaskIdObservation,
    VecClipReward,
    VecSignReward,
    VecTimeLimitAsTermination,
)

__all__ = [
    "METHODS",
    "ContinualEvalCallback",
    "ContinualMethod",
    "ContinualPPO",
    "ContinualPolicy",
    "CoraResidualCNN",
    "ImpalaDeepCNN",
    "ImpalaShallowCNN",
    "PreviousActionReward",
    "ProgressBarCallback",
    "ProgressCompressPolicy",
    "TaskIdObservation",
    "VTrace",
    "VecClipReward",
    "VecSignReward",
    "VecTimeLimitAsTermination",
    "attach_method",
    "make_eval_policy",
    "make_method",
    "vtrace_targets",
]
