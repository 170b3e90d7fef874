"""The HTML report's Jinja2 template: shipped as package data, found through
importlib.resources, and autoescaping every name that reaches the page."""

from __future__ import annotations

import fnmatch
import re
import urllib.parse
from importlib import resources
from pathlib import Path

import tomllib

from cl_suites.metrics import build_report
from cl_suites.metrics.report_html import TEMPLATE

from .conftest import HAND, write_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "<script>alert(1)</script>"


def test_template_is_package_data_found_by_importlib_resources():
    template = resources.files("cl_suites.metrics").joinpath(TEMPLATE)
    assert template.is_file() and "<!DOCTYPE html>" in template.read_text(encoding="utf-8")
    # a wheel holds it: the package-data globs of cl_suites match its path in the package
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["cl_suites"]
    assert any(fnmatch.fnmatch(f"metrics/{TEMPLATE}", g) for g in globs), globs


def test_script_in_every_name_is_text_on_the_page(tmp_path):
    """Suite, method and task names, notes (from the names) and video file names with
    ``<script>`` and quotes come out as text, also inside single-quoted attributes."""
    runs = [
        write_run(
            tmp_path / f"run{seed}",
            seed=seed,
            suite=f"S{SCRIPT}",
            method=f"m{SCRIPT}'\"",
            returns=HAND,
            task_names=[f"t{k}{SCRIPT}" for k in range(3)],
        )
        for seed in (0, 1)
    ]
    videos = runs[0] / "videos"
    videos.mkdir()
    for name in (
        "x'><img src=y onerror=alert(2)><script>.mp4",
        "eval-step000000300-task01-train.mp4",
    ):
        (videos / name).write_bytes(b"\x00\x00\x00\x18ftypmp42")
    page = build_report(runs, tmp_path / "out", bootstrap_reps=20).html.read_text()
    assert "<script" not in page and "<img src=y" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 6
    assert "<h2>S&lt;script&gt;alert(1)&lt;/script&gt;</h2>" in page
    assert "<h3>m&lt;script&gt;alert(1)&lt;/script&gt;&#39;&#34; (2 seeds)</h3>" in page
    assert "1-t1&lt;script&gt;alert(1)&lt;/script&gt; (train), step 300" in page
    links = re.findall(r"<li><a href='([^']+)'>([^<]*)</a></li>", page)
    assert [Path(urllib.parse.unquote(src)).name for src, _ in links] == [
        "x'><img src=y onerror=alert(2)><script>.mp4"
    ]
    assert links[0][1].startswith("x&#39;&gt;&lt;img src=y")
    assert "{{" not in page and "{%" not in page
