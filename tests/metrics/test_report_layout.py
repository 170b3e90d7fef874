"""The report's summary layout (split tables, wrapping cells), the CLI's rich tables and the
evaluation videos of interface 5. The 1400 px no-overflow check in a real browser is
``benchmarks/report/report_screenshot.py`` (headless Chromium)."""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

import pytest

from cl_suites.cli import main
from cl_suites.metrics import build_report
from cl_suites.metrics.report import SUMMARY_TITLES

from .conftest import HAND, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout")
    dirs = [
        write_run(root / f"{m}-{s}", method=m, seed=s, returns=HAND)
        for m in ("ft", "clear")
        for s in (0, 1)
    ]
    videos = dirs[0] / "videos"
    videos.mkdir()
    for name in (
        "eval-step000000100-task00-train.mp4",
        "eval-step000000300-task00-train.mp4",
        "eval-step000000300-task01-train.mp4",
        "odd name.mp4",
    ):
        (videos / name).write_bytes(b"\x00\x00\x00\x18ftypmp42")
    return root, dirs


@pytest.fixture(scope="module")
def report(runs):
    root, dirs = runs
    return build_report(dirs, root / "out", bootstrap_reps=20)


def test_summary_is_split_into_cora_meal_l2m_tables(report):
    res = report
    assert list(res.tables) == ["CORA", "MEAL", "L2M"]  # no paper reports Toy3
    assert list(res.tables["CORA"].columns) == ["seeds", "F (x10)", "Z (x10)"]
    assert list(res.tables["MEAL"].columns)[:4] == ["seeds", "A", "A IQM [95% CI]", "F"]
    assert list(res.tables["L2M"].columns)[:3] == ["seeds", "PM", "FT contrast"]
    for stem in ("summary_cora", "summary_meal", "summary_l2m"):
        assert (res.out_dir / f"{stem}.csv").is_file()
    page = res.html.read_text()
    for key in ("CORA", "MEAL", "L2M"):
        assert SUMMARY_TITLES[key].replace("&", "&amp;") in page
    summary = page[page.index("<h2>Summary</h2>") : page.index("<h2>Notes</h2>")]
    assert summary.count('class="dataframe tbl wrap"') == 3
    # cells may break before "±" (and only there): the tables shrink instead of overflowing
    assert " ±&nbsp;" in summary and " ± " not in re.sub(r"<[^>]+>", "", summary).replace(
        "mean ± SEM", ""
    )


def test_cli_prints_the_summary_as_rich_tables(runs, capsys, monkeypatch):
    """Rich tables on a terminal wide enough; piped (or too narrow), one plain block per
    row that no width cuts (issue 41 item 4)."""
    import io

    from rich.console import Console

    from cl_suites.cli import output

    root, dirs = runs
    wide = io.StringIO()
    monkeypatch.setattr(
        output, "console", Console(file=wide, force_terminal=True, width=400, color_system=None)
    )
    assert main(["report", *map(str, dirs), "--out", str(root / "cli")]) == 0
    out = wide.getvalue()
    for key in ("CORA", "MEAL", "L2M"):
        assert SUMMARY_TITLES[key][:20] in out
    assert "┃ suite" in out and "|---|" not in out and "…" not in out
    assert "report written to" in out
    monkeypatch.undo()
    assert main(["report", *map(str, dirs), "--out", str(root / "cli-piped")]) == 0
    piped = capsys.readouterr().out
    for key in ("CORA", "MEAL", "L2M"):
        assert SUMMARY_TITLES[key][:20] in piped
    assert "┃" not in piped and "…" not in piped
    assert max(len(line) for line in piped.splitlines()) < 200


def test_report_embeds_latest_videos_and_links_the_others(runs, report):
    _root, dirs = runs
    res = report
    page = res.html.read_text()
    embedded = re.findall(r"<video controls preload='(?:none|metadata)'[^>]* src='([^']+)'>", page)
    linked = re.findall(r"<li><a href='([^']+)'>", page)
    names = lambda srcs: sorted(Path(urllib.parse.unquote(s)).name for s in srcs)  # noqa: E731
    assert names(embedded) == [
        "eval-step000000300-task00-train.mp4",
        "eval-step000000300-task01-train.mp4",
    ]
    assert names(linked) == ["eval-step000000100-task00-train.mp4", "odd name.mp4"]
    for src in embedded + linked:  # relative to the report, resolving to the run's file
        target = (res.out_dir / urllib.parse.unquote(src)).resolve()
        assert target.is_file() and target.parent == (dirs[0] / "videos").resolve()
        assert not os.path.isabs(urllib.parse.unquote(src))
    assert "0-task0 (train), step 300" in page
    assert page.count("<video") == 2  # only the run that has videos
