"""The suite catalog: one suite-id parser, and MEAL as a catalog entry like every suite.

The entries' fields are checked against the code that used to branch on "is this MEAL?"
(presets, the learners, the job's evaluation defaults and step unit), so a field that
drifts from its user fails here.
"""

from __future__ import annotations

import pytest

from cl_suites.declarations import MEAL_METHODS
from cl_suites.errors import ConfigError, UnknownSuiteError
from cl_suites.job import hyperparameters, presets
from cl_suites.job.learners import learners_for
from cl_suites.meal.runtime import meal_suite
from cl_suites.suites import (
    SUITE_TEMPLATES,
    SUITES,
    find_suite,
    parse_suite_id,
    suite_template,
)
from cl_suites.suites.runtime import AGENT_STEPS, ENV_STEPS, VECTOR_RUNTIME


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Procgen6", "Procgen6"),
        ("CLSuite/Procgen6-v0", "Procgen6"),
        ("cl_suites:CLSuite/Procgen6-v0", "Procgen6"),
        (" Diagnostic ", "Diagnostic"),
        ("CHORES-VaryRoom", "CHORES-VaryRoom"),
        ("CLSuite/CHORES-MultiTraj-v0", "CHORES-MultiTraj"),
        ("MEAL-20", "MEAL-20"),
        ("CLSuite/MEAL-20-v0", "MEAL-20"),
        ("cl_suites:CLSuite/MEAL-3-v0", "MEAL-3"),
        ("MEAL-020", "MEAL-20"),
    ],
)
def test_parse_suite_id_accepts_every_form_of_an_id(text, name):
    assert parse_suite_id(text) == name
    assert find_suite(text).name == name
    assert parse_suite_id(find_suite(text).id) == name  # the id round-trips


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "Procgen7",
            "unknown suite 'Procgen7' (did you mean 'Procgen6'?); available: CLSuite/Atari6-v0",
        ),
        ("procgen6", "unknown suite 'procgen6'"),
        ("Procgen6-v1", "unknown suite 'Procgen6-v1'"),
        ("MEAL", "'MEAL' is not a MEAL id"),
        ("MEAL-0", "'MEAL-0' is not a MEAL id"),
        ("MEAL-x", "'MEAL-x' is not a MEAL id"),
        ("CLSuite/MEAL-2-v1", "'CLSuite/MEAL-2-v1' is not a MEAL id"),
    ],
)
def test_parse_suite_id_refuses_with_the_valid_ids(text, message):
    with pytest.raises(UnknownSuiteError) as info:
        parse_suite_id(text)
    assert str(info.value).startswith(message)
    # the built-in types code caught before: KeyError (find_suite), ValueError (presets)
    assert isinstance(info.value, KeyError) and isinstance(info.value, ConfigError)
    with pytest.raises(KeyError):
        find_suite(text)


def test_unknown_suite_lists_meal_ids():
    with pytest.raises(UnknownSuiteError, match=r"CLSuite/MEAL-<N>-v0 \(N >= 1\)"):
        find_suite("Atari7")


def test_meal_is_a_catalog_entry_with_its_differences_as_fields():
    info = find_suite("CLSuite/MEAL-20-v0")
    assert (info.name, info.id, info.api, info.extra) == (
        "MEAL-20",
        "CLSuite/MEAL-20-v0",
        "pettingzoo",
        "meal",
    )
    assert info.family == "meal" and info.preset_key == "MEAL"
    assert info.step_unit is ENV_STEPS
    assert (info.evaluation.at_start, info.evaluation.per_task) == (False, True)
    assert learners_for(info) == ("ppo-jax", "mappo-jax", "ppo")  # entries declare MEAL
    assert info.default_learner == "ppo-jax"
    assert info.methods == MEAL_METHODS
    assert set(info.methods) == set(presets.MEAL_METHOD_VALUES) == set(presets.SMALL_MEAL_METHODS)
    assert type(info.runtime).__name__ == "MealRuntime" and info.runtime.num_tasks == 20
    assert find_suite("MEAL-20") == meal_suite(20)  # equal entries for one id
    assert list(SUITE_TEMPLATES) == ["CLSuite/MEAL-<N>-v0"]


