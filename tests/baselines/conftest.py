import pytest
import torch

torch.set_num_threads(1)

DIAG = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 4000,
    "progress": False,
    "report": False,
}


@pytest.fixture(scope="session")
def diag_overrides():
    return dict(DIAG)
