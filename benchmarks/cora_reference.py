"""CORA's own code (AGI-Labs/continual_rl at f2754bb), imported from a checkout and run
with runtime shims only.

Shared by ``parity_cora.py`` (update-for-update checks and side-by-side learning) and
``bench_cora.py`` (speed). CORA's code is never copied into this project and no file of
the checkout is edited: pass the path of a checkout at f2754bb.

CORA's code needs an older ``gym`` than the project's, so it runs in a scratch
interpreter built by ``benchmarks/cora_env.sh`` (a venv holding ``gym==0.25.2`` and
``dotmap`` that reuses the project's ``.venv`` packages for everything else). The shims,
installed by :func:`install_shims` before CORA is imported, are:

* ``torchvision``: an empty module (``image_task.py`` imports it and never uses it);
* ``np.bool``: numpy's removed alias of ``bool`` (CORA's file-backed replay tensors);
* MiniHack: the installed MiniHack (nle 1.x, gymnasium API) registered under the old gym
  API as ``MiniHack-<name>``: ``reset()`` returns the observation, ``step()`` returns
  ``(obs, reward, terminated or truncated, info)``, ``seed(core, disp, reseed)`` is NLE's,
  and ``_vardir`` is NetHack's working directory (CORA's
  ``MiniHackMakeVecSafeWrapper`` changes into it around every call);
* Procgen: ``procgen2`` provides the ``procgen`` module CORA's ``gym.make`` entry points
  name; Atari: ale-py's envs registered under the old gym ids CORA asks for.

CORA's learner, losses, networks, replay buffers and its own env wrappers run unchanged.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

CORA_COMMIT = "f2754bb"
ENV_COMMAND = "bash benchmarks/cora_env.sh"
"""The command that builds the scratch interpreter CORA's code runs in."""
CORA_PYTHON = Path(os.environ.get("CORA_VENV", "/tmp/cora/venv")) / "bin" / "python"
"""The scratch interpreter ``cora_env.sh`` builds (``$CORA_VENV``, default /tmp/cora/venv)."""

MARKER_FILES = (
    "continual_rl/policies/impala/torchbeast/monobeast.py",
    "continual_rl/policies/clear/clear_monobeast.py",
    "continual_rl/policies/ewc/ewc_monobeast.py",
    "continual_rl/policies/progress_and_compress/progress_and_compress_monobeast.py",
    "continual_rl/experiment_specs.py",
)


class CoraSetupError(RuntimeError):
    """CORA's checkout or the interpreter it needs is missing or wrong (one line)."""


def check_cora_repo(repo: Path | str | None) -> Path:
    """The checkout path, or a :class:`CoraSetupError` naming what is wrong.

    A checkout is accepted when it holds CORA's learner files and, where it is a git
    work tree, its HEAD is f2754bb.
    """
    if repo is None:
        raise CoraSetupError(
            f"--cora-repo is required: a checkout of AGI-Labs/continual_rl at {CORA_COMMIT}"
        )
    path = Path(repo).expanduser()
    missing = [name for name in MARKER_FILES if not (path / name).is_file()]
    if missing:
        raise CoraSetupError(
            f"--cora-repo {str(repo)!r} is not a checkout of AGI-Labs/continual_rl at "
            f"{CORA_COMMIT}: {missing[0]} is missing"
        )
    if (path / ".git").exists():
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        if head and not head.startswith(CORA_COMMIT):
            raise CoraSetupError(
                f"--cora-repo {str(repo)!r} is at {head[:7]}, not {CORA_COMMIT} "
                f"(git -C {repo} checkout {CORA_COMMIT})"
            )
    return path


