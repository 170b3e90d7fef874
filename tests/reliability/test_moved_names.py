"""The public names import from their places; ``cl_suites.training.run_random_agent``,
which moved with the job layer (issue 30), fails with one line naming its new place."""

from __future__ import annotations

import pytest


def test_the_moved_random_agent_names_its_new_place():
    with pytest.raises(ImportError, match=r"^cl_suites.training.run_random_agent moved to "):
        from cl_suites.training import run_random_agent  # noqa: F401


def test_the_public_names_import_from_their_places():
    from baselines_sb3 import METHODS, ContinualPPO, VTrace, make_method  # noqa: F401
    from cl_suites import Recorder, make_env, make_vec  # noqa: F401
    from cl_suites.job import run_main_job, run_seed_group  # noqa: F401
    from cl_suites.random_agent import run_random_agent  # noqa: F401
