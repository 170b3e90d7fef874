"""Shrink-and-perturb, layer resets and plasticity injection.

Every re-initialisation uses the policy's own scheme (:func:`init_scheme`): PyTorch's
default init of each layer (what building it does: ``kaiming_uniform_(a=sqrt(5))`` and a
``U(+-1/sqrt(fan_in))`` bias; LayerNorm ones and zeros) and then, for SB3 policies built
with ``ortho_init`` (SB3's ``ActorCriticPolicy._build``; the MEAL and CORA-PPO presets),
``orthogonal_`` with SB3's gains (features extractor and trunks ``sqrt(2)``, ``action_net``
0.01, ``value_net`` 1) and zero biases. Random numbers, per layer in module order: the
default weight, the default bias, then the orthogonal draw (the draws of re-creating the
layer as Plasticine's ``plasticine_reset_layers`` does; not those of building a whole
policy afresh, which constructs every layer before the orthogonal pass).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch as th
from torch import nn

from baselines_sb3.pnc_policy import ORTHO_GAINS
from baselines_sb3.remedies.optim_state import forget, zero_entries

HEADS: tuple[str, ...] = ("value_net", "action_net")
"""The output heads, in the order they are re-drawn (Plasticine's: critic, then actor)."""


def init_scheme(policy: nn.Module) -> dict[str, float] | None:
    """SB3's orthogonal gains by part when ``policy.ortho_init`` (``ORTHO_GAINS``: SB3's
    ``module_gains``), ``None`` for PyTorch's default init only."""
    return dict(ORTHO_GAINS) if getattr(policy, "ortho_init", False) else None


def _fresh(
    module: nn.Module, gain: float | None, generator: th.Generator | None
) -> dict[str, th.Tensor]:
    """Fresh values of ``module``'s own parameters (not its children's), by name."""
    params = dict(module.named_parameters(recurse=False))
    if not params:
        return {}
    if isinstance(module, nn.Linear | nn.Conv2d):
        # drawn where the generator lives (the global RNG: the layer's device), then moved
        weight = module.weight
        device = generator.device if generator is not None else weight.device
        w = th.empty(weight.shape, dtype=weight.dtype, device=device)
        nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)
        out = {"weight": w}
        if module.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(w)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            b = th.empty(module.bias.shape, dtype=module.bias.dtype, device=device)
            out["bias"] = nn.init.uniform_(b, -bound, bound, generator)
        if gain is not None:
            nn.init.orthogonal_(w, gain=gain, generator=generator)
            if "bias" in out:
                out["bias"].zero_()
        return {k: v.to(weight.device) for k, v in out.items()}
    if isinstance(module, nn.LayerNorm):
        return {
            n: (th.ones_like(p) if n == "weight" else th.zeros_like(p)) for n, p in params.items()
        }
    if hasattr(module, "reset_parameters"):  # other layers: their own init, the global RNG
        import copy

        clone = copy.deepcopy(module)
        clone.reset_parameters()
        return {n: p.detach() for n, p in clone.named_parameters(recurse=False)}
    raise ValueError(f"cannot re-initialise {type(module).__name__}: no known init")


def _parts(
    policy: nn.Module, heads_only: bool = False
) -> Iterator[tuple[str, nn.Module, float | None]]:
    """``(name, module, orthogonal gain or None)`` of every part to re-initialise, in
    order: features extractor(s), trunks, any other child, then :data:`HEADS`."""
    gains = init_scheme(policy)
    is_sb3 = all(hasattr(policy, h) for h in HEADS)
    if not is_sb3:
        if heads_only:
            raise ValueError(f"{type(policy).__name__} has no action_net/value_net heads")
        yield "", policy, None
        return
    if not heads_only:
        seen = {id(getattr(policy, h)) for h in HEADS}
        for name, child in policy.named_children():
            if id(child) in seen:
                continue
            seen.add(id(child))
            part = "features_extractor" if name.endswith("features_extractor") else name
            gain = gains.get(part) if gains is not None else None
            yield name, child, gain
    for h in HEADS:
        yield h, getattr(policy, h), gains[h] if gains is not None else None


def _log_std(policy: nn.Module) -> nn.Parameter | None:
    p = getattr(policy, "log_std", None)
    return p if isinstance(p, nn.Parameter) else None


def reset_all(
    policy: nn.Module,
    optimizer: th.optim.Optimizer | None = None,
    generator: th.Generator | None = None,
) -> list[str]:
    """Re-initialise every parameter of ``policy`` in place with its own scheme (module
    docstring; every task head of a multi-head policy too; ``log_std`` to
    ``log_std_init``) and delete their optimizer state. Returns the parameter names."""
    with th.no_grad():
        for prefix, part, gain in _parts(policy):
            for _, module in part.named_modules(prefix=prefix):
                for n, v in _fresh(module, gain, generator).items():
                    getattr(module, n).copy_(v)
        log_std = _log_std(policy)
        if log_std is not None:
            log_std.fill_(float(getattr(policy, "log_std_init", 0.0)))
    forget(optimizer, policy.parameters())
    return [n for n, _ in policy.named_parameters()]


