"""CORA's own code (AGI-Labs/continual_rl at f2754bb), imported from a checkout and run
with runtime shims only.

Shared by ``parity_cora.py`` (update-for-update checks and side-by-side learning) and
``bench_cora.py`` (speed). CORA's code is never copied into this project and no file of
the checkout is edited: pass the path of a checkout at f2754bb.

CORA's code needs an older ``gym`` than the project's, so it runs in a scratch
interpreter built by ``benchmarks/parity/cora_env.sh`` (a venv holding ``gym==0.25.2`` and
``dotmap`` that reuses the project's ``.venv`` packages for everything else). The shims,
installed by :func:`install_shims` before CORA is imported, are:

* ``torchvision``: an empty module (``image_task.py`` imports it and never uses it);
* ``np.bool`` / ``np.bool8``: numpy's removed aliases (CORA's file-backed replay tensors;
  gym 0.25's passive env checker, which procgen's old-gym ids go through);
* MiniHack: the installed MiniHack (nle 1.x, gymnasium API) registered under the old gym
  API as ``MiniHack-<name>``: ``reset()`` returns the observation, ``step()`` returns
  ``(obs, reward, terminated or truncated, info)``, ``seed(core, disp, reseed)`` is NLE's,
  and ``_vardir`` is NetHack's working directory (CORA's
  ``MiniHackMakeVecSafeWrapper`` changes into it around every call);
* Procgen: ``procgen2`` provides the ``procgen`` module (and its old-gym registration)
  CORA's ``gym.make("procgen:procgen-<game>-v0")`` names;
* Atari: ale-py's games registered under the old gym ids CORA asks for
  (``<Game>NoFrameskip-v4``), with the settings those ids had (no frame skip, no sticky
  actions, gym's episode cap), behind the old gym API.

:func:`seeded_innermost_envs` seeds the simulators CORA builds as ours are seeded, for the
observation comparison (CORA leaves MiniHack and procgen unseeded).

CORA's learner, losses, networks, replay buffers and its own env wrappers run unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

CORA_COMMIT = "f2754bb"
ENV_COMMAND = "bash benchmarks/parity/cora_env.sh"
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


def cora_thread_env(threads: int = 1) -> dict[str, str]:
    """The variables of a process that runs CORA's ``Monobeast``, set before torch is
    imported: ``OMP_NUM_THREADS`` (1 unless told: CORA's ``Monobeast.setup`` asks for it;
    its actors fork after torch started OpenMP, and with a thread pool they hang at their
    first step, "Steps 0 @ 0.0 SPS"). ``parity_cora train-cora`` and
    ``bench_cora``'s CORA child both take it from here."""
    return {"OMP_NUM_THREADS": str(threads)}


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
            f"{CORA_COMMIT}: {missing[0]} is missing (get one with `git clone "
            f"https://github.com/AGI-Labs/continual_rl && git -C continual_rl checkout "
            f"{CORA_COMMIT}`)"
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
    from cl_suites.errors import silence_legacy_gym_banner

    silence_legacy_gym_banner()  # gym prints an "unmaintained" notice on import
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
    if "bool8" not in vars(np):  # gym 0.25's passive env checker (procgen's ids use it)
        np.bool8 = np.bool_


def _old_gym_space(space):
    import gym
    import gymnasium

    if isinstance(space, gymnasium.spaces.Dict):
        return gym.spaces.Dict({k: _old_gym_space(v) for k, v in space.spaces.items()})
    if isinstance(space, gymnasium.spaces.Discrete):
        return gym.spaces.Discrete(int(space.n))
    return gym.spaces.Box(space.low, space.high, space.shape, space.dtype)


class _OldGymEnv:
    """A gymnasium env behind the old gym API (gym 0.25, ``new_step_api=False``):
    ``reset()`` returns the observation, ``step()`` ``(obs, reward, terminated or
    truncated, info)``; ``unwrapped`` is this adapter (CORA's wrappers read the simulator's
    attributes through it)."""

    metadata = {"render_modes": []}
    reward_range = (-float("inf"), float("inf"))
    spec = None

    def __init__(self, env) -> None:
        self._env = env
        self.observation_space = _old_gym_space(env.observation_space)
        self.action_space = _old_gym_space(env.action_space)
        self._next_seed: int | None = None

    @property
    def unwrapped(self):
        return self

    def reset(self, **kwargs):
        seed, self._next_seed = self._next_seed, None
        obs, _ = self._env.reset(seed=seed)
        return obs

    def step(self, action):
        obs, reward, terminated, truncated, info = self._env.step(int(action))
        return obs, float(reward), bool(terminated or truncated), info

    def render(self, *args, **kwargs):
        return None

    def close(self):
        self._env.close()


_HARNESS_SEED: dict[str, int] = {}
"""Set by :func:`seeded_innermost_envs` while the parity harness builds CORA's envs."""


