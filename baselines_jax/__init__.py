"""MEAL's IPPO and MAPPO (``JaxMAPPO``, ``MAPPOConfig``) in JAX: one compiled program per
``train`` call, ``K`` seeds vmapped.

``IPPOConfig`` (MEAL's settings), ``JaxIPPO`` (init_state / train / end_task / act /
state_dict / load_state_dict, ``compile_seconds``), ``TrainState`` and ``ActorCritic`` (the
flax network). The parameter converter between this family and the torch policies
(``params_from_torch``) is ``cl_suites.job.convert``, above both families.
"""

from baselines_jax.config import IPPOConfig
from baselines_jax.learner import JaxIPPO, Metrics, TrainState
from baselines_jax.mappo import JaxMAPPO, MAPPOConfig
from baselines_jax.network import ActorCritic

__all__ = [
    "ActorCritic",
    "IPPOConfig",
    "JaxIPPO",
    "JaxMAPPO",
    "MAPPOConfig",
    "Metrics",
    "TrainState",
]
