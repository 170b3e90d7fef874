"""The report of this checkout next to the report of an earlier commit, on the same runs.

Builds one set of run directories (``report_screenshot.py``'s Procgen6 + MEAL-20 runs with
experts and videos, plus hostile-name runs written as the metrics tests write theirs,
``synthetic_runs.py``: ``<img onerror>``, ``$x^$``, LaTeX and spreadsheet-formula method
and task names), extracts ``--base`` with ``git archive``, and builds the report ``--reps``
times with each source tree (fresh interpreters, alternating). Then checks that both
reports hold the same files, every file byte for byte except ``report.html``, which must
match after whitespace is normalised and the two spellings of an escaped quote
(``&quot;``/``&#34;``, ``&#x27;``/``&#39;``) are made one. Prints both build times and
their ratio (this checkout / base).

Run from the repository root:
``python -m benchmarks.report.report_before_after --base ce64ab3 [--reps 3] [--out DIR]
[--runs RUN_DIR ...]`` (``--runs``: real run directories, reported together as a third
report).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = (
    r"\write18{touch pwned}\input{/etc/passwd}",
    "<img src=x onerror=alert(1)>",
    '=HYPERLINK("http://x","y")',
    "$x^$",
)
BUILD = """
import json, sys, time
from cl_suites.metrics import build_report
dirs, out = json.loads(sys.argv[1]), sys.argv[2]
t0, c0 = time.perf_counter(), time.process_time()
for group in dirs:
    build_report(group["dirs"], out + "/" + group["name"], bootstrap_reps=200)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def make_runs(root: Path) -> list[dict]:
    """Two groups of run directories: the realistic set and the hostile-name set."""
    from benchmarks.report.report_screenshot import build_runs
    from benchmarks.report.synthetic_runs import HAND, write_run

    realistic = [str(p) for p in build_runs(root / "realistic")]
    hostile = [
        str(write_run(root / "hostile" / f"run{k}", method=n, returns=HAND, task_names=HOSTILE[:3]))
        for k, n in enumerate(HOSTILE)
    ]
    return [{"name": "realistic", "dirs": realistic}, {"name": "hostile", "dirs": hostile}]


def build(tree: Path, groups: list[dict], out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of building both groups' reports with the source ``tree``."""
    done = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(groups), str(out)],
        cwd=tree,  # ``python -c`` puts the working directory first on sys.path
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu = done.stdout.split()[-2:]
    return float(wall), float(cpu)


def normalised_html(text: str) -> str:
    text = text.replace("&#34;", "&quot;").replace("&#39;", "&#x27;")
    return re.sub(r"\s*([<>])\s*", r"\1", re.sub(r"\s+", " ", text)).strip()


def compare(base: Path, new: Path) -> list[str]:
    """Differences between two report trees (empty: the same report)."""
    files = lambda d: {p.relative_to(d) for p in d.rglob("*") if p.is_file()}  # noqa: E731
    problems = [f"only in base: {p}" for p in sorted(files(base) - files(new))]
    problems += [f"only in new: {p}" for p in sorted(files(new) - files(base))]
    for rel in sorted(files(base) & files(new)):
        a, b = (base / rel).read_bytes(), (new / rel).read_bytes()
        if rel.suffix == ".html":
            a, b = (normalised_html(x.decode()) for x in (a, b))
            if a != b:
                at = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
                problems.append(
                    f"{rel} differs at {at}: {a[at - 80 : at + 80]!r} vs {b[at - 80 : at + 80]!r}"
                )
        elif a != b:
            problems.append(f"{rel} differs")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="commit to compare with")
    ap.add_argument("--reps", type=int, default=3, help="builds per side (alternating)")
    ap.add_argument("--out", default=None, help="keep runs and reports here")
    ap.add_argument("--runs", nargs="*", default=[], help="more run directories (one report)")
    args = ap.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="report-before-after-"))
    base_tree = root / "base-src"
    base_tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", args.base], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive.stdout, check=True)
    groups = make_runs(root / "runs")
    if args.runs:
        groups.append({"name": "given", "dirs": [str(Path(d).resolve()) for d in args.runs]})
    times: dict[str, list[tuple[float, float]]] = {"base": [], "new": []}
    for rep in range(args.reps):
        for side, tree in (("base", base_tree), ("new", ROOT)):
            times[side].append(build(tree, groups, str(root / f"report-{side}-{rep}")))
    problems = [
        p
        for g in groups
        for p in compare(root / "report-base-0" / g["name"], root / "report-new-0" / g["name"])
    ]
    print(f"reports in {root}")
    best = {}
    for side, t in times.items():
        best[side] = [min(x[k] for x in t) for k in (0, 1)]
        shown = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in t)
        print(
            f"{side}: wall/CPU s per build {shown} (best {best[side][0]:.2f}/{best[side][1]:.2f})"
        )
    for k, what in enumerate(("wall", "CPU")):
        ratio = best["new"][k] / best["base"][k]
        print(f"ratio new / base, {what} time (best of {args.reps}): {ratio:.3f}x")
    print("same report:", "yes" if not problems else "NO")
    for p in problems:
        print("  " + html.unescape(p))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
