"""The JAX learners' CL methods as rooms (``baselines_jax.cl``) and MEAL 057f862's
importance modes; the job's refusals of a method a learner or suite cannot run."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from baselines_jax import IPPOConfig
from baselines_jax import cl as jcl


def _update(cl_method: str, mode: str | None) -> float:
    start = jcl.CLState({"w": jnp.zeros(1)}, {"w": jnp.full(1, 2.0)})
    cfg = IPPOConfig(cl_method=cl_method, importance_mode=mode, ewc_decay=0.9)
    out = jcl.update(start, {"w": jnp.ones(1)}, {"w": jnp.full(1, 4.0)}, cfg)
    assert float(out.anchor["w"][0]) == 1.0  # the anchor is the task's final parameters
    return float(out.importance["w"][0])


@pytest.mark.parametrize(
    ("cl_method", "mode", "expected"),
    [
        ("ewc", None, 6.0),  # multi: 2 + 4 (the paper-time EWC)
        ("online-ewc", None, 0.9 * 2 + 0.1 * 4),  # online
        ("mas", None, 4.0),  # last: replaced
        ("ewc", "online", 0.9 * 2 + 0.1 * 4),  # 057f862's default --importance-mode
        ("ewc", "last", 4.0),
        ("mas", "multi", 6.0),
        ("mas", "online", 0.9 * 2 + 0.1 * 4),  # 057f862's online MAS
    ],
)
def test_importance_modes_combine_as_meal_057f862(cl_method, mode, expected):
    assert _update(cl_method, mode) == pytest.approx(expected, rel=1e-7)


def test_an_unknown_importance_mode_names_the_valid_ones():
    with pytest.raises(
        ValueError, match="unknown importance_mode 'sum'; valid: multi, online, last"
    ):
        IPPOConfig(cl_method="ewc", importance_mode="sum")


def test_each_method_is_one_registry_line():
    from cl_suites.declarations import MEAL_METHODS

    assert tuple(jcl.METHODS) == MEAL_METHODS
    for name in MEAL_METHODS:
        module, _, attr = jcl.METHODS[name].partition(":")
        assert module.startswith("baselines_jax.cl.") and attr


@pytest.mark.parametrize(
    ("suite", "method", "learner", "overrides", "message"),
    [
        (
            "MEAL-2", "agem", "ppo", {},
            "learner 'ppo' does not run method 'agem'; valid: ft, ewc, online-ewc, l2, mas, "
            "pnc, clear; 'agem' runs on --learner ppo-jax",
        ),
        (
            "Atari6", "packnet", None, {},
            "learner 'vtrace' does not run method 'packnet'; valid: ft, ewc, online-ewc, l2, "
            "mas, pnc, clear; 'packnet' is one of MEAL's methods: MEAL suites, --learner ppo-jax",
        ),
        (
            "MEAL-2", "ewc", "ppo-jax", {"er_ace_coef": 2.0},
            "option(s) 'er_ace_coef' mean nothing to method 'ewc': er_ace_coef is read by er-ace",
        ),
        (
            "MEAL-2", "ft", "ppo-jax", {"importance_mode": "online"},
            "option(s) 'importance_mode' mean nothing to method 'ft': importance_mode is read "
            "by ewc, online-ewc, mas",
        ),
    ],
)  # fmt: skip
def test_a_method_a_learner_or_suite_cannot_run_is_refused_in_one_line(
    suite, method, learner, overrides, message
):
    from cl_suites.job.run_spec import resolve
    from cl_suites.request import RunRequest

    request = RunRequest(suite=suite, method=method, learner=learner, overrides=overrides)
    with pytest.raises(ValueError) as info:
        resolve(request, probe_device=False)
    assert str(info.value) == message


def test_replay_methods_take_meal_057f862_values_by_preset():
    from cl_suites.job.run_spec import resolve
    from cl_suites.request import RunRequest

    def learner(method: str, preset: str) -> dict:
        request = RunRequest(suite="MEAL-2", method=method, learner="ppo-jax", preset=preset)
        return resolve(request, probe_device=False)[0].hp["learner"]

    agem = learner("agem", "paper")
    assert (agem["agem_memory_size"], agem["agem_sample_size"]) == (100_000, 1024)
    assert learner("er-ace", "meal-authors")["er_ace_coef"] == 1.0
    assert learner("packnet", "meal-authors")["packnet_finetune_steps"] == 10_000_000
    assert learner("packnet", "small")["packnet_finetune_steps"] == 256  # one small update


def test_packnet_runs_build_meals_packnet_network_and_others_the_paper_network():
    """MEAL 057f862's IPPO builds ``model/mlp_packnet.py`` for PackNet and ``model/mlp.py``
    otherwise; ``--set network=...`` picks either, and a bad value is refused in one line."""
    from baselines_jax.learner import actor_critic
    from cl_suites.job.run_spec import resolve
    from cl_suites.request import RunRequest

    def network(method: str, **overrides) -> tuple[str, float]:
        request = RunRequest(suite="MEAL-2", method=method, learner="ppo-jax", overrides=overrides)
        config = resolve(request, probe_device=False)[0].learner_config
        net = actor_critic(config, 2)
        return net.norm_layers, net.norm_eps

    assert network("packnet") == ("first", 1e-6)
    assert network("agem") == network("ewc") == ("each", 1e-5)
    assert network("packnet", network="mlp") == ("each", 1e-5)
    assert network("ft", network="mlp-packnet") == ("first", 1e-6)
    with pytest.raises(ValueError) as info:
        network("packnet", network="cnn")
    assert str(info.value) == "network must be one of 'mlp', 'mlp-packnet' or none, got 'cnn'"
