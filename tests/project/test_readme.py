"""Every fenced code block of README.md and of the documentation pages (``docs/``, in the
order of ``mkdocs.yml``'s nav) runs, so neither can drift from the code.

The blocks run in page order in one temporary working directory, as a reader going
through README.md and then the documentation would run them (a later block may use a
file or run directory an earlier one wrote, also on an earlier page). The rules, and the
``<!-- readme-test: RULE -->`` comments that exempt a block from running as written, are
in ``tests/helpers/readme_blocks.py``. A failing block names its page and line. Run one block
(and the blocks before it) with ``-k "docs/suites.md:62"``.

Python blocks run in one interpreter (``tests/helpers/readme_runner.py``: torch, SB3 and the
simulators are imported once), each in a fresh namespace; bash blocks in their own shell.
Both see the checkout (``PYTHONPATH`` = repository root), the ``cl-suites`` command of this
interpreter's environment and one OpenMP thread (two torch threads on two busy cores made
the SB3 example 20x slower).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import REPO
from tests.helpers.readme_blocks import (
    FULL_SCALE_PRESETS,
    Block,
    doc_pages,
    extract_blocks,
    install_problems,
    make_dry_runs,
    output_matches,
    parse_data,
    with_print_config,
)
from tests.helpers.readme_runner import RESULT_MARK

ROOT = REPO
PAGES = doc_pages(ROOT)


def all_blocks() -> list[Block]:
    """The blocks of every page in page order, ``index`` counting across pages."""
    blocks = []
    for page in PAGES:
        for block in extract_blocks((ROOT / page).read_text(), page):
            blocks.append(replace(block, index=len(blocks)))
    return blocks


BLOCKS = all_blocks()
BLOCK_TIMEOUT_S = 300
TAIL = 3000


def block_env() -> dict[str, str]:
    """The environment of every block: this checkout, this venv's ``cl-suites``, one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env["MPLBACKEND"] = "Agg"
    env.pop("CL_SUITES_DEBUG", None)
    return env


@dataclass
class Outcome:
    status: str  # passed | failed | skipped
    message: str = ""


