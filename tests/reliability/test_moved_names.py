"""Names that moved with the job layer (issue 30) fail with one line naming their new place."""

from __future__ import annotations

import importlib

import pytest

from baselines_sb3 import MOVED_MODULES


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_a_moved_module_names_its_new_place(old):
    new = MOVED_MODULES[old]
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(old)
    assert str(info.value) == f"{old} moved to {new}"
    assert importlib.import_module(new).__name__ == new


def test_every_form_of_import_gets_the_message():
    with pytest.raises(ImportError, match=r"^baselines_sb3.main_job moved to cl_suites.job"):
        from baselines_sb3 import main_job  # noqa: F401
    with pytest.raises(ImportError, match=r"^baselines_sb3.main_job moved to cl_suites.job"):
        from baselines_sb3.main_job import run_main_job  # noqa: F401
    with pytest.raises(ImportError, match=r"^baselines_jax.convert moved to cl_suites.job"):
        import baselines_jax.convert  # noqa: F401
    with pytest.raises(ImportError, match=r"^cl_suites.training.run_random_agent moved to "):
        from cl_suites.training import run_random_agent  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="No module named 'baselines_sb3.nothing'"):
        importlib.import_module("baselines_sb3.nothing")  # other names: the usual error


def test_the_public_names_import_from_their_places():
    from baselines_sb3 import METHODS, ContinualPPO, VTrace, make_method  # noqa: F401
    from cl_suites import Recorder, make_env, make_vec  # noqa: F401
    from cl_suites.job import run_main_job, run_seed_group  # noqa: F401
    from cl_suites.random_agent import run_random_agent  # noqa: F401
