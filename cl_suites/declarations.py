"""The names every layer reads: the CL methods, the learners and the random agent.

Declared once here, in plain data (no torch, no JAX), so that the command line parses and
prints ``--help`` without importing a learner family, and the families, the catalog and
the job read the same names. The classes behind the names live in their families
(``baselines_sb3.cl.METHODS``, ``baselines_sb3.factory``, ``baselines_jax``).
"""

from __future__ import annotations

RANDOM_METHOD = "random"
"""``--method random``: the random agent (``cl_suites.random_agent``), no learner."""
CL_METHODS: tuple[str, ...] = ("ft", "ewc", "online-ewc", "l2", "mas", "pnc", "clear")
"""The built-in CL methods (``baselines_sb3.cl.METHODS`` holds their classes)."""
MEAL_METHODS: tuple[str, ...] = ("ft", "ewc", "online-ewc", "mas", "l2")
"""The CL methods MEAL's baselines define (their values: ``cl_suites.job.presets``; the
JAX IPPO compiles these)."""
TORCH_LEARNERS: tuple[str, ...] = ("ppo", "vtrace")
"""The stable-baselines3/torch learners (``baselines_sb3.factory``)."""
JAX_LEARNER = "ppo-jax"
"""The JAX IPPO learner's name (``--learner ppo-jax``; ``baselines_jax``), MEAL's default."""
LEARNERS: tuple[str, ...] = (*TORCH_LEARNERS, JAX_LEARNER)
"""Every ``--learner`` name (``cl_suites.job.learners.LEARNER_ENTRIES`` holds their entries)."""
