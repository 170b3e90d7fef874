"""Policy options (``network``, ``net_arch``, ...) pass the CLI's option check: the main job
accepts them (``hyperparameters.route_overrides``) and the fidelity ledger offers them, e.g.
Procgen6's ``network="shallow"`` (CORA's Figure 11 line)."""

from __future__ import annotations

import json

from cl_suites.cli import main


def test_set_network_reaches_the_resolved_config(tmp_path, capsys):
    argv = ["run", "--suite", "Procgen6", "--set", "network=shallow", "--set", "net_arch=[32]",
            "--run-dir", str(tmp_path / "never"), "--print-config"]  # fmt: skip
    assert main(argv) == 0
    hyper = json.loads(capsys.readouterr().out)["hyperparameters"]
    assert hyper["network"] == "shallow" and hyper["net_arch"] == [32]
    assert hyper["learner"]["learning_rate"] == 4e-4  # still the paper preset's V-trace


def test_an_unknown_option_lists_the_policy_options(capsys):
    assert main(["run", "--suite", "Procgen6", "--set", "netwrk=shallow", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'network'?" in err and "policy: " in err