class PythonRunner:
    """One ``readme_runner.py`` process that executes python blocks on request."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "helpers" / "readme_runner.py")],
            cwd=cwd,
            env=block_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )

    def run(self, block: Block, raises: str = "") -> Outcome:
        request = {"code": block.code, "line": block.line, "page": block.page}
        request["path"] = str(ROOT / block.page)
        request.update(raises=raises, cwd=str(self.cwd))
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        native: list[str] = []  # what C extensions wrote to the process's own stdout/stderr
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                if not sel.select(timeout=max(deadline - time.monotonic(), 0)):
                    self.close()
                    return Outcome("failed", f"no result after {BLOCK_TIMEOUT_S} s (killed)")
                line = self.proc.stdout.readline()
                if not line:
                    self.close()
                    return Outcome("failed", "the interpreter died:\n" + "".join(native)[-TAIL:])
                if line.startswith(RESULT_MARK):
                    result = json.loads(line[len(RESULT_MARK) :])
                    break
                native.append(line)
        if result["ok"]:
            return Outcome("passed")
        return Outcome("failed", f"{result['error']}\n--- output ---\n{result['output'][-TAIL:]}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ReadmeSession:
    """Runs the pages' blocks in order, each once, in one working directory."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.outcomes: dict[int, Outcome] = {}
        self.runner: PythonRunner | None = None

    def outcome(self, block: Block) -> Outcome:
        """The outcome of ``block``, running the blocks before it first."""
        for earlier in BLOCKS[: block.index + 1]:
            if earlier.index not in self.outcomes:
                try:
                    self.outcomes[earlier.index] = self._run(earlier)
                except Exception as e:  # e.g. a toml block that does not parse
                    self.outcomes[earlier.index] = Outcome("failed", f"{type(e).__name__}: {e}")
        return self.outcomes[block.index]

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()

    def _run(self, block: Block) -> Outcome:
        if block.problem:
            return Outcome("failed", block.problem)
        if block.rule == "skip":
            return Outcome("skipped", block.arg)
        if block.lang in ("toml", "yaml", "json"):
            name = parse_data(block)
            if name:
                (self.workdir / name).write_text(block.code)
            return Outcome("passed")
        if block.lang == "text":
            return Outcome("passed")
        if block.rule == "install":
            problems = install_problems(block.code, ROOT)
            return Outcome("failed", "\n".join(problems)) if problems else Outcome("passed")
        if block.rule == "make":
            return self._make(block)
        if block.lang == "bash":
            code = with_print_config(block.code) if block.rule == "print-config" else block.code
            return self._bash(block, code)
        if self.runner is None or not self.runner.alive:
            self.runner = PythonRunner(self.workdir)
        return self.runner.run(block, raises=block.arg if block.rule == "raises" else "")

    def _bash(self, block: Block, code: str) -> Outcome:
        # report the page line of the command that failed (LINENO counts this first line)
        line = f"{block.page}:$((LINENO + {block.line - 1}))"
        trap = f"trap 'echo \"{line}: $BASH_COMMAND\" >&2' ERR"
        try:
            proc = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", f"{trap}\n{code}"],
                cwd=self.workdir,
                env=block_env(),
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return Outcome("failed", f"no result after {BLOCK_TIMEOUT_S} s")
        if proc.returncode == 0:
            return Outcome("passed")
        output = (proc.stdout[-TAIL:] + "\n" + proc.stderr[-TAIL:]).strip()
        return Outcome("failed", f"exit code {proc.returncode}\n--- output ---\n{output}")

    def _make(self, block: Block) -> Outcome:
        if shutil.which("make") is None:
            return Outcome("skipped", "make is not installed")
        for command in make_dry_runs(block.code):
            proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                return Outcome("failed", f"{' '.join(command)}: {proc.stderr.strip()[-TAIL:]}")
        return Outcome("passed")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = ReadmeSession(tmp_path_factory.mktemp("readme"))
    yield s
    s.close()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block(session, block):
    outcome = session.outcome(block)
    if outcome.status == "skipped":
        pytest.skip(f"{block.where}: {outcome.message}")
    if outcome.status == "failed":
        pytest.fail(f"{block.where} ({block.lang} block): {outcome.message}", False)


def _block_writing(run_dir: str) -> Block:
    found = [b for b in BLOCKS if b.lang == "python" and f'"{run_dir}"' in b.code]
    assert found, f"no python block of {', '.join(PAGES)} writes {run_dir}"
    return found[0]


OWN_LOOP_RUNS = ("runs/my-agent", "runs/my-ppo-ewc")  # docs/own-loop.md: Recorder, SB3