def fresh_init_like(policy: nn.Module, generator: th.Generator | None = None) -> list[th.Tensor]:
    """Freshly initialised values of ``policy.parameters()`` (same order, shapes, devices)
    with the policy's own scheme, the policy untouched: the noise of Ash & Adams' shrink
    and perturb (:func:`shrink_perturb` ``noise=``). Draws as :func:`reset_all`."""
    values: dict[int, th.Tensor] = {}
    with th.no_grad():
        for prefix, part, gain in _parts(policy):
            for _, module in part.named_modules(prefix=prefix):
                for n, v in _fresh(module, gain, generator).items():
                    values.setdefault(id(getattr(module, n)), v)
        log_std = _log_std(policy)
        if log_std is not None:
            values[id(log_std)] = th.full_like(log_std, float(getattr(policy, "log_std_init", 0.0)))
    return [values[id(p)] if id(p) in values else p.detach().clone() for p in policy.parameters()]


def shrink_perturb(
    params: Sequence[th.Tensor],
    initial: Sequence[th.Tensor] | None,
    shrink: float,
    perturb: float,
    noise: Sequence[th.Tensor] | None = None,
) -> None:
    """Shrink and perturb in place: ``theta <- shrink * theta + perturb * theta0``, one
    tensor at a time, computed as Plasticine's ``plasticine_shrink_and_perturb`` does
    (``theta *= shrink`` then ``theta += perturb * theta0``: bit-identical).

    Args:
        params: the parameters (``policy.parameters()``).
        initial: ``theta0``, the initial parameters (Plasticine: a copy taken when the
            agent is built, applied after every optimizer step with ``shrink=0.999999``,
            ``perturb = 1 - shrink``); ignored when ``noise`` is given.
        shrink: in (0, 1].
        perturb: in [0, 1).
        noise: a fresh draw of the initializer (:func:`fresh_init_like`) used instead of
            ``initial``: Ash & Adams (2020)'s shrink and perturb.
    """
    source = noise if noise is not None else initial
    if source is None:
        raise ValueError("shrink_perturb needs the initial parameters or a noise draw")
    params = list(params)
    source = list(source)
    if len(params) != len(source):
        raise ValueError(f"{len(params)} parameters but {len(source)} initial/noise tensors")
    with th.no_grad():
        for p, p0 in zip(params, source, strict=True):
            p.mul_(shrink)
            p.add_(perturb * p0.to(p.device))


def reset_heads(
    policy: nn.Module,
    optimizer: th.optim.Optimizer | None = None,
    task_id: int | None = None,
    generator: th.Generator | None = None,
) -> list[str]:
    """Re-initialise the output heads (``value_net``, then ``action_net``) in place with the
    policy's own scheme, and clear their optimizer state.

    Single head: the whole layers are re-drawn and their state entries deleted (a fresh
    parameter's state), and ``log_std`` (continuous actions) returns to ``log_std_init``.
    Multi-head (``policy.multi_head``): only the rows of ``task_id``'s slice (the task about
    to be trained) get the values a freshly drawn whole layer holds there, and only those
    rows' optimizer statistics are zeroed (torch keeps one Adam step per tensor); the other
    tasks' heads keep what they hold.

    Plasticine's ``plasticine_reset_layers`` re-creates the modules instead, so its
    optimizer (built once) keeps stepping the old parameters and never trains the new
    heads; this resets in place. Returns the names of the parameters touched.

    Raises:
        ValueError: a multi-head policy without ``task_id``.
    """
    multi = bool(getattr(policy, "multi_head", False))
    if multi and task_id is None:
        raise ValueError("a multi-head policy resets one task's head: pass task_id")
    touched = []
    with th.no_grad():
        for name, head, gain in _parts(policy, heads_only=True):
            fresh = _fresh(head, gain, generator)
            for n, v in fresh.items():
                p = getattr(head, n)
                if multi:
                    per = p.shape[0] // int(policy.num_tasks)
                    rows = th.arange(task_id * per, (task_id + 1) * per, device=p.device)
                    p[rows] = v[rows]
                    zero_entries(optimizer, p, rows, 0)
                else:
                    p.copy_(v)
                    forget(optimizer, [p])
                touched.append(f"{name}.{n}")
        log_std = _log_std(policy)
        if log_std is not None and not multi:
            log_std.fill_(float(getattr(policy, "log_std_init", 0.0)))
            forget(optimizer, [log_std])
            touched.append("log_std")
    return touched


def inject_plasticity(policy: nn.Module, optimizer: th.optim.Optimizer) -> list[str]:
    """Plasticity injection (Nikishin et al. 2023) on the linear output heads.

    The paper's injection replaces a head ``f`` by ``f(x) + a(x) - b(x)`` with ``f`` frozen,
    ``a`` a fresh layer trained from a fresh optimizer state and ``b`` a frozen copy of
    ``a``. For a linear head the sum is one linear map whose value at injection is ``f``'s
    and whose gradient with respect to ``a`` is the gradient with respect to the sum, so
    it is exactly this: keep the head's weights and give them a fresh optimizer state
    (their state entries are deleted: Adam restarts their step and moments). Equivalent
    to the paper's as long as the optimizer has no weight decay (decay pulls ``a`` to zero,
    not ``f + a - b``). Returns the names of the parameters whose state was cleared.

    Plasticine's ``plasticine_plasticity_injection`` wraps the heads but its optimizer is
    built once: ``a`` is never trained and ``f`` keeps training, a no-op in function.
    """
    names = []
    for h in HEADS:
        head = getattr(policy, h)
        for n, p in head.named_parameters():
            forget(optimizer, [p])
            names.append(f"{h}.{n}")
    return names
