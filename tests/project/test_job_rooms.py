"""The job layer as two wings behind one learner registry (issue 49), checked on the source.

``benchmarks/structure/rooms.py`` measures the tree with ``ast`` (its docstring says what
each figure counts); here, on this checkout:

* the job layer has its two wings, the packages ``cl_suites.job.torch`` and
  ``cl_suites.job.jax``;
* no family branch in ``cl_suites/job``: no comparison against ``"baselines_sb3"`` /
  ``"baselines_jax"`` / ``"ppo-jax"`` / ``JAX_LEARNER`` / ``TORCH_LEARNERS``, no
  ``isinstance`` on a family's learner class (the registry's entry knows its family);
* no function of one wing handed to a function of the other (before issue 49 the torch
  job handed its nested ``open_run`` to ``jax_job.run_jax_job``);
* no import (nor entry-point string) from one wing into the other;
* importing ``cl_suites.job.run_spec`` and the JAX wing imports neither torch nor
  stable-baselines3 at module level, not even through a module of the project.

The planted trees below check that each figure sees what it counts, and that a tree shaped
as issue 49 asks passes every check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.structure.rooms import JAX_PATH_NEVER_IMPORTS, measure
from tests.helpers import REPO


@pytest.fixture(scope="module")
def figures() -> dict:
    return measure(REPO)


def test_the_job_layer_has_two_wings(figures):
    assert {"cl_suites.job.torch", "cl_suites.job.jax"} <= set(figures["job_rooms"])


def test_no_family_branch_in_the_job_layer(figures):
    branches = figures["family_branches"]
    assert not branches, "branches on a learner family:\n" + "\n".join(branches)


def test_no_callback_passed_between_the_wings(figures):
    found = figures["callbacks_between_wings"]
    assert not found, "functions handed across the wings:\n" + "\n".join(found)


def test_no_arrow_between_the_wings(figures):
    arrows = figures["cross_wing_arrows"]
    assert not arrows, "imports between the wings:\n" + "\n".join(arrows)


def test_the_ppo_jax_path_imports_no_torch(figures):
    jax = figures["jax_path"]
    assert "cl_suites.job.run_spec" in jax["roots"] and len(jax["roots"]) > 1
    chains = [chain for chain in jax["chains"].values() if chain]
    assert not chains, "the ppo-jax path imports:\n" + "\n".join(chains)


# -- the figures on planted trees ----------------------------------------------------------
AFTER = {
    "cl_suites/__init__.py": "",
    "cl_suites/core/__init__.py": "",
    "cl_suites/core/task.py": "import numpy as np\n",
    "cl_suites/job/__init__.py": "",
    "cl_suites/job/learners.py": (
        "LEARNERS = {\n"
        "    'ppo': 'cl_suites.job.torch.train:train',\n"
        "    'ppo-jax': 'cl_suites.job.jax.train:train',\n"
        "}\n"
    ),
    "cl_suites/job/run_spec.py": "from cl_suites.job.learners import LEARNERS\n",
    "cl_suites/job/shared.py": (
        "from cl_suites.core.task import np\n\ndef open_run(spec):\n    pass\n"
    ),
    "cl_suites/job/torch/__init__.py": "",
    "cl_suites/job/torch/train.py": (
        "import torch\nfrom baselines_sb3.ppo import PPO\n"
        "from cl_suites.job.shared import open_run\n"
        "\ndef train(spec):\n    def log(x):\n        pass\n    PPO(callback=log)\n"
        "    open_run(spec)\n"
    ),
    "cl_suites/job/jax/__init__.py": "",
    "cl_suites/job/jax/train.py": (
        "from cl_suites.job import shared\n\ndef train(spec):\n"
        "    from baselines_jax import IPPO\n    IPPO(spec, lambda x: x)\n"
        "    shared.open_run(spec)\n"
    ),
    "baselines_sb3/__init__.py": "",
    "baselines_sb3/ppo.py": "import stable_baselines3\nfrom cl_suites.core import task\nPPO = 1\n",
    "baselines_jax/__init__.py": "import jax\nfrom cl_suites.core import task\nIPPO = 1\n",
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_tree_shaped_as_issue_49_asks_passes_every_check(tmp_path):
    """Wings as packages, the registry naming them by entry points, each wing calling the
    shared module and handing callbacks to its own family only."""
    figures = measure(_tree(tmp_path, AFTER))
    assert figures["job_rooms"] == ["cl_suites.job", "cl_suites.job.jax", "cl_suites.job.torch"]
    assert figures["family_branches"] == figures["callbacks_between_wings"] == []
    assert figures["cross_wing_arrows"] == figures["down_into_wing_by_import"] == []
    assert figures["down_into_wing_by_entry_point"] == [
        "cl_suites.job.learners -> cl_suites.job.jax.train (entry point)",
        "cl_suites.job.learners -> cl_suites.job.torch.train (entry point)",
    ]
    assert figures["arrows_back_up"] == []
    assert figures["jax_path"]["roots"] == [
        "cl_suites.job.run_spec",
        "cl_suites.job.jax",
        "cl_suites.job.jax.train",
    ]
    assert figures["jax_path"]["chains"] == dict.fromkeys(JAX_PATH_NEVER_IMPORTS)


def test_the_figures_find_what_is_planted(tmp_path):
    """A family branch, a callback and an import across the wings, torch at module level
    on the JAX path and an import up the layers: each is found, where it is."""
    planted = dict(AFTER)
    planted["cl_suites/job/shared.py"] = (
        "from cl_suites.core.task import np\n\ndef open_run(spec):\n"
        "    if spec.family == 'baselines_jax':\n        pass\n"
    )
    planted["cl_suites/job/jax/train.py"] = (
        "from cl_suites.job.shared import open_run\nfrom cl_suites.job.torch.train import train "
        "as torch_train\n\ndef train(spec):\n    def run(x):\n        pass\n"
        "    torch_train(spec, run)\n"
    )
    planted["cl_suites/core/task.py"] = "import numpy as np\n\ndef f():\n    import cl_suites.job\n"
    figures = measure(_tree(tmp_path, planted))
    assert figures["family_branches"] == [
        "cl_suites/job/shared.py:4: if spec.family == 'baselines_jax':"
    ]
    assert figures["callbacks_between_wings"] == [
        "cl_suites/job/jax/train.py:7: run (jax) passed to cl_suites.job.torch.train.train (torch)"
    ]
    assert figures["cross_wing_arrows"] == ["cl_suites.job.jax.train -> cl_suites.job.torch.train"]
    assert figures["jax_path"]["chains"]["torch"] == (
        "cl_suites.job.jax.train -> cl_suites.job.torch.train -> torch"
    )
    assert figures["arrows_back_up"] == ["cl_suites.core.task -> cl_suites.job"]


def test_the_wings_of_a_tree_before_issue_49(tmp_path):
    """Without the wing packages, the wings are the job modules of each family, and the
    torch job handing a nested function to the JAX job is a callback between them."""
    figures = measure(
        _tree(
            tmp_path,
            {
                "cl_suites/__init__.py": "",
                "cl_suites/job/__init__.py": "",
                "cl_suites/job/run_spec.py": "from baselines_sb3 import cl\n",
                "cl_suites/job/jax_job.py": "def run_jax_job(specs, open_run):\n    pass\n",
                "cl_suites/job/main_job.py": (
                    "import torch\n\ndef run(specs, family):\n"
                    "    from cl_suites.job.jax_job import run_jax_job\n"
                    "    if family == 'baselines_jax':\n"
                    "        def open_run(spec):\n            pass\n"
                    "        run_jax_job(specs, open_run=open_run)\n"
                ),
                "baselines_sb3/__init__.py": "",
                "baselines_sb3/cl.py": "import torch\n",
                "baselines_jax/__init__.py": "",
            },
        )
    )
    assert figures["wings"] == {
        "torch": ["cl_suites.job.main_job"],
        "jax": ["cl_suites.job.jax_job"],
    }
    assert figures["cross_wing_arrows"] == ["cl_suites.job.main_job -> cl_suites.job.jax_job"]
    assert figures["callbacks_between_wings"] == [
        "cl_suites/job/main_job.py:8: open_run (torch) passed to "
        "cl_suites.job.jax_job.run_jax_job (jax)"
    ]
    assert len(figures["family_branches"]) == 1
    assert figures["jax_path"]["chains"]["torch"] == (
        "cl_suites.job.run_spec -> baselines_sb3.cl -> torch"
    )
