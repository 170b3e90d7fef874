"""MEAL's actor-critic (``architectures/mlp.py`` at 7d81858) in flax, without the dormant-
neuron logging (it does not touch the outputs).

Input: flattened observations ``(B, D)`` (uint8 counts are cast to float32 here), and the
task id (a scalar, or one per row). With ``task_id_input`` the one-hot task id is appended
to the input; each trunk layer is ``Dense -> activation -> LayerNorm(eps=1e-5)``
(``norm_layers="each"``, MEAL's ``model/mlp.py``), or only the first trunk layer has the
LayerNorm, with eps 1e-6 (``norm_layers="first"``, ``norm_eps=1e-6``: MEAL 057f862's
``model/mlp_packnet.py``, the network its IPPO builds for PackNet). ``crelu``:
``concat(relu(x), relu(-x))``, twice the Dense's width, so the next layer reads
``2 * width`` inputs (Shang et al. 2016, Plasticine's ``CReLU4Linear``). With
``multi_head`` the heads hold ``num_tasks`` slices and each row reads its task's slice
(MEAL's ``choose_head``). Kernels are orthogonal (gain sqrt(2); 0.01 for the policy head,
1.0 for the value head), biases zero. Parameter names are MEAL's (``actor_dense1``,
``actor_ln1``, ..., ``actor_head``, ``critic_head``; ``common_*`` with a shared backbone).

A central critic (``central_critic``: MAPPO, MEAL 057f862 ``model/decoupled_mlp.py``) reads
rows laid out as :func:`central_rows` makes them, ``[own obs (D) | agent one-hot (n) |
every agent's obs (n D)]``: the actor reads the agent's own observation (then the task's
one-hot, then, with ``agent_id_input``, the agent's), the critic every agent's observation
of the env (then the task's one-hot), so each row still gives ``(logits, value)``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant, orthogonal

NORM_LAYERS: tuple[str, ...] = ("each", "first")
"""``ActorCritic.norm_layers``: a LayerNorm after every trunk layer, or after the first."""


def _dense(width: int, name: str, gain: float) -> nn.Dense:
    return nn.Dense(width, kernel_init=orthogonal(gain), bias_init=constant(0.0), name=name)


def activate(x: jax.Array, activation: str) -> jax.Array:
    """``activation`` (``relu``, ``tanh`` or ``crelu``) of a Dense output ``x (..., U)``;
    ``crelu`` gives ``(..., 2U)``: ``relu(x)`` then ``relu(-x)``."""
    if activation == "relu":
        return nn.relu(x)
    if activation == "tanh":
        return nn.tanh(x)
    if activation == "crelu":
        return jnp.concatenate([nn.relu(x), nn.relu(-x)], axis=-1)
    raise ValueError(f"unknown activation {activation!r}; valid: relu, tanh, crelu")


def select_head(out: jax.Array, num_tasks: int, task: jax.Array) -> jax.Array:
    """``out (B, num_tasks * k)`` -> ``(B, k)``: row ``b`` keeps slice ``task[b]``."""
    b, total = out.shape
    per_task = out.reshape(b, num_tasks, total // num_tasks)
    index = jnp.broadcast_to(jnp.asarray(task, jnp.int32), (b,))
    return jnp.take_along_axis(per_task, index[:, None, None], axis=1)[:, 0]


def central_rows(obs: jax.Array) -> jax.Array:
    """A central critic's input rows from one env batch's observations ``obs (M, n, ...)``:
    ``(n M, D + n + n D)``, agent-major as MEAL's ``batchify`` (row ``i M + m`` is agent
    ``i`` of env ``m``), each ``[obs of agent i (D) | one-hot i (n) | the env's obs of
    agents 0..n-1 (n D)]`` (MEAL 057f862 ``create_global_state_for_critic``), in
    ``obs``'s dtype."""
    m, n = obs.shape[:2]
    own = jnp.swapaxes(obs, 0, 1).reshape(n * m, -1)
    ids = jnp.repeat(jnp.eye(n, dtype=obs.dtype), m, axis=0)
    joint = jnp.tile(obs.reshape(m, -1), (n, 1))
    return jnp.concatenate([own, ids, joint], axis=-1)


