"""The torch wing's table of SB3 views (``cl_suites.job.torch.sb3_env``): one row per
suite family whose view differs from the single-agent one, no "is this MEAL?" test."""

from __future__ import annotations

from cl_suites.job.torch.sb3_env import (
    SB3_VIEWS,
    SINGLE_AGENT_VIEW,
    observation_location,
    sb3_env,
    view_of,
)
from cl_suites.sb3.adapter import SB3VecEnv
from cl_suites.suites import SUITES, find_suite


def test_meal_has_its_own_view_and_every_other_family_the_single_agent_one():
    assert set(SB3_VIEWS) == {"meal"}
    meal = view_of(find_suite("MEAL-2"))
    assert meal.adapter.__name__ == "MealSB3VecEnv" and meal.device_observations
    for info in SUITES.values():
        assert view_of(info) is SINGLE_AGENT_VIEW and not SINGLE_AGENT_VIEW.device_observations


def test_a_single_agent_suite_trains_on_host_observations_through_sb3vecenv():
    info = find_suite("Diagnostic")
    instance = info.instance(steps_per_task=45, n_tasks=2)
    schedule = instance.sequence.schedule(2)
    env, _ = info.runtime.vector_env(instance, schedule, "sync")
    venv = sb3_env(info, env, "cpu", device_observations=True)
    assert isinstance(venv, SB3VecEnv) and venv.vector_env is env
    assert observation_location(info, instance, "cpu", device_observations=True) == "host"
    venv.close()
