"""Bad runs and hostile names: ``cl-suites report`` ends with one line, never a traceback,
writes nothing outside ``--out``, and its CSVs cannot run spreadsheet formulas."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cl_suites.cli import main
from cl_suites.metrics import MetricsInputError, build_report
from cl_suites.metrics.runs import MAX_ABS_RETURN
from cl_suites.metrics.safe_names import neutralize_cell, path_inside, safe_name

from .conftest import HAND, write_run


def _report_cli(capsys, *args) -> tuple[int, str]:
    code = main(["report", *map(str, args)])
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert "Traceback" not in text
    return code, text


def _one_line_error(code: int, text: str) -> str:
    assert code == 2
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), text
    return lines[0]


def test_metadata_that_is_not_an_object(tmp_path, capsys):
    run = write_run(tmp_path / "run", returns=HAND)
    (run / "metadata.json").write_text("[1, 2, 3]")
    line = _one_line_error(*_report_cli(capsys, run, "--out", tmp_path / "out"))
    assert "metadata.json must hold a JSON object, not a list" in line
    (run / "metadata.json").write_text(json.dumps({"seed": "zero", "schedule": []}))
    line = _one_line_error(*_report_cli(capsys, run, "--out", tmp_path / "out"))
    assert "'seed' must be int, got 'zero'" in line


def _final_performance(out) -> dict[str, str]:
    table = pd.read_csv(out / "Toy3" / "final_performance.csv", index_col=0, keep_default_na=False)
    return table.iloc[:, 0].to_dict()


@pytest.mark.parametrize(("bad", "value"), [(1, float("nan")), (2, 1e308), (0, float("inf"))])
def test_a_task_without_usable_returns_is_marked_and_the_rest_reported(
    tmp_path, capsys, bad, value
):
    """Issue 24 item 5: one task whose returns are all NaN / inf / 1e308 no longer stops the
    report; that task is n/a (with the reason in the notes), the others keep their values."""
    runs = [
        write_run(
            tmp_path / f"run{seed}",
            seed=seed,
            returns=lambda t, s, k, seed=seed: value if t == bad else float(t + k + seed),
        )
        for seed in (0, 1)
    ]
    code, text = _report_cli(capsys, *runs, "--out", tmp_path / "out")
    assert code == 0, text
    final = _final_performance(tmp_path / "out")
    assert final[f"{bad}-task{bad}"] == "n/a"
    others = [t for t in range(3) if t != bad]
    for t in others:  # last eval point (step 300): t + 300 + seed, mean over seeds 0 and 1
        assert final[f"{t}-task{t}"] == f"{t + 300.5:.2f} ± 0.50"
    notes = (tmp_path / "out" / "notes.md").read_text()
    assert f"task {bad} has no usable mean_return in eval.csv (only {value:g};" in notes
    assert f"F/Z entries are n/a because task(s) [{bad}] have no usable" in notes
    cora_f = pd.read_csv(tmp_path / "out" / "Toy3" / "ft_F.csv", index_col=0, keep_default_na=False)
    bad_rows = [r for r in cora_f.index if r.startswith(f"{bad}-")]
    assert all((cora_f.loc[r].isin(["n/a", "-"])).all() for r in bad_rows)
    summary = pd.read_csv(tmp_path / "out" / "summary.csv", index_col=[0, 1], keep_default_na=False)
    assert summary.loc[("Toy3", "ft"), "CORA F"] != "n/a"  # the other tasks' average


def test_returns_that_are_all_unusable_or_an_episode_of_1e308(tmp_path, capsys):
    run = write_run(tmp_path / "run", returns=lambda t, s, k: 1e308)
    line = _one_line_error(*_report_cli(capsys, run, "--out", tmp_path / "out"))
    assert "no usable mean_return at all" in line and f"±{MAX_ABS_RETURN:g}" in line
    big_episode = write_run(
        tmp_path / "ep", returns=HAND, episode_return=lambda t, seg, n: -1e308 if n == 3 else 1.0
    )
    line = _one_line_error(*_report_cli(capsys, big_episode, "--out", tmp_path / "out"))
    assert "episode_return -1e+308" in line


def test_unwritable_out_and_unreadable_run_dir(tmp_path, capsys):
    run = write_run(tmp_path / "run", returns=HAND)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    line = _one_line_error(*_report_cli(capsys, run, "--out", blocker / "report"))
    assert f"cannot write the report to {blocker / 'report'}: Not a directory" in line
    broken = write_run(tmp_path / "broken", returns=HAND)
    (broken / "eval.csv").unlink()
    (broken / "eval.csv").mkdir()  # unreadable as a file
    line = _one_line_error(*_report_cli(capsys, broken, "--out", tmp_path / "out"))
    assert str(broken) in line
    line = _one_line_error(*_report_cli(capsys, tmp_path / "nope", "--out", tmp_path / "out"))
    assert "is not a run directory" in line


def test_names_cannot_escape_the_report_directory(tmp_path):
    runs = [
        write_run(tmp_path / "a", returns=HAND, method="../../escape/pwned"),
        write_run(tmp_path / "b", returns=HAND, method="..", suite="../../suite"),
    ]
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    out = tmp_path / "deep" / "out"
    res = build_report(runs, out, bootstrap_reps=20)
    new = {p for p in tmp_path.rglob("*") if p.is_file()} - before
    assert new and all(out.resolve() in p.resolve().parents for p in new)
    assert {p.resolve() for p in res.files} <= {p.resolve() for p in new}
    # the names survive in the tables (escaped in the HTML)
    assert "../../escape/pwned" in res.summary.index.get_level_values("method")
    assert "../../escape/pwned" in res.html.read_text()


def test_safe_name_rules():
    assert safe_name("online-ewc") == "online-ewc"
    assert safe_name("ewc.v2") == "ewc.v2"
    bad = safe_name("../../escape/pwned")
    assert "/" not in bad and not bad.startswith(".") and bad.startswith("___.._escape_pwned-")
    assert safe_name("a/b") != safe_name("a_b")  # a changed name carries a hash
    assert safe_name("..").startswith("__-")
    assert len(safe_name("x" * 500)) <= 80 + 9
    with pytest.raises(MetricsInputError, match="empty"):
        safe_name("  ")
    with pytest.raises(MetricsInputError, match="outside"):
        path_inside("/tmp/report", "..", "etc")


def test_csv_cells_cannot_run_formulas(tmp_path):
    assert neutralize_cell('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    assert neutralize_cell("+cmd") == "'+cmd"
    assert neutralize_cell("@SUM(A1:A9)") == "'@SUM(A1:A9)"
    assert neutralize_cell("-2+3+cmd|' /C calc'!A0") == "'-2+3+cmd|' /C calc'!A0"
    assert neutralize_cell("\t=1") == "'\t=1"
    for number_display in ("-0.3 ± 0.1", "-12", "-0.120 [-0.300, 0.050]", "+1.5e-3"):
        assert neutralize_cell(number_display) == number_display
    assert neutralize_cell(-3.5) == -3.5 and neutralize_cell("ft") == "ft"
    run = write_run(tmp_path / "run", returns=lambda t, s, k: -1.0 - t - k / 100, method="=1+1")
    res = build_report([run], tmp_path / "out", bootstrap_reps=20)
    summary = pd.read_csv(res.out_dir / "summary.csv", keep_default_na=False)
    assert summary["method"].tolist() == ["'=1+1"]
    cells = summary.drop(columns=["suite", "method"]).astype(str).to_numpy().ravel()
    assert any(c.startswith("-") for c in cells)  # negative numbers stay numbers
    assert not any(c.startswith(("=", "+", "@")) for c in cells)
    for csv in res.out_dir.rglob("*.csv"):
        frame = pd.read_csv(csv, dtype=str, keep_default_na=False, header=None)
        for cell in frame.to_numpy().ravel():
            assert not cell.startswith(("=", "+", "@")), (csv, cell)
            assert neutralize_cell(cell) == cell or cell.startswith("'"), (csv, cell)


HOSTILE = {
    "tex": r"\write18{touch pwned}\input{/etc/passwd}",
    "html": "<img src=x onerror=alert(1)>",
    "formula": '=HYPERLINK("http://x","y")',
    "mathtext": "$x^$",  # matplotlib's mathtext would stop the figures with a parse error
}


def test_hostile_names_come_out_inert_in_tex_md_html_and_csv(tmp_path):
    """Issue 24 item 2: method and task names reach every output escaped for its format."""
    names = list(HOSTILE.values())
    runs = [
        write_run(tmp_path / f"run{k}", method=name, returns=HAND, task_names=names[:3])
        for k, name in enumerate(names)
    ]
    out = build_report(runs, tmp_path / "out", bootstrap_reps=20, progress=False).out_dir
    by_ext = {ext: list(out.rglob(f"*.{ext}")) for ext in ("tex", "md", "html", "csv")}
    assert all(by_ext.values()), by_ext
    for path in by_ext["tex"]:
        text = path.read_text()
        assert r"\write18" not in text and r"\input" not in text and "<img" not in text, path
        assert r"\{" in text or "HYPERLINK" not in text  # braces escaped, so no group opens
    tex = (out / "summary.tex").read_text()
    assert r"\textbackslash{}write18\{touch pwned\}\textbackslash{}input\{/etc/passwd\}" in tex
    assert r"\textless{}img src=x onerror=alert(1)\textgreater{}" in tex
    for path in by_ext["md"]:
        text = path.read_text()
        assert "<img" not in text and "onerror=alert(1)>" not in text, path
    md = (out / "summary.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in md
    assert r"\\write18{touch pwned}" in md  # a literal backslash, not markup
    page = by_ext["html"][0].read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    for path in by_ext["csv"]:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, header=None)
        cells = frame.to_numpy().ravel()
        assert not any(c.startswith(("=", "+", "@")) for c in cells), path
    summary = pd.read_csv(out / "summary.csv", dtype=str, keep_default_na=False)
    assert "'" + HOSTILE["formula"] in summary["method"].tolist()
    assert r"\$x\textasciicircum{}\$" in tex and "| $x^$ |" not in md
