"""Every suite x learner x method x preset resolves exactly as recorded in the golden file.

A changed default, an option that moved, a refusal that changed its message: each shows
here as the combinations and keys that differ. After an intended change, rewrite the file
with ``python tests/golden/resolved_configs.py --write`` and say in the commit which values
changed and why.
"""

from __future__ import annotations

import json

from tests.golden.resolved_configs import GOLDEN, resolve_all


def _differences(golden: object, now: object, path: str = "") -> list[str]:
    if isinstance(golden, dict) and isinstance(now, dict):
        out: list[str] = []
        for key in sorted(set(golden) | set(now)):
            if key not in now:
                out.append(f"{path}/{key}: gone (was {golden[key]!r})")
            elif key not in golden:
                out.append(f"{path}/{key}: new ({now[key]!r})")
            else:
                out.extend(_differences(golden[key], now[key], f"{path}/{key}"))
        return out
    return [] if golden == now else [f"{path}: {golden!r} -> {now!r}"]


def test_resolved_configurations_match_the_golden_file():
    golden = json.loads(GOLDEN.read_text())
    now = json.loads(json.dumps(resolve_all(), sort_keys=True))
    diffs = _differences(golden, now)
    assert not diffs, f"{len(diffs)} resolved values differ:\n" + "\n".join(diffs[:60])
