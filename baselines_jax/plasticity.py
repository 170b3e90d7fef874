"""JAX side of the plasticity diagnostics: what a flax network shows on the probe batch.

:class:`JaxProbe` implements ``cl_suites.metrics.plasticity_tracker.NetworkProbe`` for
JAX parameters and an apply function; the math is ``cl_suites.metrics.plasticity``'s,
shared with the torch learners (same weights and batch: same values, within float32).

For MEAL's :class:`~baselines_jax.network.ActorCritic`, :func:`actor_critic_apply` reads
the hidden layers with flax's ``capture_intermediates``: each trunk layer's
post-activation output ``act(Dense(h))`` (before the LayerNorm, as torch's activation
modules give it; CReLU's ``2 * width`` outputs count as ReLU units) and the penultimate
features (the input of each head: the last LayerNorm's output). Networks ``actor`` and
``critic`` (a shared backbone counts in both).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from baselines_jax.network import ActorCritic, activate, central_rows
from cl_suites.metrics.plasticity_tracker import Capture

PAD_ROWS = 256
"""The probe batch is padded to a multiple of this many rows (zeros, task 0; cut off
after the pass), so a growing batch compiles one program per 256 rows, not per size."""

Intermediates = dict[str, dict[str, Any]]
"""network -> ``{"activations": {layer: (B, U)}, "features": (B, F), "outputs": ...,
"kind": "policy" | "value", "activation": kind}``."""


def _flat_params(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(_flat_params(value, name))
        else:
            out[name] = np.array(value, dtype=np.float32, copy=True)
    return out


class JaxProbe:
    """JAX parameters and an apply function on the probe batch (a ``NetworkProbe``).

    Args:
        params: the parameter tree (``{"params": ...}``), one seed's, or a callable giving
            the current one (an own training loop's).
        apply_fn: ``apply_fn(params, obs, task_ids) -> Intermediates`` (see
            :data:`Intermediates`; :func:`actor_critic_apply` for MEAL's network).
        networks: network name -> predicate on a flat parameter name (``"params.
            actor_dense1.kernel"``) saying whether it belongs to the network.
        grad_norms: network name -> gradient norm of the last update (``None``: NaN).

    Raises:
        ValueError: a network without a hidden layer on a trial pass (one line).
    """

    def __init__(
        self,
        params: Any,
        apply_fn: Callable[[Any, Any, np.ndarray], Intermediates],
        networks: Mapping[str, Callable[[str], bool]],
        grad_norms: Mapping[str, float] | None = None,
    ):
        self.params = params
        self.apply_fn = apply_fn
        self.networks = dict(networks)
        self.grad_norms = dict(grad_norms or {})

    def current_params(self) -> Any:
        """The parameters now (``params`` itself, or what it returns when callable)."""
        return self.params() if callable(self.params) else self.params

    def capture(self, obs: Any, task_ids: np.ndarray) -> dict[str, Capture]:
        inter = self.apply_fn(self.current_params(), obs, np.asarray(task_ids))
        out = {}
        for name in self.networks:
            n = inter[name]
            if not n["activations"]:
                raise ValueError(
                    f"network {name!r} has no layer the plasticity diagnostics can read "
                    "(no hidden activation in its intermediates)"
                )
            out[name] = Capture(
                activations={k: np.asarray(v) for k, v in n["activations"].items()},
                features=np.asarray(n["features"]),
                outputs=np.asarray(n["outputs"]),
                kind=n["kind"],
                activation=n.get("activation", "other"),
            )
        return out

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        flat = _flat_params(self.current_params())
        return {
            net: {k: v for k, v in flat.items() if pick(k)} for net, pick in self.networks.items()
        }

    def gradient_norms(self) -> dict[str, float]:
        return {net: float(self.grad_norms.get(net, math.nan)) for net in self.networks}


def central_env_rows(flat: np.ndarray, num_agents: int) -> np.ndarray:
    """Env-major observation rows ``(B, D)`` (row ``m n + i``: agent ``i`` of env ``m``) as
    a central critic's rows ``(B, D + n + n D)``, in the same order; an env cut short at
    the end has zeros for its missing agents."""
    b, d = flat.shape
    envs = -(-b // num_agents)
    padded = np.zeros((envs * num_agents, d), flat.dtype)
    padded[:b] = flat
    rows = np.asarray(central_rows(jnp.asarray(padded.reshape(envs, num_agents, d))))
    return rows.reshape(num_agents, envs, -1).swapaxes(0, 1).reshape(envs * num_agents, -1)[:b]


def actor_critic_apply(network: ActorCritic) -> Callable[[Any, Any, np.ndarray], Intermediates]:
    """The apply function of :class:`JaxProbe` for MEAL's ``ActorCritic``: ``obs (B, ...)``
    (flattened here; a central critic's: env-major rows of every agent of each env, as
    :func:`central_env_rows` takes them), ``task_ids (B,)``; one jitted pass."""
    kind = "tanh" if network.activation == "tanh" else "relu"  # CReLU's units are ReLUs
    trunks = ("common",) if network.shared_backbone else ("actor", "critic")
    sizes = len(network.hidden_sizes)

    @jax.jit
    def run(params: Any, x: jax.Array, task: jax.Array) -> Any:
        (logits, values), state = network.apply(
            params, x, task, capture_intermediates=True, mutable=["intermediates"]
        )
        inter = state["intermediates"]
        layers = {}
        for trunk in trunks:
            for i in range(1, sizes + 1):
                dense = inter[f"{trunk}_dense{i}"]["__call__"][0]
                layers[f"{trunk}_dense{i}"] = activate(dense, network.activation)
            normed = network.has_norm(sizes)
            last = f"{trunk}_ln{sizes}" if normed else f"{trunk}_dense{sizes}"
            feats = inter[last]["__call__"][0]
            layers[f"{trunk}_features"] = feats if normed else activate(feats, network.activation)
        return logits, values, layers

    def apply(params: Any, obs: Any, task_ids: np.ndarray) -> Intermediates:
        n = len(task_ids)
        rows = -(-n // PAD_ROWS) * PAD_ROWS  # padded: one compiled program per 256 rows
        flat = np.asarray(obs).reshape(n, -1)
        if network.central_critic:
            flat = central_env_rows(flat, network.num_agents)
        x = np.zeros((rows, flat.shape[1]), np.float32)
        x[:n] = flat
        ids = np.zeros(rows, np.int32)
        ids[:n] = task_ids
        out = jax.device_get(run(params, jnp.asarray(x), jnp.asarray(ids)))
        logits, values, layers = jax.tree.map(lambda a: np.asarray(a)[:n], out)
        out = {}
        for net, trunk, outputs, k in (
            ("actor", trunks[0], logits, "policy"),
            ("critic", trunks[-1], values, "value"),
        ):
            out[net] = {
                "activations": {
                    f"{trunk}_dense{i}": layers[f"{trunk}_dense{i}"] for i in range(1, sizes + 1)
                },
                "features": layers[f"{trunk}_features"],
                "outputs": outputs,
                "kind": k,
                "activation": kind,
            }
        return out

    return apply


def actor_critic_networks(shared_backbone: bool = False) -> dict[str, Callable[[str], bool]]:
    """Which flat parameter names (``params.<module>.<leaf>``) belong to ``actor`` and
    ``critic`` of MEAL's ``ActorCritic``."""

    def module(name: str) -> str:
        parts = name.split(".")
        return parts[1] if len(parts) > 2 else parts[0]

    return {
        "actor": lambda n: module(n).startswith(("actor_", "common_")),
        "critic": lambda n: module(n).startswith(("critic_", "common_")),
    }


def actor_critic_probe(
    network: ActorCritic, params: Any, grad_norms: Mapping[str, float] | None = None
) -> JaxProbe:
    """The :class:`JaxProbe` of MEAL's ``ActorCritic`` with parameters ``params``."""
    return JaxProbe(
        params,
        actor_critic_apply(network),
        actor_critic_networks(network.shared_backbone),
        grad_norms,
    )
