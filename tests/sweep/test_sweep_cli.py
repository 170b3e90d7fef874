"""``cl-suites sweep`` input: grids from flags and files, and every bad input refused with
one clear line before any run starts (no Ray instance is started by these tests)."""

from __future__ import annotations

import sys

import pytest

from cl_suites.cli import main
from cl_suites.sweep import SweepError, SweepSpec, load_sweep_file, parse_seeds
from cl_suites.sweep.cli import default_sweep_dir
from cl_suites.sweep.sweep_dir import SweepDir

from .conftest import free_port

GRID = ["--suite", "Diagnostic", "--methods", "ft,ewc", "--seeds", "0-1", "--preset", "small"]


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["sweep", *args])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def test_seeds_and_names_are_predictable():
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert parse_seeds([3, "5-6"]) == [3, 5, 6]
    with pytest.raises(SweepError, match="bad seed 'x'"):
        parse_seeds("0,x")
    spec = SweepSpec(
        suites=("CLSuite/Procgen6-v0", "MEAL-2"),
        methods=("ewc", "ft", "ewc"),
        learners=(None, "ppo"),
        seeds=(1, 0),
    )
    assert spec.methods == ("ewc", "ft")  # repeats dropped, order kept
    names = [run.name for run in spec.runs()]
    assert names[:4] == [
        "Procgen6-ewc-vtrace-s1",  # the preset's default learner (CORA: V-trace) is in the name
        "Procgen6-ewc-vtrace-s0",
        "Procgen6-ewc-ppo-s1",
        "Procgen6-ewc-ppo-s0",
    ]
    # MEAL's default learner is the JAX IPPO: None and "ppo" (torch) are two runs
    assert names[-4:] == ["MEAL-2-ft-ppo-jax-s1", "MEAL-2-ft-ppo-jax-s0", "MEAL-2-ft-ppo-s1",
                          "MEAL-2-ft-ppo-s0"]  # fmt: skip
    assert len(names) == 8 + 8
    assert str(default_sweep_dir(spec)) == "runs/sweep-Procgen6+MEAL-2-paper"


def test_toml_and_yaml_files_give_the_grid_of_the_flags(tmp_path):
    (tmp_path / "s.toml").write_text(
        'suite = "Diagnostic"\nmethods = ["ft", "ewc"]\nseeds = "0-1"\npreset = "small"\n'
        "[overrides]\nsteps_per_task = 1000\nn_tasks = 2\n[ray]\ncpus_per_run = 0.5\n"
    )
    (tmp_path / "s.yaml").write_text(
        "suites: [Diagnostic]\nmethods: ft,ewc\nseeds: [0, 1]\npreset: small\n"
        "overrides: {steps_per_task: 1000, n_tasks: 2}\n"
    )
    toml_grid, toml_ray = load_sweep_file(tmp_path / "s.toml")
    yaml_grid, yaml_ray = load_sweep_file(tmp_path / "s.yaml")
    expected = SweepSpec(
        suites=("Diagnostic",),
        methods=("ft", "ewc"),
        seeds=(0, 1),
        preset="small",
        overrides={"steps_per_task": 1000, "n_tasks": 2},
    )
    assert SweepSpec.from_dict(toml_grid) == expected == SweepSpec.from_dict(yaml_grid)
    assert toml_ray == {"cpus_per_run": 0.5} and yaml_ray == {}


def test_yaml_is_read_as_data_not_code(tmp_path, capsys):
    marker = tmp_path / "executed"
    (tmp_path / "evil.yaml").write_text(
        f"methods: !!python/object/apply:os.system ['touch {marker}']\n"
    )
    code, out = _cli(capsys, "--config", str(tmp_path / "evil.yaml"))
    assert code == 2 and "is not valid YAML" in out
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--methods", "", "--suite", "Diagnostic", "--seeds", "0"], "empty grid: no methods"),
        (["--methods", "ft", "--suite", "Diagnostic", "--seeds", ","], "empty grid: no seeds"),
        (["--methods", "ft", "--seeds", "0"], "empty grid: no suites"),
    ],
)
def test_empty_grid_is_refused(args, message, capsys, tmp_path):
    code, out = _cli(capsys, *args, "--sweep-dir", str(tmp_path / "s"))
    assert code == 2 and message in out
    assert not (tmp_path / "s").exists()


def test_unknown_suite_and_method_are_refused_before_any_run(capsys, tmp_path):
    code, out = _cli(
        capsys,
        *["--suite", "Diagnostic,Procgen7", "--methods", "ft,sgd", "--seeds", "0-1"],
        *["--preset", "small", "--sweep-dir", str(tmp_path / "s")],
    )
    assert code == 2 and "bad sweep grid, nothing was started: (1) " in out
    assert "unknown method 'sgd'; valid: ft, ewc" in out
    assert (
        "unknown suite 'Procgen7' (did you mean 'Procgen6'?); available: CLSuite/Atari6-v0" in out
    )
    assert "Traceback" not in out
    assert not (tmp_path / "s").exists()


