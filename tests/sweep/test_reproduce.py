"""``cl-suites reproduce``: the published tables' grids counted against the papers (dry runs
only: nothing trains and no Ray instance starts), the listing, bad input in one line, the
shipped training rates against the benchmarks' measurements."""

from __future__ import annotations

import json
import re
import types

import pytest

from cl_suites.cli import main
from cl_suites.metrics.published import protocol, published
from cl_suites.suites import SuiteInfo, find_suite
from cl_suites.sweep import costs
from cl_suites.sweep import reproduce as rep
from tests.helpers import REPO

MEAL_UPDATE = 16 * 128  # env steps of one PPO update of the paper preset
MEAL_TASK = 10_000_000 // MEAL_UPDATE * MEAL_UPDATE  # MEAL trains whole updates: 9,998,336
AUTHORS_UPDATE = 2048 * 400
AUTHORS_TASK = 100_000_000 // AUTHORS_UPDATE * AUTHORS_UPDATE  # 99,942,400

# table -> (runs, total steps), written out from the papers' grids
EXPECTED = {
    # CORA: 5 methods x s=5 seeds; 6 games x 2 cycles x 50M agent steps
    "cora-atari6": (5 * 5, 25 * 6 * 2 * 50_000_000),
    # 5 methods x s=20; 6 games x 5 cycles x 5M
    "cora-procgen6": (5 * 20, 100 * 6 * 5 * 5_000_000),
    # IMPALA and CLEAR x s=10; 15 tasks x 2 cycles x 10M
    "cora-minihack15": (2 * 10, 20 * 15 * 2 * 10_000_000),
    # 4 sequences x EWC/P&C/CLEAR x s=3; 3 tasks x 1M x (2, 2, 1, 1 cycles)
    "cora-chores": (4 * 3 * 3, 9 * 3 * 1_000_000 * (2 + 2 + 1 + 1)),
    # MEAL Table 2: 5 methods x 5 seeds; 20 tasks x 1e7 env steps
    "meal-table2": (5 * 5, 25 * 20 * MEAL_TASK),
    "meal-table2-authors": (5 * 5, 25 * 20 * AUTHORS_TASK),
    # MEAL Table 3: FT x 5 seeds, 10 tasks repeated 3 and 10 times
    "meal-table3": (2 * 5, 5 * 10 * MEAL_TASK * (3 + 10)),
}


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["reproduce", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _needs(table: str) -> None:
    missing = [s for s in rep.TABLES[table].suites if not find_suite(s).installed]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


def test_every_published_table_has_a_grid():
    assert set(rep.TABLES) == set(EXPECTED)


@pytest.mark.parametrize("table", list(EXPECTED))
def test_dry_run_counts_the_papers_grid(capsys, table):
    _needs(table)
    code, out, err = _cli(capsys, table, "--dry-run", "--cores", "16")
    assert code == 0, err
    runs, steps = EXPECTED[table]
    unit = "env steps" if table.startswith("meal") else "agent steps"
    assert f"total: {runs} runs, {steps:,} {unit}" in out
    assert len(re.findall(r"-s\d+ ", out)) == runs  # one line per run
    assert "estimated time on this machine" in out and "estimated time on 16 cores + GPU" in out
    assert "our protocol: preset" in out and "published protocol" in out
    if table == "cora-chores":  # no measured rate: said, not guessed
        assert "unknown (no measured rate)" in out
    else:
        assert re.search(r"16 cores \+ GPU: [\d,.]+ h", out)


def test_the_grids_are_the_published_rows_and_protocols():
    """Every (suite, method) of a grid has published values in the table's sources and every
    published (suite, method) of those sources is in a grid; seeds and cycles are the
    paper's."""
    for table in rep.TABLES.values():
        sources = {f"{table.paper} {s}" for s in table.sources}
        for part in table.parts:
            spec = part.spec
            _paper, proto = protocol(spec.suites[0])
            assert len(spec.seeds) == proto["seeds"], table.name
            if "cycles" in proto:
                assert spec.overrides.get("cycles", 1) == proto["cycles"], table.name
            for method in spec.methods:
                values = published(spec.suites[0], method, repeats=part.repeats)
                assert {f"{v.paper} {v.table}" for v in values} & sources, (table.name, method)
        data = json.loads(
            (REPO / "cl_suites/data/published" / f"{table.paper.lower()}.json").read_text()
        )
        rows = [r for key in ("summary", "final_return", "plasticity") for r in data.get(key, [])]
        wanted = {
            (r["suite"], r["method"], r.get("repeats"))
            for r in rows
            if f"{table.paper} {r['table']}" in sources and r["suite"] in table.suites
        }
        have = {
            (s, m, part.repeats if r is not None else None)
            for part in table.parts
            for s in part.spec.suites
            for m in part.spec.methods
            for r in {part.repeats, None}
        }
        assert wanted <= have, (table.name, wanted - have)
    # Atari's grid is 2 cycles where the code's default is 5
    assert rep.TABLES["cora-atari6"].parts[0].spec.overrides["cycles"] == 2
    assert rep.TABLES["meal-table2-authors"].parts[0].spec.preset == "meal-authors"


def test_list_names_every_table_on_one_line(capsys):
    code, out, _ = _cli(capsys, "--list")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert [line.split()[0] for line in lines] == list(rep.TABLES)
    assert all(len(line.split()) > 3 for line in lines)  # a description each


def test_unknown_table_is_one_line_with_the_closest_and_valid_names(capsys):
    code, out, err = _cli(capsys, "cora-atari", "--dry-run")
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "did you mean 'cora-atari6'" in err and "meal-table3" in err
    code, _, err = _cli(capsys)  # no table at all
    assert code == 2 and "--list" in err


def test_a_table_whose_extra_is_missing_names_the_extra(capsys, monkeypatch):
    monkeypatch.setattr(SuiteInfo, "installed", property(lambda self: self.extra != "chores"))
    for args in (("cora-chores", "--dry-run"), ("cora-chores",)):
        code, out, err = _cli(capsys, *args)
        assert code == 2 and not out
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert 'pip install "cl-suites[chores]"' in err


def test_overrides_that_change_the_protocol_name_the_rows_they_lose(capsys):
    _needs("cora-atari6")
    code, out, err = _cli(capsys, "cora-atari6", "--dry-run", "--set", "lam=100")
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "Atari6 ewc (lam 10000.0): CORA Table 1(a) (F), CORA Table 1(b) (Z), CORA Table 5" in err
    assert "Atari6 pnc (lam 3000.0)" in err
    assert "Atari6 ft" not in err  # ft takes no lam: its rows still hold
    code, _, err = _cli(capsys, "cora-atari6", "--dry-run", "--set", "cycles=5")
    assert code == 2 and "cycles" in err and "Atari6 clear" in err
    # options that leave the protocol (or repeat its value) are taken
    for setting in ("device=cpu", "checkpoint_every=1000000", "cycles=2", "torch_threads=2"):
        code, out, err = _cli(capsys, "cora-atari6", "--dry-run", "--set", setting)
        assert code == 0, (setting, err)
        assert "total: 25 runs" in out
    code, _, err = _cli(capsys, "cora-atari6", "--dry-run", "--set", "multi_head=true")
    assert code == 2 and "multi_head" in err
    code, _, err = _cli(capsys, "cora-atari6", "--dry-run", "--set", "lam=10000")
    assert code == 2 and "Atari6 online-ewc (lam 175.0)" in err and "Atari6 ewc (" not in err


def test_a_run_is_the_sweep_of_each_part(capsys, monkeypatch, tmp_path):
    """Without --dry-run every part runs through the sweep's driver (stubbed here), in its
    own directory under the table's, with the Ray options passed on."""
    _needs("cora-chores")
    calls = []

    def fake_run_sweep(spec, sweep_dir, **kwargs):
        calls.append((spec, sweep_dir, kwargs))
        return types.SimpleNamespace(outcomes=[])

    monkeypatch.setattr("cl_suites.sweep.driver.run_sweep", fake_run_sweep)
    args = ("cora-chores", "--sweep-dir", str(tmp_path), "--address", "auto", "--set", "device=cpu")
    code, _, err = _cli(capsys, *args)
    assert code == 0, err
    assert [c[1] for c in calls] == [tmp_path / p.name for p in rep.TABLES["cora-chores"].parts]
    assert all(c[2]["address"] == "auto" and c[2]["resume"] is False for c in calls)
    assert [c[0].overrides["cycles"] for c in calls] == [2, 2, 1, 1]
    assert all(c[0].overrides["device"] == "cpu" for c in calls)


def test_the_shipped_rates_are_the_benchmarks_measurements():
    measured = json.loads((REPO / "benchmarks/results/costs.json").read_text())
    model = costs.cost_data()["model"]
    for suite, key in (("Atari6", "atari"), ("MiniHack15", "minihack")):
        assert model[suite]["cpu"] == measured[key]
        assert model[suite]["gpu"] == measured["gpu"][key]
    residual = json.loads((REPO / "benchmarks/results/gpu_h200_residual.json").read_text())
    shipped = costs.cost_data()["measured"]
    assert shipped["Procgen6"]["gpu"]["16"] == residual["procgen"]["1-16"]
    log = (REPO / "benchmarks/results/LOG.md").read_text()
    assert "ours 57 steps/s" in log and "ours with 2 threads 113" in log
    assert shipped["Procgen6"]["cpu"] == {"1": 57, "2": 113}
    assert "ppo-jax 1 seed 10,041/s" in log and "`ppo-jax` one seed 46,879 env-steps/s" in log
    assert shipped["MEAL"]["cpu"] == {"2": 10041} and shipped["MEAL"]["gpu"] == {"16": 46879}
    # the package's model is the benchmark's (16 cores + GPU: the LOG's 4,596 for Atari6)
    assert round(costs.rate("Atari6", 16, True).steps_per_s) == 4596
    assert round(costs.rate("Atari6", 2, False).steps_per_s) == 1023
    assert costs.rate("CHORES-VaryRoom", 16, True) is None


def test_the_report_puts_our_rows_beside_the_published_ones(capsys, monkeypatch, tmp_path):
    """After the sweeps, the finished runs' report (stubbed here) is printed for the table's
    published rows only, with our protocol's differences and the published protocol."""
    _needs("meal-table2")
    import pandas as pd

    from cl_suites.metrics.published import COMPARISON_COLUMNS

    def row(suite, source, ours):
        cells = dict.fromkeys(COMPARISON_COLUMNS, "-")
        cells.update(suite=suite, method="ft", metric="A", source=source, paper="0.048 ± 0.00")
        cells.update(ours=ours, agreement="differs")
        cells["protocol differences"] = "steps/task 1,000 vs paper 10,000,000"
        return cells

    frame = pd.DataFrame(
        [row("MEAL-20", "MEAL Table 2", "0.510 ± 0.020"), row("MEAL-10", "MEAL Table 3", "x")]
    ).set_index(["suite", "method", "metric"])
    run_dir = tmp_path / "MEAL-20-ft-ppo-jax-s1"
    finished = types.SimpleNamespace(state="finished", name=run_dir.name, run_dir=run_dir)
    monkeypatch.setattr(
        "cl_suites.sweep.driver.run_sweep",
        lambda spec, sweep_dir, **kw: types.SimpleNamespace(outcomes=[finished]),
    )
    built = []

    def fake_report(run_dirs, out, **kw):
        built.append((list(run_dirs), out))
        return types.SimpleNamespace(tables={"Published": frame})

    monkeypatch.setattr("cl_suites.metrics.report.build_report", fake_report)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = _cli(capsys, "meal-table2", "--sweep-dir", str(tmp_path))
    assert code == 0, err
    assert built == [([run_dir], tmp_path / "report")]
    text = " ".join(out.split())
    assert "0.510 ± 0.020" in text and "0.048 ± 0.00" in text
    assert "MEAL Table 3" not in text  # another table's row
    assert "protocol differences MEAL-20/ft: steps/task 1,000 vs paper 10,000,000" in text
    assert "our protocol: preset paper" in text
    assert "published protocol, MEAL Table 2: The paper states" in text
