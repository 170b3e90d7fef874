"""Own CL methods as plug-ins (issue 41 item 1): ``--method package.module:Class`` and the
``cl_suites.methods`` entry points run through the main job like the built-in methods.

The example plug-in ``examples/l2_init.py`` runs, is killed and resumed (its state in the
checkpoints: the resumed run's evaluations equal the uninterrupted run's), through the
library and the CLI; a plug-in that cannot be used is refused in one line before a run
directory exists. The two-run sweep mixing it with a built-in method is in
``tests/sweep/test_sweep_own_method.py``.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import textwrap
import uuid

import pytest
import torch as th

from baselines_sb3.cl import plugins
from cl_suites.cli import main
from cl_suites.errors import MethodPluginError
from cl_suites.job.main_job import run_main_job
from cl_suites.job.run_spec import option_table, resolve_job
from cl_suites.rundir.runlog import read_eval, read_metadata
from tests.helpers.kill_drills import kill_run_at

th.set_num_threads(1)

PLUGIN = "examples.l2_init:L2Init"
JOB = dict(suite="Diagnostic", method=PLUGIN, learner="ppo", preset="small", seed=1, num_envs=None)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 250,
    "eval_episodes": 2,
    "checkpoint_every": 300,
    "report": False,
    "lam": 50.0,
}
FLAGS = shlex.split(
    f"--suite Diagnostic --method {PLUGIN} --learner ppo --preset small --seed 1 "
    "--set n_tasks=2 --set show_task=false --steps-per-task 1000 --eval-every 250 "
    "--eval-episodes 2 --set checkpoint_every=300 --set report=false --set progress=false "
    "--set lam=50"
)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.split("\n") if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _evals(run_dir):
    return read_eval(run_dir).drop(columns="wall_time")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("own") / "full"
    run_main_job(run_dir=run_dir, resume=False, overrides=dict(OVERRIDES), **JOB)
    return run_dir


def test_the_plugin_runs_with_the_presets_learner_and_its_options(full_run):
    meta = read_metadata(full_run)
    assert meta["method"] == PLUGIN
    assert meta["hyperparameters"]["method"] == {"lam": 50.0, "anchor": "previous"}
    # the preset's learner and network, as for a built-in method on Diagnostic
    assert meta["hyperparameters"]["net_arch"] == [64]
    assert meta["learner"] == "ppo"
    state = th.load(sorted((full_run / "checkpoint").glob("step-*.pt"))[-1], weights_only=True)
    assert state["method"]["switches"] == 1 and state["method"]["anchor"]


def _final_state(run_dir):
    return th.load(sorted((run_dir / "checkpoint").glob("step-*.pt"))[-1], weights_only=True)


def _distance(policy, anchor) -> float:
    return float(sum(((policy[n] - a) ** 2).sum() for n, a in anchor.items()))


def test_the_penalty_pulls_the_weights_to_the_anchor(full_run, tmp_path):
    """The same run with ``lam=0`` (no pull) trains the same first task, then ends farther
    from the anchor (the weights at the switch): the plug-in's penalty reaches the loss."""
    run_main_job(
        run_dir=tmp_path / "lam0", resume=False, overrides={**OVERRIDES, "lam": 0.0}, **JOB
    )
    pulled, free = _final_state(full_run), _final_state(tmp_path / "lam0")
    a, b = _evals(full_run), _evals(tmp_path / "lam0")
    first_task = a.total_step <= 1000
    assert a[first_task].equals(b[first_task])
    anchor = {k.removeprefix("policy."): v for k, v in pulled["method"]["anchor"].items()}
    assert 0 < 2 * _distance(pulled["policy"], anchor) < _distance(free["policy"], anchor)


def _same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)


