"""Registers every catalog suite with gymnasium (done on ``import cl_suites``)."""

from __future__ import annotations

import gymnasium as gym

from cl_suites.suites import SUITES


def register_all() -> None:
    for suite in SUITES.values():
        if suite.api == "gymnasium" and suite.id not in gym.registry:
            gym.register(
                id=suite.id,
                entry_point="cl_suites.api:make_env",
                kwargs={"suite": suite.name},
                disable_env_checker=False,
            )
