"""The resolved configuration of every suite x learner x method x preset, as a golden file.

``python tests/golden/resolved_configs.py --write`` records what ``resolve_job`` gives
today in ``tests/golden/resolved_configs.json``; ``tests/job/test_resolved_golden.py`` fails
when any resolved value changes without the golden file changing with it. A refactor of
the configuration path (issue 22) must keep every value, except the bugs it fixes, which
the commit that regenerates the file lists.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).with_suffix(".json")
MEAL_SUITES = ("MEAL-2", "MEAL-10")


def _jsonable(value: Any) -> Any:
    """JSON-ready data with floats kept exact (repr) and tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else value
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)


def combinations() -> list[tuple[str, str | None, str, str]]:
    """(suite, learner or None for the suite's default, method, preset) to resolve."""
    from baselines_sb3.factory import LEARNERS
    from cl_suites.declarations import CL_METHODS
    from cl_suites.job import presets
    from cl_suites.suites import SUITES

    learners: list[str | None] = [None, *LEARNERS]
    return [
        (suite, learner, method, preset)
        for suite in (*SUITES, *MEAL_SUITES)
        for learner in learners
        for method in CL_METHODS
        for preset in presets.PRESETS
    ]


def resolve_all() -> dict[str, Any]:
    """``{"suite|learner|method|preset": resolved config or the error it raises}``."""
    from cl_suites.job.main_job import resolve_job

    out: dict[str, Any] = {}
    for suite, learner, method, preset in combinations():
        key = f"{suite}|{learner or 'default'}|{method}|{preset}"
        try:
            spec = resolve_job(
                suite=suite,
                method=method,
                learner=learner,
                preset=preset,
                num_envs=None,
                overrides={},
                seed=0,
            )
            out[key] = _jsonable(spec.config())
        except Exception as e:  # the refusal is part of the behaviour to keep
            out[key] = {"error": type(e).__name__, "message": str(e)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden file")
    args = parser.parse_args()
    resolved = resolve_all()
    if args.write:
        GOLDEN.write_text(json.dumps(resolved, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(resolved)} resolved configurations to {GOLDEN}")
    else:
        print(json.dumps(resolved, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
