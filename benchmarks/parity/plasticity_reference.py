"""Our plasticity diagnostics beside the reference implementations, on the same weights
and batches (issue 42 item 3).

The references run from checkouts outside this repository; no line of them is copied
here. Give the git directories the ``fetch`` tool (or ``git clone --bare``) made::

    python -m benchmarks.parity.plasticity_reference \\
        --plasticine /work/.mirror/RLE-Foundation+Plasticine/repo \\
        --dopamine /work/.mirror/google+dopamine/repo [--pin]

The script exports the files it needs (``plasticine_metrics/``, ``plasticine/utils.py``;
``dopamine/labs/redo/weight_recyclers.py``) with ``git archive`` into a work directory
(default ``/tmp/plasticity_refs``) and imports them from there. ReDo's module needs
``gin`` only for its ``@gin.configurable`` decorator: when gin is not installed a stub
whose ``configurable`` returns the class unchanged is put in ``sys.modules``.

Compared, per case of ``plasticity_cases.py`` (beside this file: a hand-worked MLP, a random
ReLU MLP with shifted biases, a ReLU CNN, a tanh MLP):

* Plasticine (``plasticine_metrics``): ``compute_dormant_units`` (their pooling: the mean
  of the layers' ratios; ours with ``pooling="plasticine"``) at tau 0.025 and 0.1,
  ``compute_active_units``, ``compute_stable_rank`` (ours ``"srank"``),
  ``compute_effective_rank``, ``compute_feature_norm`` on the penultimate features, and
  ``compute_l2_norm_difference`` against a perturbed copy (ours ``weight_scale="rms"``).
* ReDo (``weight_recyclers.BaseRecycler.log_dead_neurons_count``, dead units pooled over
  all units; ours ``pooling="redo"``) at tau 0.025 and 0.1, whole network and per layer,
  on the same activation arrays (units last, as flax's are).

``--pin`` writes the reference values to ``tests/golden/plasticity_reference.json``
(``tests/metrics/test_plasticity.py::test_reference_pins`` checks ours against them); the table
goes to stdout and ``benchmarks/results/plasticity_reference.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import torch as th

from benchmarks.parity.plasticity_cases import (
    CASES,
    TAUS,
    build,
    case_probe,
    moved,
    our_diagnostics,
)

ROOT = Path(__file__).resolve().parents[2]
PLASTICINE_FILES = ("plasticine_metrics", "plasticine/utils.py")
REDO_FILES = ("dopamine/labs/redo/weight_recyclers.py",)


def export(git_dir: Path, paths: tuple[str, ...], work: Path) -> str:
    """``git archive`` ``paths`` of ``git_dir``'s HEAD into ``work``; returns the commit."""
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    work.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "HEAD", *paths],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    return commit


def _stub_gin() -> None:
    try:
        import gin
    except ImportError:
        gin = types.ModuleType("gin")
        gin.configurable = lambda cls=None, **_: cls if cls is not None else (lambda c: c)
        sys.modules["gin"] = gin


def plasticine(case: str) -> dict[str, float]:
    from plasticine_metrics import metrics as M

    net, x, activation = build(case)
    data = th.as_tensor(x)
    out: dict[str, float] = {}
    for tau in TAUS:
        out[f"dormant_plasticine@{tau}"] = float(
            M.compute_dormant_units(net, data, activation, tau)
        )
    with th.no_grad():
        h = net[:-1](data)
    out["active_fraction"] = float(M.compute_active_units(h, activation))
    out["stable_rank"] = float(M.compute_stable_rank(h))
    out["effective_rank"] = float(M.compute_effective_rank(h))
    out["feature_norm"] = float(M.compute_feature_norm(h))
    with th.no_grad():
        out["weight_change_rms"] = float(M.compute_l2_norm_difference(net, moved(net, case)))
    return out


def redo(case: str) -> dict[str, float]:
    import jax.numpy as jnp
    from dopamine.labs.redo import weight_recyclers as W

    net, x, _ = build(case)
    probe = case_probe(net)
    acts = probe.capture(x, np.zeros(len(x), np.int64))["net"].activations
    intermediates = {name: {"__call__": (jnp.asarray(a),)} for name, a in acts.items()}
    out: dict[str, float] = {}
    for tau in TAUS:
        recycler = W.BaseRecycler(list(acts), dead_neurons_threshold=tau)
        logged = recycler.log_dead_neurons_count(intermediates)
        out[f"dormant_redo@{tau}"] = logged["dead_feature_percentage"] / 100.0
        for name in acts:
            out[f"dormant_redo@{tau}/{name}"] = logged[f"dead_feature_percentage/{name}"] / 100.0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plasticine", type=Path, required=True, help="Plasticine git dir")
    parser.add_argument("--dopamine", type=Path, required=True, help="google/dopamine git dir")
    parser.add_argument("--work", type=Path, default=Path("/tmp/plasticity_refs"))
    parser.add_argument("--pin", action="store_true", help="write tests/golden pins")
    args = parser.parse_args(argv)
    commits = {
        "RLE-Foundation/Plasticine": export(args.plasticine, PLASTICINE_FILES, args.work),
        "google/dopamine": export(args.dopamine, REDO_FILES, args.work),
    }
    sys.path.insert(0, str(args.work))
    _stub_gin()
    th.set_num_threads(1)
    results: dict[str, dict[str, dict[str, float]]] = {}
    worst = 0.0
    print(f"{'case':6} {'diagnostic':34} {'reference':>14} {'ours':>14} {'|diff|':>10}")
    for case in CASES:
        mine = our_diagnostics(case)
        refs = {**plasticine(case), **redo(case)}
        results[case] = {}
        for key, ref in refs.items():
            diff = abs(mine[key] - ref)
            worst = max(worst, diff)
            results[case][key] = {"reference": ref, "ours": mine[key], "abs_diff": diff}
            print(f"{case:6} {key:34} {ref:14.8f} {mine[key]:14.8f} {diff:10.2e}")
    print(f"largest |ours - reference|: {worst:.3e}")
    record = {"commits": commits, "taus": TAUS, "cases": results, "largest_abs_diff": worst}
    out = ROOT / "benchmarks" / "results" / "plasticity_reference.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    if args.pin:
        pins = {
            "commits": commits,
            "cases": {c: {k: v["reference"] for k, v in r.items()} for c, r in results.items()},
        }
        (ROOT / "tests" / "golden" / "plasticity_reference.json").write_text(
            json.dumps(pins, indent=1) + "\n"
        )
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