def central_row_dim(obs_dim: int, num_agents: int) -> int:
    """The width of :func:`central_rows`' rows for ``num_agents`` observations of
    ``obs_dim`` values."""
    return obs_dim + num_agents + num_agents * obs_dim


class ActorCritic(nn.Module):
    """``(logits (B, A), values (B,))`` of MEAL's MLP actor-critic (module docstring)."""

    action_dim: int
    num_tasks: int = 1
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    layer_norm: bool = True
    norm_layers: str = "each"
    """Which trunk layers end in the LayerNorm (with ``layer_norm``): ``each`` or ``first``."""
    norm_eps: float = 1e-5
    """The LayerNorm's epsilon."""
    shared_backbone: bool = False
    multi_head: bool = True
    task_id_input: bool = True
    central_critic: bool = False
    """Rows are :func:`central_rows`' (``num_agents`` agents): the critic reads every
    agent's observation of the env (MAPPO); needs separate trunks."""
    num_agents: int = 0
    """Agents per env, with ``central_critic``."""
    agent_id_input: bool = False
    """With ``central_critic``: the agent's one-hot id appended to the actor's input, after
    the task's (MEAL 057f862 MAPPO ``use_agent_id``)."""

    def has_norm(self, layer: int) -> bool:
        """Whether trunk layer ``layer`` (1-based) ends in a LayerNorm."""
        if self.norm_layers not in NORM_LAYERS:
            raise ValueError(
                f"unknown norm_layers {self.norm_layers!r}; valid: {', '.join(NORM_LAYERS)}"
            )
        return self.layer_norm and (self.norm_layers == "each" or layer == 1)

    @nn.compact
    def __call__(self, x: jax.Array, task: jax.Array | int = 0) -> tuple[jax.Array, jax.Array]:
        x = x.astype(jnp.float32)
        task = jnp.asarray(task, jnp.int32)

        def with_task(h: jax.Array) -> jax.Array:
            if not self.task_id_input:
                return h
            ids = jnp.broadcast_to(task, h.shape[:-1])
            return jnp.concatenate([h, jax.nn.one_hot(ids, self.num_tasks, dtype=h.dtype)], -1)

        def trunk(prefix: str, h: jax.Array) -> jax.Array:
            for i, width in enumerate(self.hidden_sizes, start=1):
                h = activate(_dense(width, f"{prefix}_dense{i}", np.sqrt(2))(h), self.activation)
                if self.has_norm(i):
                    h = nn.LayerNorm(epsilon=self.norm_eps, name=f"{prefix}_ln{i}")(h)
            return h

        if self.central_critic:
            if self.shared_backbone or self.num_agents < 1:
                raise ValueError("a central critic needs separate trunks and num_agents >= 1")
            n = self.num_agents
            d = (x.shape[-1] - n) // (n + 1)
            own, agent, joint = x[..., :d], x[..., d : d + n], x[..., d + n :]
            actor_x = with_task(own)
            if self.agent_id_input:
                actor_x = jnp.concatenate([actor_x, agent], -1)
            actor_in, critic_in = trunk("actor", actor_x), trunk("critic", with_task(joint))
        elif self.shared_backbone:
            actor_in = critic_in = trunk("common", with_task(x))
        else:
            x = with_task(x)
            actor_in, critic_in = trunk("actor", x), trunk("critic", x)
        heads = self.num_tasks if self.multi_head else 1
        logits = _dense(self.action_dim * heads, "actor_head", 0.01)(actor_in)
        values = _dense(heads, "critic_head", 1.0)(critic_in)
        if self.multi_head:
            logits = select_head(logits, self.num_tasks, task)
            values = select_head(values, self.num_tasks, task)
        return logits, values[..., 0]
