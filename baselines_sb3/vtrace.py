"""V-trace targets and the IMPALA loss (Espeholt et al., 2018)."""

from __future__ import annotations

import torch as th


def vtrace_targets(
    behaviour_log_probs: th.Tensor,
    target_log_probs: th.Tensor,
    rewards: th.Tensor,
    values: th.Tensor,
    bootstrap_value: th.Tensor,
    discounts: th.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float | None = None,
) -> tuple[th.Tensor, th.Tensor]:
    """V-trace targets (Espeholt et al., 2018, eq. 1) for time-major ``(T, B)`` tensors.

    Args:
        behaviour_log_probs / target_log_probs: ``log mu(a_t|x_t)`` and ``log pi(a_t|x_t)``.
        rewards: ``r_t``; values: ``V(x_t)``; bootstrap_value: ``V(x_T)`` of shape ``(B,)``.
        discounts: ``gamma_t`` (``gamma``, or 0 where the episode ended after step t).
        rho_bar / c_bar: truncation levels of the importance weights.
        pg_rho_bar: truncation of the policy-gradient weight (default ``rho_bar``).

    Returns:
        ``(vs, pg_advantages)``: the value targets ``v_s`` and
        ``rho_s * (r_s + gamma_s * v_{s+1} - V(x_s))``, both ``(T, B)`` and detached.
    """
    with th.no_grad():
        ratios = th.exp(target_log_probs - behaviour_log_probs)
        rhos = th.clamp(ratios, max=rho_bar)
        cs = th.clamp(ratios, max=c_bar)
        next_values = th.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = rhos * (rewards + discounts * next_values - values)
        # reverse scan over T, all rows at once: vs_t - V_t = delta_t + gamma_t c_t (vs_t+1 - V_t+1)
        decay = discounts * cs
        vs_minus_v = th.empty_like(values)
        acc = th.zeros_like(bootstrap_value)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = th.addcmul(deltas[t], decay[t], acc, out=vs_minus_v[t])
        vs = vs_minus_v.add_(values)
        next_vs = th.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
        pg_rhos = th.clamp(ratios, max=pg_rho_bar if pg_rho_bar is not None else rho_bar)
        pg_advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages


def vtrace_loss(
    log_probs: th.Tensor,
    entropy: th.Tensor,
    values: th.Tensor,
    vs: th.Tensor,
    pg_advantages: th.Tensor,
    vf_coef: float,
    ent_coef: float,
    reduction: str = "mean",
) -> tuple[th.Tensor, dict[str, float]]:
    """IMPALA loss: ``-pg_adv * log pi + vf_coef * 0.5 * (vs - V)^2 - ent_coef * H``."""
    reduce = th.sum if reduction == "sum" else th.mean
    pg_loss = -reduce(pg_advantages * log_probs)
    value_loss = 0.5 * reduce((vs - values).pow(2))
    entropy_loss = -reduce(entropy)
    loss = pg_loss + vf_coef * value_loss + ent_coef * entropy_loss
    return loss, {
        "policy_loss": float(pg_loss.detach()),
        "value_loss": float(value_loss.detach()),
        "entropy_loss": float(entropy_loss.detach()),
    }