def check_cora_python() -> None:
    """Raise :class:`CoraSetupError` unless this interpreter can import CORA's code."""
    try:
        import gym
    except ImportError:
        raise CoraSetupError(
            f"CORA's code needs gym==0.25.2, which this interpreter lacks; build its "
            f"interpreter with `{ENV_COMMAND}` and run this script with {CORA_PYTHON}"
        ) from None
    if not gym.__version__.startswith("0.25."):
        raise CoraSetupError(
            f"CORA's code needs gym==0.25.2, this interpreter has gym {gym.__version__}; build "
            f"its interpreter with `{ENV_COMMAND}` and run this script with {CORA_PYTHON}"
        )
    for module in ("dotmap", "torch", "minihack", "cv2"):
        if importlib.util.find_spec(module) is None:
            raise CoraSetupError(
                f"CORA's code needs {module!r}, which this interpreter lacks; build its "
                f"interpreter with `{ENV_COMMAND}`"
            )


# --- shims ------------------------------------------------------------------------------


def _stub_torchvision() -> None:
    try:
        importlib.import_module("torchvision")
    except Exception:
        sys.modules["torchvision"] = types.ModuleType("torchvision")


def _restore_np_bool() -> None:
    import numpy as np

    if "bool" not in vars(np):
        np.bool = bool


class _OldGymMiniHack:
    """A gymnasium MiniHack env behind the old gym API (gym 0.25, ``new_step_api=False``)."""

    metadata = {"render_modes": []}
    reward_range = (-float("inf"), float("inf"))
    spec = None

    def __init__(self, name: str, **kwargs) -> None:
        import gym
        import gymnasium
        import minihack  # noqa: F401  (registers the gymnasium ids)

        self._env = gymnasium.make(f"MiniHack-{name}", disable_env_checker=True, **kwargs)
        self._vardir = self._env.unwrapped.nethack._vardir  # CORA changes into it
        space = self._env.observation_space
        self.observation_space = gym.spaces.Dict(
            {k: gym.spaces.Box(v.low, v.high, v.shape, v.dtype) for k, v in space.spaces.items()}
        )
        self.action_space = gym.spaces.Discrete(int(self._env.action_space.n))

    @property
    def unwrapped(self):
        return self

    def reset(self, **kwargs):
        obs, _ = self._env.reset()
        return obs

    def step(self, action):
        obs, reward, terminated, truncated, info = self._env.step(int(action))
        return obs, float(reward), bool(terminated or truncated), info

    def seed(self, core=None, disp=None, reseed=False):
        return self._env.unwrapped.seed(core, disp, reseed)

    def render(self, *args, **kwargs):
        return None

    def close(self):
        self._env.close()


def _register_minihack() -> None:
    import gym
    import gymnasium
    import minihack  # noqa: F401

    for env_id in list(gymnasium.registry):
        if not env_id.startswith("MiniHack-") or env_id in gym.envs.registry:
            continue
        name = env_id[len("MiniHack-") :]
        gym.register(
            id=env_id,
            entry_point=lambda name=name, **kwargs: _OldGymMiniHack(name, **kwargs),
            order_enforce=False,
            disable_env_checker=True,
        )


CORA_MODULES = (
    "continual_rl.available_policies",
    "continual_rl.policies.impala.torchbeast.monobeast",
    "continual_rl.policies.ewc.ewc_monobeast",
    "continual_rl.policies.clear.clear_monobeast",
    "continual_rl.policies.progress_and_compress.progress_and_compress_policy",
    "continual_rl.experiments.tasks.make_atari_task",
    "continual_rl.experiments.tasks.make_procgen_task",
    "continual_rl.experiments.tasks.make_minihack_task",
)
"""The CORA modules the parity harness uses; :func:`import_cora` imports them first."""


def import_cora(repo: Path) -> None:
    """Install the shims and import :data:`CORA_MODULES`, or raise :class:`CoraSetupError`
    naming the module that fails (a missing package: the command that builds the
    interpreter)."""
    install_shims(repo)
    for module in CORA_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise CoraSetupError(
                f"CORA's {module} does not import here ({e}); build CORA's interpreter with "
                f"`{ENV_COMMAND}` and run this script with {CORA_PYTHON}"
            ) from None


def install_shims(repo: Path) -> None:
    """Put CORA's checkout on ``sys.path`` and install the shims the module docstring
    lists. Idempotent; forked actors inherit them."""
    check_cora_python()
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    _stub_torchvision()
    _restore_np_bool()
    _register_minihack()
