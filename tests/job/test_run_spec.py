"""One run specification (issue 22): every entry point reads a value the same way and
accepts or refuses an option name the same way.

The entry points: ``cl-suites run --set``, ``cl-suites sweep --set`` (the grid its
preflight and workers resolve), a run config file, a sweep file and the library call
``run_main_job`` / ``resolve_job``; all of them end in ``cl_suites.job.run_spec.resolve``.
"""

from __future__ import annotations

import json

import pytest

from cl_suites import cli
from cl_suites.cli import output as cli_output
from cl_suites.cli.run import run_config
from cl_suites.config import parse_set, parse_value
from cl_suites.errors import UnknownOptionError
from cl_suites.job import main_job
from cl_suites.job.run_spec import JOB_FIELDS, JobOptions, resolve, resolve_job
from cl_suites.sweep import cli as sweep_cli
from cl_suites.sweep.driver import preflight
from cl_suites.sweep.grid import load_sweep_file

RUN = ["--suite", "Diagnostic", "--method", "ewc", "--preset", "small"]
SWEEP = ["--suite", "Diagnostic", "--methods", "ewc", "--seeds", "0", "--preset", "small"]

# (key, text, resolved value): None as the value means "the option's default"
SAME_TEXT = [
    ("tensorboard", "off", False),
    ("tensorboard", "on", True),
    ("tensorboard", "yes", True),
    ("report", "no", False),
    ("report", "true", True),
    ("report", "False", False),
    ("device", "none", "auto"),  # none: the default
    ("device", "null", "auto"),
    ("device", "cpu", "cpu"),
    ("steps_per_task", "1e5", 100_000),
    ("eval_every", "2000", 2000),
    ("learning_rate", "3e-4", 3e-4),
    ("net_arch", "[64, 64]", [64, 64]),
]


def _resolved(spec, key):
    """The value ``key`` has in a resolved run (wherever it went)."""
    if key in JOB_FIELDS:
        return getattr(spec.options, key)
    for part in ("learner", "method"):
        if key in spec.hp[part]:
            return spec.hp[part][key]
    return spec.hp[key] if key in spec.hp else spec.suite_kwargs[key]


def _run_spec(argv):
    config = run_config(cli.build_parser().parse_args(["run", *argv]))
    return resolve(config.request)[0]


def _sweep_spec(argv):
    args = cli.build_parser().parse_args(["sweep", *argv])
    base = load_sweep_file(args.config)[0] if args.config else {}
    (run,) = sweep_cli.spec_from_args(args, base).runs()
    return resolve(run.request)[0]


@pytest.mark.parametrize(("key", "text", "value"), SAME_TEXT)
def test_the_same_text_gives_the_same_value_at_every_entry_point(tmp_path, key, text, value):
    run_file = tmp_path / "run.yaml"
    run_file.write_text(f"suite: Diagnostic\nmethod: ewc\npreset: small\n{key}: {text}\n")
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        f"suites: Diagnostic\nmethods: ewc\nseeds: 0\npreset: small\noverrides:\n  {key}: {text}\n"
    )
    got = {
        "run --set": _resolved(_run_spec([*RUN, "--set", f"{key}={text}"]), key),
        "sweep --set": _resolved(_sweep_spec([*SWEEP, "--set", f"{key}={text}"]), key),
        "run config file": _resolved(_run_spec(["--config", str(run_file)]), key),
        "sweep file": _resolved(_sweep_spec(["--config", str(sweep_file)]), key),
    }
    assert got == dict.fromkeys(got, value)
    assert all(type(v) is type(value) for v in got.values()), got


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e5", 100_000), ("3e-4", 3e-4), ("yes", True), ("OFF", False), ("none", None),
     ("[64, 64]", [64, 64]), ("cuda:0", "cuda:0"), ('"on"', "on"), ("-2", -2)],
)  # fmt: skip
def test_one_value_parser(text, value):
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)
    assert parse_set(f"some-key={text}") == ("some_key", value)