def test_a_killed_plugin_run_resumes_to_the_uninterrupted_run(full_run, tmp_path):
    """Killed after the switch (the anchor set), resumed from the checkpoint at 1280: the
    anchor comes back from the checkpoint, so evaluations and final weights equal the
    uninterrupted run's."""
    kill_run_at(tmp_path / "cut", JOB, OVERRIDES, kill_at=1400)
    run_main_job(run_dir=tmp_path / "cut", resume=True, overrides=dict(OVERRIDES), **JOB)
    assert _evals(full_run).equals(_evals(tmp_path / "cut"))
    assert _same_weights(_final_state(full_run)["policy"], _final_state(tmp_path / "cut")["policy"])


def test_the_cli_runs_and_resumes_the_plugin(full_run, tmp_path, monkeypatch):
    from baselines_sb3 import callbacks

    original = callbacks.ContinualEvalCallback._on_step

    def killer(self):
        out = original(self)
        if self.total_step >= 1400:
            raise KeyboardInterrupt
        return out

    run_dir = tmp_path / "cli"
    with monkeypatch.context() as mp:
        mp.setattr(callbacks.ContinualEvalCallback, "_on_step", killer)
        assert main(["run", *FLAGS, "--run-dir", str(run_dir)]) == 130
    assert main(["run", *FLAGS, "--run-dir", str(run_dir), "--resume"]) == 0
    assert _evals(full_run).equals(_evals(run_dir))
    assert _same_weights(_final_state(full_run)["policy"], _final_state(run_dir)["policy"])


def test_options_lists_the_plugins_options_with_their_docs(capsys):
    assert main(["options", "--suite", "Diagnostic", "--method", PLUGIN, "--preset", "small"]) == 0
    out = capsys.readouterr().out
    section = out.split("method options")[1].split("policy options")[0]
    assert "lam" in section and "strength of the pull to the anchor" in section
    assert '"previous"' in section and "variant" not in section


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("lam=-1", "lam must be a number >= 0, got -1"),
        ("anchor=last", "anchor must be one of 'previous', 'init', got 'last'"),
        ("lamb=1", "lamb"),  # an unknown name: did-you-mean
    ],
)
def test_bad_values_of_plugin_options_are_refused(setting, message, capsys, tmp_path):
    run_dir = tmp_path / "run"
    args = ["run", *FLAGS, "--set", setting, "--run-dir", str(run_dir)]
    assert main(args) == 2
    assert message in one_line_error(capsys)
    assert not run_dir.exists()


# -- plug-ins that cannot be used -----------------------------------------------------------
BAD_PLUGINS = '''
from typing import Literal
from baselines_sb3 import ContinualMethod


class NotAMethod:
    pass


def a_function():
    pass


class NoType(ContinualMethod):
    """A test plug-in.

    Args:
        lam: strength
    """

    def __init__(self, lam=1.0):
        super().__init__()


class NoDefault(ContinualMethod):
    """A test plug-in.

    Args:
        lam: strength
    """

    def __init__(self, lam: float):
        super().__init__()


class NoDoc(ContinualMethod):
    def __init__(self, lam: float = 1.0):
        super().__init__()


class BadType(ContinualMethod):
    """A test plug-in.

    Args:
        lam: strength
    """

    def __init__(self, lam: list = None):
        super().__init__()


class BadDefault(ContinualMethod):
    """A test plug-in.

    Args:
        steps: how many
    """

    def __init__(self, steps: int = 0.5):
        super().__init__()


class Reserved(ContinualMethod):
    """A test plug-in.

    Args:
        gamma: a discount
    """

    def __init__(self, gamma: float = 0.9):
        super().__init__()


class SuiteClash(ContinualMethod):
    """A test plug-in.

    Args:
        show_task: a flag of its own (Diagnostic's suite has one of that name)
    """

    def __init__(self, show_task: bool = False):
        super().__init__()


class Good(ContinualMethod):
    """A test plug-in.

    Args:
        kind: which
    """

    def __init__(self, kind: Literal["a", "b"] = "a", seed: int = 0):
        super().__init__()
        self.kind, self.seed = kind, seed
'''


