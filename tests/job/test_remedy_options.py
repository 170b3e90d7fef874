"""The remedies as methods (issue 54): their names, their options and what the run refuses
before anything is built."""

from __future__ import annotations

import dataclasses

import pytest

from baselines_sb3.cl import make_method, method_class
from baselines_sb3.cl.meal_regularizers import MealEWC
from baselines_sb3.keywords import accepted_options
from cl_suites.errors import ConfigError
from cl_suites.job.run_spec import resolve_job
from cl_suites.remedies import (
    OPTION_NAMES,
    REMEDIES,
    RemedyConfig,
    compose,
    method_names,
    option_docs,
    split_method,
)


def test_method_names_split_and_compose():
    assert split_method("redo") == ("ft", "redo")
    assert split_method("ewc+redo") == ("ewc", "redo")
    assert split_method("ewc") == ("ewc", None)
    assert split_method("my.module:Method") == ("my.module:Method", None)
    assert compose("ft", "cbp") == "cbp"
    assert compose("mas", "reset") == "mas+reset"
    names = method_names(("ft", "ewc"))
    assert names[:2] == ("ft", "ewc") and "redo" in names and "ewc+plasticity-injection" in names


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pnc+redo", "composes with ft, ewc, online-ewc, l2, mas, not with 'pnc'"),
        ("ewc+foo", "unknown remedy 'foo'; valid: redo, shrink-perturb"),
        ("ewc+redo+cbp", "composes more than two parts"),
    ],
)
def test_bad_compositions_name_the_value_and_the_allowed_ones(name, message):
    with pytest.raises(ConfigError, match="^method") as e:
        split_method(name)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_every_option_has_a_rule_a_remedy_and_a_doc():
    docs = option_docs()
    assert set(docs) == set(OPTION_NAMES)
    assert all(docs.values())
    owners = {name.split("_")[0] for name in OPTION_NAMES}
    assert owners == {"redo", "snp", "cbp", "reset", "injection"}


def test_defaults_are_plasticine_s():
    cfg = RemedyConfig()
    # Plasticine@aa00b4b ppo_continual_procgen_plasticine.py: plasticine_redo(b_obs, tau=0.025)
    # every num_iterations // 10 iterations; shrink_p=0.999999 every minibatch
    assert cfg.redo_tau == 0.025 and cfg.redo_period(100) == 10 and cfg.redo_period(5) == 1
    assert (cfg.snp_shrink, cfg.snp_perturb, cfg.snp_every) == (0.999999, None, "minibatch")
    assert cfg.perturb == 1.0 - 0.999999  # perturb_p = 1.0 - shrink_p, not 1e-6
    assert not cfg.cbp_reset_moments
    assert cfg.injection_updates(100) == (50,) and cfg.injects_at_end
    assert cfg.reset_layers == "heads"
    # loss-of-plasticity lop/rl/cfg/ant/cbp.yml: rr 1e-4, mt 10000; GnT decay_rate 0.99
    assert (cfg.cbp_replacement_rate, cfg.cbp_maturity, cfg.cbp_decay) == (1e-4, 10000, 0.99)
    assert dataclasses.replace(cfg, redo_every=7).redo_period(100) == 7


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("redo_tau", 0.0, "must be a number in (0, 1); got 0.0"),
        ("redo_tau", 1.0, "must be a number in (0, 1); got 1.0"),
        ("redo_every", 0, "must be an integer >= 1 or none; got 0"),
        ("redo_every", -3, "must be an integer >= 1 or none; got -3"),
        ("cbp_maturity", 0, "must be an integer >= 1; got 0"),
        ("snp_every", "epoch", "must be one of 'minibatch', 'task'; got 'epoch'"),
    ],
)
def test_settings_out_of_range_are_refused_in_one_line(option, value, message):
    with pytest.raises(ConfigError) as e:
        RemedyConfig(**{option: value})
    assert str(e.value) == f"option {option!r} {message}"


def test_the_composed_class_takes_the_base_s_and_the_remedy_s_options():
    cls = method_class("ewc+redo", "meal")
    assert issubclass(cls, MealEWC) and cls.name == "ewc+redo"
    assert cls.switch_inside_step is False  # changes to the network after the evaluation
    options = accepted_options(cls)
    assert set(OPTION_NAMES) <= set(options) and "lam" in options
    method = make_method("redo", redo_tau=0.1)
    assert method.remedy_config.remedy == "redo" and method.remedy_config.redo_tau == 0.1
    assert method_class("redo") is method_class("redo")  # one class per pair


def _resolve(**kw):
    kw.setdefault("suite", "MEAL-2")
    kw.setdefault("learner", "ppo")
    kw.setdefault("preset", "small")
    return resolve_job(probe_device=False, **kw)


def test_a_run_records_every_setting_of_its_remedy():
    spec = _resolve(method="ewc+redo", overrides={"redo_tau": 0.1})
    method = spec.hp["method"]
    assert method["redo_tau"] == 0.1 and method["snp_shrink"] == 0.999999
    assert method["lam"] == pytest.approx(1e11)  # the base method's preset values


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"method": "ewc", "overrides": {"redo_tau": 0.1}},
            "option 'redo_tau' belongs to the remedy 'redo', and the run has no remedy",
        ),
        (
            {"method": "redo", "overrides": {"cbp_decay": 0.5}},
            "option 'cbp_decay' belongs to the remedy 'cbp', and the run has remedy 'redo'",
        ),
        ({"method": "redo", "overrides": {"redo_tau": 1.5}}, "redo_tau must be a number in (0, 1)"),
        ({"method": "cbp", "overrides": {"redo_every": 0}}, "belongs to the remedy 'redo'"),
        ({"method": "redo", "overrides": {"redo_every": 0}}, "redo_every must be an integer >= 1"),
        (
            {"method": "redo", "overrides": {"net_arch": []}},
            "redo works on hidden units, and the network has none (net_arch=[])",
        ),
        ({"method": "redoo"}, "unknown method 'redoo' (did you mean 'redo'?)"),
    ],
)
def test_bad_remedy_input_is_refused_before_anything_is_built(kw, message, tmp_path):
    with pytest.raises(ConfigError) as e:
        _resolve(**kw)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("remedy", REMEDIES)
def test_every_remedy_resolves_on_both_meal_learners(remedy):
    for learner in ("ppo", "ppo-jax"):
        spec = _resolve(method=f"mas+{remedy}", learner=learner)
        assert spec.method == f"mas+{remedy}"