def test_a_toml_float_in_a_config_file_becomes_the_integer_the_option_declares(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('suite = "Diagnostic"\nmethod = "ewc"\npreset = "small"\n')
    toml.write_text(toml.read_text() + "steps_per_task = 1e5\ncheckpoint_every = 2e3\n")
    spec = _run_spec(["--config", str(toml)])
    assert spec.suite_kwargs["steps_per_task"] == 100_000
    assert type(spec.suite_kwargs["steps_per_task"]) is int
    assert spec.options.checkpoint_every == 2000 and type(spec.options.checkpoint_every) is int


def _messages(tmp_path, capsys, learner, key, value):
    """The error each entry point gives for ``--set key=value`` (``None``: accepted)."""
    out: dict[str, str | None] = {}
    argv = ["--suite", "Diagnostic", "--method", "ewc", "--learner", learner, "--preset", "small"]
    code = cli.main(["run", *argv, "--set", f"{key}={value}", "--print-config"])
    err = capsys.readouterr().err.strip()
    out["run --set"] = None if code == 0 else err.removeprefix("error: ")
    config = tmp_path / f"{learner}-{key}.toml"
    config.write_text(f'{key} = {value}\nlearner = "{learner}"\n')
    code = cli.main(["run", *argv, "--config", str(config), "--print-config"])
    err = capsys.readouterr().err.strip()
    out["config file"] = None if code == 0 else err.removeprefix("error: ")
    args = cli.build_parser().parse_args(
        ["sweep", *SWEEP, "--learners", learner, "--set", f"{key}={value}"]
    )
    try:
        preflight(sweep_cli.spec_from_args(args, {}).runs())
        out["sweep preflight"] = None
    except ValueError as e:
        out["sweep preflight"] = str(e).split("(1) ", 1)[1].rsplit(" (run ", 1)[0]
    kwargs = dict(suite="Diagnostic", method="ewc", learner=learner, preset="small")
    try:
        main_job.resolve_job(**kwargs, num_envs=None, overrides={key: parse_value(value)})
        out["library"] = None
    except ValueError as e:
        out["library"] = str(e)
    return out


@pytest.mark.parametrize(
    ("learner", "key", "value", "accepted"),
    [
        ("vtrace", "rho_bar", "0.9", True),  # a V-trace keyword: accepted everywhere
        ("ppo", "rho_bar", "0.9", False),  # V-trace's, not PPO's: refused everywhere
        ("ppo", "learnin_rate", "0.1", False),  # unknown: did-you-mean, everywhere
        ("ppo", "n_tasks", "3", True),  # a suite option
    ],
)
def test_an_option_is_accepted_or_refused_alike_by_every_entry_point(
    tmp_path, capsys, learner, key, value, accepted
):
    messages = _messages(tmp_path, capsys, learner, key, value)
    if accepted:
        assert messages == dict.fromkeys(messages), messages
        return
    first = messages["library"]
    assert first and key in first and messages == dict.fromkeys(messages, first), messages


def test_an_unknown_option_names_the_closest_and_the_valid_ones_by_section():
    with pytest.raises(UnknownOptionError) as info:
        resolve_job(suite="Diagnostic", method="ewc", learner="ppo", preset="small",
                num_envs=None, overrides={"lamm": 3.0})  # fmt: skip
    text = str(info.value)
    assert text.startswith("unknown option 'lamm' (did you mean 'lam'?); valid for --suite")
    for section in ("job: ", "learner: ", "method: ", "policy: ", "suite: "):
        assert section in text
    assert isinstance(info.value, TypeError)  # as the constructors' own refusal
    for learner in ("ppo-jax", "ppo"):  # MEAL's suite options: the same check
        with pytest.raises(UnknownOptionError, match="did you mean 'episode_len'"):
            resolve_job(suite="MEAL-2", method="ft", learner=learner, preset="small",
                    num_envs=None, overrides={"episode_lenn": 64})  # fmt: skip


def test_every_job_option_is_declared_once_with_a_type_and_a_doc():
    for name, f in JOB_FIELDS.items():
        assert f.metadata["doc"] and f.metadata["check"] is not None, name
    assert JobOptions().torch_threads == main_job.TORCH_THREADS == 1


def test_the_job_reads_resolved_typed_options():
    spec = resolve_job(suite="Diagnostic", method="ft", learner="ppo", preset="small",
                   num_envs=None, overrides={"torch_threads": 2})  # fmt: skip
    assert spec.options.checkpoint_every == spec.sequence.eval_every == 1000
    assert spec.options.update_threads == 2  # follows torch_threads
    assert (spec.options.eval_at_start, spec.options.eval_per_task) == (True, False)
    assert spec.job == {"torch_threads": 2}  # what the run set (the golden file's form)
    meal = resolve_job(suite="MEAL-2", method="ft", learner=None, preset="small",
                   num_envs=None, overrides={})  # fmt: skip
    assert (meal.options.eval_at_start, meal.options.eval_per_task) == (False, True)


def test_cl_suites_options_lists_every_option_with_its_default_and_doc(capsys, monkeypatch):
    from rich.console import Console

    monkeypatch.setattr(cli_output, "console", Console(width=200))
    assert cli.main(["options", "--suite", "Diagnostic", "--method", "clear",
                     "--learner", "vtrace", "--preset", "small"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    for title in ("job options", "learner options", "method options", "policy options"):
        assert title in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "20000" in lines["buffer_size"] and "CLEAR replay buffer" in lines["buffer_size"]
    assert "rho_bar" in lines and "checkpoint_every" in lines and "steps_per_task" in lines


def test_options_print_plain_columns_and_each_options_own_doc_when_piped(capsys):
    """Issue 29 item 5: ``cl-suites options --suite MEAL-2`` piped prints one line per
    option (no one-word wrapped lines); ``eval_episodes`` has its own doc; ``difficulty``
    says which generator takes ``"extreme"``."""
    pytest.importorskip("meal")
    assert cli.main(["options", "--suite", "MEAL-2"]) == 0  # capsys: not a terminal
    out = capsys.readouterr().out
    assert all(len(line.split()) > 1 for line in out.splitlines() if line.strip())
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["eval_episodes"].split(None, 2)[2] == "evaluation episodes per task (default 10)."
    assert "cadence" in lines["eval_every"] and "cadence" not in lines["eval_episodes"]
    assert 'only generator ``"meal-bench"`` also takes ``"extreme"``' in lines["difficulty"]


def test_every_suite_option_has_its_own_doc():
    """``a / b: text`` in a builder's docstring gave both options one doc (MEAL's
    eval_episodes said eval_every's cadence)."""
    from cl_suites.config import argument_docs
    from cl_suites.suites import SUITES, find_suite

    for name in (*SUITES, "MEAL-2"):
        docs = argument_docs(find_suite(name).builder_function())
        if "eval_episodes" in docs:
            assert docs["eval_every"] != docs["eval_episodes"], name
            assert "cadence" not in docs["eval_episodes"], name
    procgen = argument_docs(find_suite("Procgen6").builder_function())
    assert procgen["num_train_levels"] != procgen["start_level"]


def test_the_paper_generator_refuses_extreme_before_any_kitchen(monkeypatch):
    pytest.importorskip("meal")
    from cl_suites.errors import BadValueError
    from cl_suites.meal import build_suite, layouts

    monkeypatch.setattr(layouts, "generate", None)  # nothing may be generated
    with pytest.raises(BadValueError, match=r"difficulty 'extreme' is unknown with strategy "
                       r"'generate' and generator 'paper'; use one of \('easy', 'medium', "
                       r"'hard'\) \(generator 'meal-bench' also takes 'extreme'"):  # fmt: skip
        build_suite(2, difficulty="extreme")
    with pytest.raises(BadValueError, match="strategy 'ordered'.*use one of"):
        build_suite(2, difficulty="extreme", strategy="ordered")
    assert layouts.allowed_difficulties("generate", "meal-bench")[-1] == "extreme"


def test_print_config_shows_every_job_option(capsys):
    assert cli.main(["run", *RUN, "--set", "report=off", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["job"]) == set(JOB_FIELDS)
    assert printed["job"]["report"] is False and printed["job"]["checkpoint_every"] == 1000
    assert printed["device"] == "cpu" and printed["job"]["device"] == "auto"  # decided, asked


def test_the_sweep_resolves_every_run_as_the_golden_file_records():
    """The sweep's runs (grid -> ``RunSpec`` -> its workers' ``resolve``) resolve exactly as
    the golden file of ``cl-suites run`` / ``run_main_job`` records them."""
    from cl_suites.job.hyperparameters import presets_for
    from cl_suites.suites import SUITES, find_suite
    from cl_suites.sweep.grid import SweepSpec
    from tests.golden.resolved_configs import GOLDEN, MEAL_SUITES, _jsonable

    golden = json.loads(GOLDEN.read_text())
    checked = 0
    for suite in (*SUITES, *MEAL_SUITES):
        for preset in presets_for(find_suite(suite).family):
            grid = SweepSpec(suites=(suite,), methods=("ft", "ewc"), seeds=(0,), preset=preset)
            for run in grid.runs():
                expected = golden[f"{suite}|default|{run.request.method}|{preset}"]
                got = json.loads(json.dumps(_jsonable(resolve(run.request)[0].config())))
                assert got == expected, (suite, run.request.method, preset)
                checked += 1
    assert checked == 4 * (len(SUITES) + len(MEAL_SUITES)) + 2 * len(MEAL_SUITES)  # meal-authors


def test_the_resolved_hyperparameters_are_frozen_and_typed():
    """``JobSpec.hp`` is a frozen ``Hyperparameters``: typed attributes (learner, method,
    policy options), a read-only mapping view for the factory, plain data for JSON."""
    import dataclasses

    from cl_suites.job.hyperparameters import Hyperparameters, PolicyOptions
    from cl_suites.job.run_spec import resolve_job

    spec = resolve_job(
        suite="Diagnostic",
        method="ewc",
        learner="ppo",
        preset="small",
        num_envs=None,
        overrides={"lam": 3.0, "net_arch": [32, 32]},
    )
    hp = spec.hp
    assert isinstance(hp, Hyperparameters) and isinstance(hp.policy, PolicyOptions)
    assert hp.method["lam"] == 3.0 and hp["method"]["lam"] == 3.0
    assert hp.policy.net_arch == [32, 32] == hp["net_arch"]
    assert hp.learner["n_steps"] == 16 and hp.num_envs == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        hp.method = {}
    with pytest.raises(TypeError):
        hp["method"]["lam"] = 1.0  # read-only: a resolved run cannot drift
    with pytest.raises(TypeError):
        hp["learner"]["n_steps"] = 1
    plain = hp.to_dict()
    assert type(plain["method"]) is dict and json.loads(json.dumps(plain)) == plain
    plain["method"]["lam"] = 0.0  # a copy
    assert hp.method["lam"] == 3.0
    jax = resolve_job(suite="MEAL-2", method="ewc", learner=None, preset="small", num_envs=None,
                  overrides=None)  # fmt: skip
    assert jax.hp.policy is None and jax.hp.learner["cl_method"] == "ewc"