@pytest.fixture
def bad_module(tmp_path, monkeypatch):
    name = f"own_plugins_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(BAD_PLUGINS))
    (tmp_path / f"{name}_broken.py").write_text("import numpy\nraise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("NotAMethod", "is the class NotAMethod, not a ContinualMethod subclass"),
        ("a_function", "is function, not a ContinualMethod subclass"),
        ("Missing", "has no 'Missing'"),
        ("NoType", "declares option 'lam' without a type annotation"),
        ("NoDefault", "declares option 'lam' without a default"),
        ("NoDoc", "declares option 'lam' without a doc"),
        ("BadType", "declares option 'lam' of type"),
        ("BadDefault", "declares option 'steps' with a default its type refuses"),
        ("Reserved", "declares option 'gamma', which is an option of learner"),
        ("SuiteClash", "declares option 'show_task', which is also an option of suite Diagnostic"),
    ],
)
def test_a_plugin_that_cannot_be_used_gets_one_line_before_anything_is_built(
    bad_module, attr, message, capsys, tmp_path
):
    run_dir = tmp_path / "run"
    method = f"{bad_module}:{attr}"
    assert (
        main(["run", "--suite", "Diagnostic", "--method", method, "--run-dir", str(run_dir)]) == 2
    )
    line = one_line_error(capsys)
    assert message in line and method in line
    assert not run_dir.exists()
    assert main(["run", "--suite", "Diagnostic", "--method", method, "--print-config"]) == 2
    assert message in one_line_error(capsys)


def test_imports_that_fail_are_one_line(bad_module, capsys, tmp_path):
    for method, message in [
        (f"{bad_module}_broken:X", "failed (RuntimeError: boom)"),
        ("no_such_package_41.methods:X", "cannot import module 'no_such_package_41.methods'"),
        ("ewk", "unknown method 'ewk' (did you mean 'ewc'?)"),
        ("a b:C", "an own method is named package.module:Class"),
    ]:
        assert (
            main(
                [
                    "run",
                    "--suite",
                    "Diagnostic",
                    "--method",
                    method,
                    "--run-dir",
                    str(tmp_path / "r"),
                ]
            )
            == 2
        )
        assert message in one_line_error(capsys)
        assert not (tmp_path / "r").exists()


def test_a_good_plugin_gets_its_seed_and_a_checked_choice(bad_module):
    spec = resolve_job(
        suite="Diagnostic",
        method=f"{bad_module}:Good",
        learner=None,
        preset="small",
        num_envs=None,
        overrides={"kind": "b"},
        seed=0,
    )
    assert dict(spec.hp.method) == {"kind": "b"}
    rows = dict((n, (v, d)) for n, v, d in option_table(spec)["method"])
    assert rows == {"kind": ("b", "which")}


# -- entry points ----------------------------------------------------------------------------
@pytest.fixture
def installed_plugin(monkeypatch):
    """An installed distribution's entry point ``l2-init`` of ``cl_suites.methods``, as
    ``importlib.metadata`` reports it (no install needed)."""
    entry = importlib.metadata.EntryPoint(
        name="l2-init", value=PLUGIN, group=plugins.ENTRY_POINT_GROUP
    )
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == plugins.ENTRY_POINT_GROUP:
            return importlib.metadata.EntryPoints([entry])
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    plugins.load_method_plugin.cache_clear()
    yield "l2-init"
    plugins.load_method_plugin.cache_clear()


def test_an_entry_point_names_an_own_method(installed_plugin, capsys):
    spec = resolve_job(
        suite="Diagnostic",
        method=installed_plugin,
        learner=None,
        preset="small",
        num_envs=None,
        overrides={"lam": 2.0},
    )
    assert spec.method == "l2-init" and spec.hp.method["lam"] == 2.0
    assert main(["run", "--suite", "Diagnostic", "--method", "l2-inti", "--print-config"]) == 2
    assert "did you mean 'l2-init'?" in one_line_error(capsys)


def test_a_plugin_cannot_join_the_jax_learner():
    with pytest.raises(
        MethodPluginError, match="needs a torch learner \\(--learner ppo\\); learner 'ppo-jax'"
    ):
        resolve_job(
            suite="MEAL-2", method=PLUGIN, learner=None, preset="small", num_envs=None, overrides={}
        )