def test_own_loop_examples_write_reportable_runs(session, tmp_path):
    """The own-loop examples of docs/own-loop.md (plain loop and SB3) give runs that
    `cl-suites report` accepts: the schedule in the metadata, every task's training
    episodes and evals."""
    methods = []
    for run_dir in OWN_LOOP_RUNS:
        outcome = session.outcome(_block_writing(run_dir))
        assert outcome.status == "passed", outcome.message
        run = session.workdir / run_dir
        metadata = json.loads((run / "metadata.json").read_text())
        task_ids = {seg["task_id"] for seg in metadata["schedule"]}
        assert len(task_ids) > 1 and len(metadata["tasks"]) == len(task_ids)
        episodes = pd.read_csv(run / "episodes.csv")
        assert set(episodes["task_id"]) == task_ids, run_dir
        assert (episodes["episode_length"] > 0).all()
        evals = pd.read_csv(run / "eval.csv")
        last = metadata["schedule"][-1]["end_step"]
        assert set(evals.loc[evals["total_step"] >= last, "task_id"]) == task_ids, run_dir
        methods.append(metadata["method"])

    out = tmp_path / "report"
    proc = subprocess.run(
        ["cl-suites", "report", *OWN_LOOP_RUNS, "--out", str(out)],
        cwd=session.workdir,
        env=block_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(pd.read_csv(out / "summary_cora.csv")["method"]) == sorted(methods)
    assert (out / "report.html").is_file()


# --- the rules themselves (no subprocess) ---------------------------------------------------


def test_annotations_and_unknown_blocks_are_reported():
    text = (
        "<!-- readme-test: skip needs a GPU -->\n```bash\nnvidia-smi\n```\n"
        "<!-- readme-test: skip -->\n```bash\nx\n```\n"
        "<!-- readme-test: nonsense -->\n```python\nx\n```\n"
        "```\nplain\n```\n"
        "   ```python\n   print(1)  # 1\n   ```\n"
    )
    skip, empty_reason, unknown, plain, indented = extract_blocks(text)
    assert (skip.rule, skip.arg, skip.line, skip.problem) == ("skip", "needs a GPU", 2, "")
    assert "needs a reason" in empty_reason.problem
    assert "unknown readme-test rule 'nonsense'" in unknown.problem
    assert "cannot run" in plain.problem
    assert (indented.lang, indented.code, indented.line) == ("python", "print(1)  # 1\n", 16)


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ('pip install "cl-suites[all]"', "install"),
        ("make demo", "make"),
        ("cl-suites run --suite Procgen6 --method ft --preset paper", "print-config"),
        ("cl-suites run --suite MEAL-20 --method ft --preset meal-authors", "print-config"),
        ("cl-suites sweep --suite Procgen6 --methods ft \\\n  --preset=paper", "skip"),
        ("cl-suites reproduce meal-table2 --address auto", "skip"),
    ],
)
def test_commands_that_must_not_run_need_a_rule(command, rule):
    """Full-scale presets (every preset but ``small``) must not train in the docs' tests."""
    from cl_suites.job.presets import PRESETS

    assert set(FULL_SCALE_PRESETS) == set(PRESETS) - {"small"}
    (block,) = extract_blocks(f"```bash\n{command}\n```\n")
    assert f"readme-test: {rule}" in block.problem
    (annotated,) = extract_blocks(f"<!-- readme-test: {rule} why -->\n```bash\n{command}\n```\n")
    assert annotated.problem == ""


def test_stated_outputs_are_matched_with_ellipsis():
    assert output_matches("0 climber 0", "0 climber 0")
    assert not output_matches("0 climber 0", "1 dodgeball 0")
    assert output_matches("('CORA', {'cycles': 5, ...})", "('CORA', {'cycles': 5, 'seeds': 20})")
    assert not output_matches("('CORA', {'cycles': 5, ...})", "('CORA', {'cycles': 2})")


def test_print_config_is_added_to_paper_runs_only():
    code = (
        "cl-suites run --suite Diagnostic --preset small --run-dir a\n"
        "cl-suites run --suite Procgen6 --method clear \\\n"
        "    --preset paper --run-dir b  # days\n"
        "cl-suites report a\n"
    )
    assert with_print_config(code).splitlines() == [
        "cl-suites run --suite Diagnostic --preset small --run-dir a",
        "cl-suites run --suite Procgen6 --method clear \\",
        "    --preset paper --run-dir b --print-config  # days",
        "cl-suites report a",
    ]


def test_install_blocks_must_pin_torch_and_name_real_extras():
    good = 'pip install "torch==2.13.0" "numpy<2"\npip install -e ".[procgen,baselines]"\n'
    assert install_problems(good, ROOT) == []
    bad = 'pip install torch\npip install "cl-suites[procgn]"   # extras: procgen\n'
    problems = install_problems(bad, ROOT)
    assert any("torch must be installed as 'torch==" in p for p in problems)
    assert any("unknown extra 'procgn'" in p for p in problems)
    assert any("the extras comment lists ['procgen']" in p for p in problems)


def test_every_documentation_page_is_run_in_nav_order():
    """README.md first, then each page of the site's nav; no Markdown page under docs/ is
    left out (a page outside the nav would keep untested examples)."""
    assert PAGES[0] == "README.md"
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == set(PAGES[1:]), on_disk ^ set(PAGES[1:])
    assert PAGES.index("docs/own-loop.md") < PAGES.index("docs/metrics.md")  # runs it reports


def test_blocks_are_named_by_page_and_line():
    (block,) = extract_blocks("text\n\n```python\nprint(1)  # 1\n```\n", "docs/suites.md")
    assert (block.where, block.id) == ("docs/suites.md:3", "docs/suites.md:3-python")
