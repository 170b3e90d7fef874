"""The documentation site builds: ``mkdocs build --strict`` (what ``make docs`` runs) over
``mkdocs.yml`` and ``docs/``, and the API pages carry the docstrings.

``--strict`` turns every warning into a failure: a link to a missing page or anchor, a
page under ``docs/`` missing from the nav, an API directive (``::: cl_suites.x``) naming
an object that no longer exists. The examples on the pages are run by
``tests/project/test_readme.py``.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

ROOT = REPO
BUILD_TIMEOUT_S = 120

# (API page, a sentence of a docstring it renders), one per API page: the sentences come
# from the source, so the check fails if the pages stop rendering docstrings.
DOCSTRING_SENTENCES = [
    ("api/cl_suites.html", "sub-envs that switch task together."),  # cl_suites.make_vec
    ("api/cl_suites.html", "The training env, run log, evaluator and progress of one run"),
    ("api/metrics.html", "A, F and P of one run (MEAL section 4.5)."),  # meal_metrics
    ("api/job.html", "Train learner + method over suite and write the run directory."),
    ("api/baselines_sb3.html", "install the loss hook, subscribe it to the env's task"),
    ("api/baselines_jax.html", "MEAL's IPPO (Table 4; IPPO_CL.py Config where the paper"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    problems = [ln for ln in proc.stderr.splitlines() if not ln.startswith("INFO")]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems)[-4000:]
    return out


def page_text(site: Path, page: str) -> str:
    """The page's text without tags, whitespace collapsed."""
    body = re.sub(r"<[^>]+>", "", (site / page).read_text())
    return re.sub(r"\s+", " ", html.unescape(body))


@pytest.mark.parametrize(("page", "sentence"), DOCSTRING_SENTENCES)
def test_api_pages_render_the_docstrings(site, page, sentence):
    assert sentence in page_text(site, page)


def test_every_page_of_the_nav_is_built(site):
    from tests.helpers.readme_blocks import doc_pages

    for page in doc_pages(ROOT)[1:]:
        built = site / Path(page).relative_to("docs").with_suffix(".html")
        assert built.is_file(), page
    text = page_text(site, "suites.html")
    assert "Atari6 (CORA section 3.1, appendix C.8)" in text  # a moved README section
    assert "readme-test" not in text  # the test annotations stay out of sight