def test_meal_runs_are_checked_like_every_other_run():
    """The preflight resolves MEAL runs through the one main job's ``resolve_job``."""
    from cl_suites.sweep.driver import preflight

    good = SweepSpec(suites=("MEAL-2",), methods=("ft", "ewc"), seeds=(0,), preset="small")
    preflight(good.runs())  # nothing raised: both runs resolve
    bad = SweepSpec(suites=("MEAL-2",), methods=("pnc",), seeds=(0,), preset="small")
    with pytest.raises(SweepError, match=r"unknown method for MEAL 'pnc'; valid: ft, ewc"):
        preflight(bad.runs())


def test_unreachable_address_is_refused(capsys, tmp_path):
    port = free_port()  # nobody listens there
    code, out = _cli(capsys, *GRID, "--address", f"127.0.0.1:{port}", "--sweep-dir", str(tmp_path))
    assert code == 2
    assert (
        f"cannot reach a Ray cluster at '127.0.0.1:{port}'" in out and "Connection refused" in out
    )
    code, out = _cli(capsys, *GRID, "--address", "head-node", "--sweep-dir", str(tmp_path))
    assert code == 2 and "bad --address 'head-node'; use auto, HOST:PORT" in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpus-per-run", "1.5"], "fractional GPUs must be below 1"),
        (["--cpus-per-run", "0"], "--cpus-per-run must be > 0, got 0.0"),
        (["--max-retries", "-1"], "--max-retries must be >= 0, got -1"),
    ],
)
def test_bad_resources_are_refused(flags, message, capsys, tmp_path):
    code, out = _cli(capsys, *GRID, *flags, "--sweep-dir", str(tmp_path / "s"))
    assert code == 2 and message in out


def test_directory_of_another_sweep_is_refused(capsys, tmp_path):
    sweep_dir = tmp_path / "s"
    spec = SweepSpec(suites=("Diagnostic",), methods=("ft",), seeds=(0, 1), preset="small")
    SweepDir(sweep_dir).write_identity(spec, {})
    other = ["--suite", "Diagnostic", "--methods", "ewc", "--seeds", "0-1", "--preset", "small"]
    code, out = _cli(capsys, *other, "--sweep-dir", str(sweep_dir))
    assert code == 2
    assert "belongs to another sweep (methods: it has ['ft'], requested ['ewc'])" in out
    same = ["--suite", "Diagnostic", "--methods", "ft", "--seeds", "0-1", "--preset", "small"]
    code, out = _cli(capsys, *same, "--sweep-dir", str(sweep_dir))
    assert (
        code == 2
        and f"already holds this sweep; continue it with `cl-suites sweep --resume {sweep_dir}`"
        in out
    )
    code, out = _cli(capsys, "--resume", str(sweep_dir), "--methods", "ewc")
    assert code == 2 and "belongs to another sweep" in out
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metadata.json").write_text("{}")
    code, out = _cli(capsys, "--resume", str(tmp_path / "run"))
    assert code == 2 and "is a run directory, not a sweep directory" in out
    code, out = _cli(capsys, *same, "--sweep-dir", str(tmp_path / "run"))
    assert code == 2 and "is a run directory, not a sweep directory" in out


def test_missing_ray_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code, out = _cli(capsys, *GRID, "--sweep-dir", str(tmp_path / "s"))
    assert code == 2 and 'pip install "cl-suites[sweep]"' in out


def test_live_table_reads_progress_from_the_run_directory(tmp_path):
    import json

    from rich.console import Console

    from cl_suites.sweep.live import ProgressReader, render_table

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    schedule = [
        {"task_id": 0, "task_name": "a", "cycle": 0, "start_step": 0, "end_step": 100},
        {"task_id": 1, "task_name": "b", "cycle": 0, "start_step": 100, "end_step": 200},
        {"task_id": 0, "task_name": "a", "cycle": 1, "start_step": 200, "end_step": 300},
    ]
    (run_dir / "metadata.json").write_text(json.dumps({"schedule": schedule}))
    episodes = run_dir / "episodes.csv"
    episodes.write_text("total_step,task_id,episode_return,episode_length\n40,0,1.0,10\n")
    reader = ProgressReader()
    first = reader.read(run_dir)
    assert (first.total_step, first.total_steps, first.task_name, first.cycle) == (40, 300, "a", 0)
    assert first.steps_per_s is None  # one look gives no rate
    episodes.write_text(episodes.read_text() + "150,1,1.0,10\n210,0,1.0,1")  # torn last row
    second = reader.read(run_dir)
    assert (second.total_step, second.task_name, second.cycle) == (150, "b", 0)
    assert second.steps_per_s > 0 and second.eta_s == pytest.approx(150 / second.steps_per_s)
    # the main job's progress.json wins when it exists
    (run_dir / "progress.json").write_text(
        json.dumps(
            {"state": "running", "total_step": 250, "total_steps": 300, "task_name": "a",
             "cycle": 1, "steps_per_s": 10.0, "updated": "2099-01-01T00:00:00+00:00"}
        )
    )  # fmt: skip
    third = reader.read(run_dir)
    assert (third.total_step, third.cycle, third.steps_per_s, third.eta_s) == (250, 1, 10.0, 5.0)
    console = Console(width=200, record=True)
    console.print(
        render_table("t", [{"name": "r", "state": "running", "attempt": 2, "progress": third}])
    )
    text = console.export_text()
    assert "250/300 (83%)" in text and "0:05" in text and "running" in text