def test_single_agent_entries():
    for info in SUITES.values():
        assert info.step_unit is AGENT_STEPS and info.runtime is VECTOR_RUNTIME
        assert (info.evaluation.at_start, info.evaluation.per_task) == (True, False)
        assert learners_for(info) == ("ppo", "vtrace") and info.methods is None
        assert info.preset_key == info.name and info.api == "gymnasium"
    assert SUITES["Diagnostic"].family == "diagnostic"
    assert [name for name, info in SUITES.items() if info.family != "cora"] == ["Diagnostic"]


@pytest.mark.parametrize("suite", [*SUITES, "MEAL-2", "CLSuite/MEAL-10-v0"])
@pytest.mark.parametrize("preset", presets.PRESETS)
def test_catalog_defaults_agree_with_the_presets(suite, preset):
    info = find_suite(suite)
    if preset not in hyperparameters.presets_for(info.family):  # meal-authors off MEAL
        with pytest.raises(ValueError, match=f"preset {preset!r} is for .* only; presets for"):
            hyperparameters.preset_settings(suite, "ppo", "ft", preset)
        return
    assert info.default_learner in learners_for(info)  # the default: a catalog field
    assert info.family == hyperparameters.suite_family(suite)


def test_meal_instance_carries_agents_metadata_and_unit():
    info = find_suite("MEAL-2")
    meal = info.instance(steps_per_task=1000, num_agents=3)
    assert meal.num_agents == 3 and meal.sequence.name == "MEAL-2"
    assert set(meal.run_metadata()) == {"num_agents", "layouts", "score_normalizers", "step_unit"}
    assert info.build(steps_per_task=1000).tasks[0].budget == 1000
    # the run's instance: kitchens from the run seed, budgets in whole updates of 384
    run, kwargs = info.runtime.run_instance(info, {"steps_per_task": 1000}, seed=7, rollout=384)
    assert kwargs == {  # shaping over half the requested budget (MEAL#10 point 3)
        "layout_seed": 7, "random_reset": True, "steps_per_task": 768, "shaping_horizon": 500
    }  # fmt: skip
    assert run.options["layout_seed"] == 7 and run.sequence.tasks[0].budget == 768


def test_single_agent_instance():
    info = find_suite("Diagnostic")
    instance = info.instance(steps_per_task=500)
    assert instance.num_agents == 1 and instance.run_metadata() == {}
    assert instance.describe() == instance.sequence.describe()
    assert info.runtime.seeded_kwargs({"cycles": 2}, seed=3) == {"cycles": 2}


def test_the_id_parser_names_exactly_the_catalog_entries():
    """The catalog's entries are the one declaration of the suites' names: the one parser
    accepts each entry's name and id, lists exactly them when it refuses one, and the leaf
    ``cl_suites.suites.ids`` (MEAL's suite builder reads MEAL's ids without the catalog)
    knows no fixed suite; MEAL's entry function is named in the catalog as
    ``"module:function"``, like the builders, and imported when looked up."""
    from cl_suites.suites import ids

    for name, info in SUITES.items():
        assert parse_suite_id(name) == parse_suite_id(info.id) == info.name == name
        assert ids.meal_name(info.id) is None
    assert ids.meal_name("CLSuite/MEAL-020-v0") == "MEAL-20"
    with pytest.raises(UnknownSuiteError) as refused:
        parse_suite_id("Nope")
    listed = str(refused.value).split("available: ")[1].removesuffix("'")
    assert (
        listed
        == ", ".join(info.id for info in SUITES.values()) + " and CLSuite/MEAL-<N>-v0 (N >= 1)"
    )
    assert SUITE_TEMPLATES["CLSuite/MEAL-<N>-v0"] == "cl_suites.meal.runtime:meal_suite"
    assert suite_template("CLSuite/MEAL-<N>-v0") is meal_suite
