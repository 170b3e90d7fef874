"""``ppo-jax``'s policy of every task's end (``RUN_DIR/checkpoint/task-NNN.npz``).

With the job option ``keep_task_policies`` the job writes, for every seed, one file per
schedule segment (``cl_suites.rundir.task_policies``: names, resume) into that seed's run
directory: the seed's parameters right after the evaluation of the task's end, before
``end_task`` and the checkpoint of that step. The file is an ``.npz`` of plain arrays,
read with ``np.load(allow_pickle=False)``: the parameter tree's leaves named by their path
(``params/actor_dense1/kernel``, ...), and ``meta``, the UTF-8 bytes of a JSON object
(``format``, ``segment``, ``task_id``, ``cycle``, ``total_step``, ``seed``, ``learner``).
Its bytes depend on its content only (``np.savez`` dates every member 1980-01-01).

:func:`load_task_policy` rebuilds the run's network (``baselines_jax.learner.actor_critic``
from the run's settings), checks the saved tree against it and acts greedily with it as
the evaluator does (``cl_suites.job.jax.acting.eval_policy``).
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cl_suites.errors import RunFileError
from cl_suites.rundir.fsutil import atomic_write
from cl_suites.rundir.task_policies import task_policy_path

if TYPE_CHECKING:
    from cl_suites.job.run_spec import JobSpec

FORMAT = "cl-suites-task-policy-jax-1"
EXTENSION = "npz"
LEARNER = "ppo-jax"
_PREFIX = "params/"


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def flat_params(params: Any) -> dict[str, np.ndarray]:
    """The parameter tree's leaves as ``{"params/actor_dense1/kernel": array, ...}``."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {
        _PREFIX + "/".join(_key_name(k) for k in path): np.asarray(leaf) for path, leaf in leaves
    }


def save_task_policy(
    run_dir: str | os.PathLike[str], segment: Any, total_step: int, params: Any, seed: int
) -> Path:
    """Write one seed's ``params`` as segment ``segment``'s task policy (atomically; disk
    errors as ``RunDiskError``). Returns the file."""
    meta = {
        "format": FORMAT,
        "segment": int(segment.index),
        "task_id": int(segment.task_id),
        "cycle": int(segment.cycle),
        "total_step": int(total_step),
        "seed": int(seed),
        "learner": LEARNER,
    }
    arrays = flat_params(params)
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    path = task_policy_path(run_dir, segment.index, EXTENSION)
    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def read_task_policy(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict]:
    """``(arrays, meta)`` of a ``ppo-jax`` task-policy file (``arrays``: the flat parameter
    names of :func:`flat_params`); ``RunFileError`` (one line naming the file) for
    anything else. No object in it is unpickled."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            arrays = {k: data[k] for k in data.files if k.startswith(_PREFIX)}
    except (OSError, ValueError, KeyError, json.JSONDecodeError, zipfile.BadZipFile) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunFileError(f"{path} is not a readable task policy ({first})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise RunFileError(f"{path} has task-policy format {found!r}, not {FORMAT!r}")
    return arrays, meta


class _Actor:
    """``act`` as ``JaxIPPO.act`` for a network outside a learner."""

    def __init__(self, network: Any, obs_dim: int):
        self.network, self.obs_dim = network, int(obs_dim)

    def act(self, params: Any, obs: Any, task_id: int, greedy: bool, key: Any = None) -> np.ndarray:
        from baselines_jax.learner import act_with

        return act_with(self.network, self.obs_dim, params, obs, task_id, greedy, key)


def network_params(path: str | os.PathLike[str], spec: JobSpec) -> tuple[Any, Any, int]:
    """``(network, params, obs_dim)`` of the task policy in ``path`` of a run of ``spec``:
    the run's network and the saved parameters in its tree (``RunFileError`` naming
    the file when names or shapes differ)."""
    import jax
    import jax.numpy as jnp

    from baselines_jax.learner import actor_critic, input_dim

    arrays, _ = read_task_policy(path)
    suite, config = spec.meal, spec.learner_config
    network = actor_critic(config, len(suite.layouts), suite.num_agents)
    obs_dim = int(np.prod(suite.obs_shape))
    width = input_dim(config, obs_dim, suite.num_agents)
    template = network.init(jax.random.PRNGKey(0), jnp.zeros((1, width)))
    reference = flat_params(template)
    names = list(reference)  # the template's leaves, in its tree's order
    missing = [n for n in names if n not in arrays]
    unexpected = [n for n in arrays if n not in reference]
    wrong = [
        n
        for n in names
        if n in arrays
        and (arrays[n].shape != reference[n].shape or arrays[n].dtype != reference[n].dtype)
    ]
    if missing or unexpected or wrong:
        raise RunFileError(
            f"{path} does not fit the run's network (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}, other shape or dtype {wrong[:3]})"
        )
    treedef = jax.tree_util.tree_structure(template)
    params = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(arrays[n]) for n in names])
    return network, params, obs_dim


def load_task_policy(
    path: str | os.PathLike[str], spec: JobSpec
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``policy(obs, task_ids) -> greedy actions`` of the task policy in ``path`` of a
    ``ppo-jax`` run of ``spec``: the evaluator's policy of that task's end."""
    from cl_suites.job.jax.acting import eval_policy

    network, params, obs_dim = network_params(path, spec)
    return eval_policy(_Actor(network, obs_dim), params, greedy=True)