class _OldGymMiniHack(_OldGymEnv):
    """The installed MiniHack (nle 1.x, gymnasium) as CORA's ``gym.make("MiniHack-...")``
    env. ``seed(core, disp, reseed)`` is NLE's; ``_vardir`` is NetHack's working directory
    (CORA's ``MiniHackMakeVecSafeWrapper`` changes into it around every call). Built
    inside :func:`seeded_innermost_envs`, it seeds NetHack as our envs do (the documented
    deviation, ``docs/fidelity.md`` MiniHack15 "seeding")."""

    def __init__(self, name: str, **kwargs) -> None:
        import gymnasium
        import minihack  # noqa: F401  (registers the gymnasium ids)
        import numpy as np

        seed = _HARNESS_SEED.get("seed")
        if seed is not None:
            kwargs.setdefault("fix_moon_phase", True)
        super().__init__(gymnasium.make(f"MiniHack-{name}", disable_env_checker=True, **kwargs))
        self._vardir = self._env.unwrapped.nethack._vardir
        self._seeds = None if seed is None else np.random.default_rng(seed)
        self._next_seed = seed

    def reset(self, **kwargs):
        if self._seeds is not None:  # as cl_suites' NetHackSeeding, before every reset
            core, disp = (int(s) for s in self._seeds.integers(0, 2**63, size=2))
            self._env.unwrapped.seed(core, disp, reseed=False)
        return super().reset(**kwargs)

    def seed(self, core=None, disp=None, reseed=False):
        return self._env.unwrapped.seed(core, disp, reseed)


class _OldGymAtari(_OldGymEnv):
    """ale-py's game as gym's ``<Game>NoFrameskip-v4`` (atari-py's ``AtariEnv`` with
    ``frameskip=1``, no sticky actions, no frame cap of its own): RGB screens,
    ``seed(s)`` seeds the next reset, ``np_random``, ``ale`` and ``get_action_meanings``
    are the game's (CORA's ``NoopResetEnv``, ``EpisodicLifeEnv``, ``FireResetEnv`` read
    them)."""

    def __init__(self, game: str, full_action_space: bool = False) -> None:
        import ale_py
        import gymnasium

        gymnasium.register_envs(ale_py)
        env = gymnasium.make(
            f"ALE/{game}-v5",
            frameskip=1,
            repeat_action_probability=0.0,
            full_action_space=full_action_space,
            max_num_frames_per_episode=None,
            obs_type="rgb",
            disable_env_checker=True,
        )
        super().__init__(env)

    def seed(self, seed=None):
        self._next_seed = seed
        return [seed]

    @property
    def np_random(self):
        return self._env.unwrapped.np_random

    @property
    def ale(self):
        return self._env.unwrapped.ale

    def get_action_meanings(self):
        return self._env.unwrapped.get_action_meanings()


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


def _register_atari() -> None:
    """gym's ``<Game>NoFrameskip-v4`` ids (gym 0.21's registration, which atari-py served):
    ``frameskip=1``, ``repeat_action_probability=0``, ``max_episode_steps`` 4 x 100,000
    frames (3 x for SpaceInvaders, whose deterministic frame skip was 3)."""
    import re

    import ale_py
    import gym
    import gymnasium

    gymnasium.register_envs(ale_py)
    for env_id in list(gymnasium.registry):
        match = re.fullmatch(r"ALE/(\w+)-v5", env_id)
        if match is None or f"{match.group(1)}NoFrameskip-v4" in gym.envs.registry:
            continue
        game = match.group(1)
        gym.register(
            id=f"{game}NoFrameskip-v4",
            entry_point=lambda game=game, **kwargs: _OldGymAtari(game, **kwargs),
            max_episode_steps=(3 if game == "SpaceInvaders" else 4) * 100_000,
            disable_env_checker=True,
        )


@contextlib.contextmanager
def seeded_innermost_envs(seed: int) -> Iterator[None]:
    """Seed the simulators CORA's task factories build in this block, as ours seed theirs
    from ``reset(seed=seed)``: MiniHack's NetHack (core and display seeds drawn before every
    reset, moon phase fixed; CORA never seeds MiniHack, its ``seed(core, disp, reseed)``
    wrapper fails on gym's ``Wrapper.seed``) and procgen's ``rand_seed`` (CORA's
    ``make_procgen`` passes none). Atari needs nothing: CORA's ``Utils.make_env(...,
    seed_to_set=seed)`` reaches the game's ``seed``."""
    import procgen.gym_registration as registration

    make_env = registration.make_env
    registration.make_env = lambda **kwargs: make_env(rand_seed=seed, **kwargs)
    _HARNESS_SEED["seed"] = seed
    try:
        yield
    finally:
        registration.make_env = make_env
        _HARNESS_SEED.clear()


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
    _register_atari()


def stop_children() -> None:
    """End what CORA's monobeast started in this process (actors, its Manager's server
    process): it leaves them behind when a run ends with an exception or a signal."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=5)
    for child in alive:
        child.kill()
