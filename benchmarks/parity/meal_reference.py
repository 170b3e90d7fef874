"""MEAL's paper-time trainer, imported from a checkout and run with runtime patches only.

Shared by ``bench_meal.py`` (speed) and ``parity_meal.py`` (equality and the learning
table). MEAL's code is never copied into this project: pass the path of a checkout of
TTomilin/MEAL at 7d81858. No file of the checkout is edited; the patches are:

* its forced ``jax.config.update("jax_platform_name", "gpu")`` is skipped (CPU runs);
* W&B is disabled and its login is a no-op;
* ``jax.tree_map`` (removed in JAX 0.6, used by its ``cl_methods/``) is restored as an
  alias of ``jax.tree_util.tree_map``;
* the visualisation-only packages it imports at module level (``IPython``,
  ``ipywidgets``, ``safetensors``) are stubbed when not installed;
* files it writes under the checkout (per-task parameter files, ``checkpoints/``) and its
  TensorBoard ``runs/`` directory go to a work directory instead;
* ``jax.jit`` as seen by ``baselines/IPPO_CL.py`` can be wrapped (``jit_hook``), so a
  caller can time or observe ``train_on_environment``.
"""

from __future__ import annotations

import builtins
import importlib
import os
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path

VISUALISATION_ONLY = ("IPython", "IPython.display", "ipywidgets", "safetensors", "safetensors.flax")


class _Stub(types.ModuleType):
    """A module whose every attribute is a no-op callable (visualisation-only imports)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def check_meal_repo(repo: Path | None) -> Path:
    """The checkout path, or a ValueError naming what is missing."""
    if repo is None or not (Path(repo) / "baselines" / "IPPO_CL.py").exists():
        raise ValueError(
            f"--meal-repo must be a checkout of TTomilin/MEAL at 7d81858 (with "
            f"baselines/IPPO_CL.py); got {repo!r}"
        )
    return Path(repo)


def import_meal(repo: Path, module: str) -> types.ModuleType:
    """Import ``module`` (e.g. ``"cl_methods.EWC"``) from the checkout, stubbing the
    visualisation-only packages and switching W&B off first."""
    for name in VISUALISATION_ONLY:
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = _Stub(name)
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    os.environ["WANDB_MODE"] = "disabled"
    import jax

    if "tree_map" not in vars(jax):
        jax.tree_map = jax.tree_util.tree_map
    return importlib.import_module(module)


JitHook = Callable[[Callable, Callable, dict], Callable]
"""``hook(fun, jitted, jit_kwargs) -> callable`` used in place of ``jax.jit(fun, **kw)``."""


def load_meal_trainer(
    repo: Path, workdir: Path, jit_hook: JitHook | None = None
) -> types.ModuleType:
    """``baselines.IPPO_CL`` from the checkout, patched as the module docstring says.

    The caller sets ``sys.argv`` and calls ``module.main()``. The working directory is
    changed to ``workdir`` (MEAL's TensorBoard writes ``runs/`` relative to it).
    """
    import jax

    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    module = import_meal(repo, "baselines.IPPO_CL")
    import wandb

    wandb.login = lambda *args, **kwargs: None
    real_jit, real_open, real_os = jax.jit, builtins.open, module.os
    repo_root = str(repo.resolve())

    def redirect(path):
        path = os.fspath(path)
        if not path.startswith(repo_root):
            return path
        return str(workdir / os.path.relpath(path, repo_root))

    class JaxProxy(types.ModuleType):
        def __getattr__(self, name):
            return getattr(jax, name)

    class ConfigProxy:
        def update(self, name, value):
            if name != "jax_platform_name":  # MEAL forces "gpu"; run on this machine's CPU
                jax.config.update(name, value)

        def __getattr__(self, name):
            return getattr(jax.config, name)

    class OsProxy(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real_os, name)

        def makedirs(self, path, *args, **kwargs):
            return real_os.makedirs(redirect(path), *args, **kwargs)

    def jit(fun=None, **kwargs):
        if fun is None:
            return lambda f: jit(f, **kwargs)
        jitted = real_jit(fun, **kwargs)
        return jitted if jit_hook is None else jit_hook(fun, jitted, kwargs)

    proxy = JaxProxy("jax")
    proxy.config = ConfigProxy()
    proxy.jit = jit
    module.jax = proxy
    module.os = OsProxy("os")
    module.open = lambda path, *args, **kwargs: real_open(redirect(path), *args, **kwargs)
    return module


def meal_argv(
    cl_method: str,
    seed: int,
    steps_per_task: int,
    num_envs: int = 16,
    extra: Sequence[str] = (),
) -> list[str]:
    """``sys.argv`` for MEAL's IPPO_CL on MEAL-2 (easy) with Table 4's PPO settings;
    evaluation and GIFs off (the caller scores the saved policies)."""
    return [
        "IPPO_CL",
        *("--cl-method", cl_method, "--seq-length", "2", "--difficulty", "easy"),
        *("--seed", str(seed), "--num-envs", str(num_envs), "--num-steps", "128"),
        *("--update-epochs", "8", "--num-minibatches", "8"),
        *("--steps-per-task", str(steps_per_task)),
        *("--no-evaluation", "--no-record-gif", "--wandb-mode", "disabled"),
        *extra,
    ]
