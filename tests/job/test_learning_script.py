"""``benchmarks/learning/learning.py`` stays in step with the CLI: every run's command line
resolves (``--print-config``) to CORA's paper preset with the run's budget, network and
first task, and the summary reads a run directory."""

from __future__ import annotations

import json

from benchmarks.learning import learning
from cl_suites.cli import main


def test_every_run_resolves_to_the_paper_preset(tmp_path, capsys):
    networks = {}
    for run in learning.RUNS:
        cmd = learning.cli_command(run, tmp_path / run.name, resume=False, smoke=False)
        args = cmd[cmd.index("cl_suites.cli") + 1 :]
        assert main([*args, "--print-config"]) == 0
        resolved = json.loads(capsys.readouterr().out)
        hyper = resolved["hyperparameters"]
        assert (resolved["preset"], resolved["method"], resolved["learner"]) == (
            "paper",
            run.method,
            "vtrace",
        )
        suite = resolved["suite_kwargs"]
        assert (suite["steps_per_task"], suite["eval_every"]) == (run.steps, run.eval_every)
        assert {k: suite[k] for k in ("games", "pairs") if k in run.options} == {
            k: v for k, v in run.options.items() if k in ("games", "pairs")
        }
        networks[run.name] = hyper["network"]
        assert not (tmp_path / run.name).exists()  # --print-config writes nothing
    assert networks["procgen-climber-residual"] == "residual"  # the paper's line
    assert networks["procgen-climber-shallow"] == "shallow"
    assert [r.method for r in learning.RUNS].count("clear") == 1


def test_summary_of_a_run_directory(tmp_path):
    run = learning.RUNS[2]
    run_dir = tmp_path / run.name
    run_dir.mkdir()
    (run_dir / "eval.csv").write_text(
        "total_step,task_id,task_name,split,mean_return,std_return,episodes,wall_time\n"
        "0,0,a,train,-0.1,0,10,1\n0,0,a,test,-0.2,0,10,1\n"
        "40,0,a,train,0.4,0,10,2\n40,0,a,test,0.1,0,10,2\n"
    )
    (run_dir / "episodes.csv").write_text(  # the last row: cut by the end of the budget
        "total_step,episode_return\n10,1.0\n20,3.0\n40,100.0\n"
    )
    (run_dir / "progress.json").write_text(
        json.dumps({"state": "finished", "total_step": 40, "total_steps": 40})
    )
    (tmp_path / f"{run.name}.timing.json").write_text(
        json.dumps({"wall_s": 60.0, "cpu_s": 30.0, "load_samples": [1.0, 3.0], "sessions": 1})
    )
    (row,) = learning.summary_rows((run,), tmp_path)
    assert (row["train_first"], row["train_last"], row["test_best"]) == (-0.1, 0.4, 0.1)
    assert (row["wall_min"], row["load"], row["train_episodes_k"]) == (1.0, 2.0, 1)
    assert row["train_episodes_last"] == 3.0  # the cut episode is left out
    assert "-0.1 -> 0.4 (best 0.4)" in learning.markdown_table([row])
