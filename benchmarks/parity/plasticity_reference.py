"""Our plasticity diagnostics beside the reference implementations, on the same weights
and batches (issue 42 item 3).

The references run from checkouts outside this repository; no line of them is copied
here. Give the git directories the ``fetch`` tool (or ``git clone --bare``) made::

    python -m benchmarks.parity.plasticity_reference \\
        --plasticine /work/.mirror/RLE-Foundation+Plasticine/repo \\
        --dopamine /work/.mirror/google+dopamine/repo \\
        --lop /work/.mirror/shibhansh+loss-of-plasticity/repo [--only remedies] [--pin]

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

**Remedies** (issue 54; with ``--lop``, the git dir of ``shibhansh/loss-of-plasticity``;
``--only remedies`` skips the diagnostics), on the networks and batches of
``remedies_cases.py``, ours (``baselines_sb3.remedies``) against:

* Plasticine's ``PlasticineAgent`` (``plasticine/ppo_continual_procgen_base.py``, built with
  a fake ``envs``: 64x64x3 frames, 15 actions, and our seeded weights loaded):
  ``plasticine_redo`` (tau 0.025; ours given Plasticine's links explicitly): dormant masks,
  re-drawn rows, tensors changed, all bit for bit under the same torch seed;
  ``plasticine_shrink_and_perturb`` (shrink 0.999999): every parameter bit for bit;
  ``plasticine_reset_layers`` (heads): the new heads bit for bit; plasticity injection:
  Plasticine's ``Injector`` trained as the paper means it (original frozen, ``new_a``
  with a fresh Adam state) against our ``inject_plasticity``, outputs after 5 steps,
  with the encoder frozen (equal within float32 rounding) and trained (they differ:
  Plasticine detaches ``new_b``'s output, so the encoder also gets the gradient through
  the fresh ``new_a``); and Plasticine as written (its optimizer never sees ``new_a``)
  against no injection at all.
* GnT (``lop/algos/gnt.py``, with ``lop/utils/AdamGnT.py``) on GnT's layout for 50 Adam
  steps, two count rules: replaced units, utilities, ages, mean activations and weights
  bit for bit; then one replacement with GnT's ``AdamGnT`` against ours with torch's
  Adam: the zeroed moments.

``--pin`` then writes the reference side to ``tests/golden/remedies_reference.json``
(``tests/baselines/test_remedies.py::test_reference_pins``).
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

from benchmarks.parity import remedies_cases as RC
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
PLASTICINE_AGENT_FILES = ("plasticine/ppo_continual_procgen_base.py", "plasticine/utils.py")
LOP_FILES = ("lop/algos/gnt.py", "lop/utils/AdamGnT.py")


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


# -- remedies (issue 54) ------------------------------------------------------------------
def plasticine_agent(work: Path, weights: th.nn.Module, initial: th.nn.Module | None = None):
    """Plasticine's ``PlasticineAgent`` (default encoder) holding ``weights``' tensors (and
    ``initial``'s as its shrink-and-perturb start)."""
    from types import SimpleNamespace

    import gymnasium as gym

    if str(work / "plasticine") not in sys.path:
        sys.path.insert(0, str(work / "plasticine"))
    from ppo_continual_procgen_base import PlasticineAgent

    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(0, 255, RC.OBS_SHAPE, np.uint8),
        single_action_space=gym.spaces.Discrete(RC.N_ACTIONS),
    )
    flags = [
        f"use_{name}"
        for name in (
            "regenerative_regularization",
            "normalize_and_project",
            "crelu_activation",
            "dff_activation",
            "layer_norm",
            "parseval_regularization",
        )
    ]
    args = SimpleNamespace(device="cpu", use_shrink_and_perturb=True, **dict.fromkeys(flags, False))
    agent = PlasticineAgent(envs, args)
    for part in ("encoder", "actor", "critic"):
        getattr(agent, part).load_state_dict(getattr(weights, part).state_dict())
        if initial is not None:
            getattr(agent, f"init_{part}").load_state_dict(getattr(initial, part).state_dict())
    return agent


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)


def remedies(work: Path) -> tuple[dict, dict, bool]:
    """``(reference side for the pins, comparison rows, all equal)``."""
    refs: dict = {}
    rows: dict = {}
    obs = RC.observations()
    # ReDo
    agent = plasticine_agent(work, RC.twin())
    links = RC.plasticine_links(agent)
    before = RC.snapshot(agent)
    th.manual_seed(RC.SEED)
    agent.plasticine_redo(obs, tau=RC.REDO_TAU)
    after = RC.snapshot(agent)
    masks = {  # a recycled unit's bias is re-drawn; nothing else writes a source's bias
        link.name: (after[f"{link.name}.bias"] != before[f"{link.name}.bias"])
        .nonzero()
        .flatten()
        .tolist()
        for link in links
    }
    refs["redo"] = RC.redo_summary(before, after, masks)
    mine = RC.ours_redo(RC.twin(), obs)
    ours_after = RC.twin()
    RC.ours_redo(ours_after, obs)
    rows["redo: masks"] = mine["masks"] == refs["redo"]["masks"]
    rows["redo: re-drawn rows"] = mine["rows"] == refs["redo"]["rows"]
    rows["redo: tensors changed"] = mine["changed"] == refs["redo"]["changed"]
    rows["redo: every tensor bit for bit"] = _same(RC.snapshot(ours_after), after)
    # shrink and perturb
    agent = plasticine_agent(work, RC.twin(), RC.initial_twin())
    agent.plasticine_shrink_and_perturb(shrink_p=RC.SNP_SHRINK)
    ours = RC.twin()
    RC.ours_snp(ours, RC.initial_twin())
    rows["shrink-perturb: every tensor bit for bit"] = _same(RC.snapshot(ours), RC.snapshot(agent))
    refs["shrink_perturb"] = RC.param_sums(agent, ("encoder", "actor", "critic"))
    # reset the heads
    agent = plasticine_agent(work, RC.twin())
    th.manual_seed(RC.SEED)
    agent.plasticine_reset_layers(reset_encoder=False, reset_critic=True, reset_actor=True)
    ours = RC.twin()
    RC.ours_reset(ours)
    rows["reset heads: every tensor bit for bit"] = _same(RC.snapshot(ours), RC.snapshot(agent))
    refs["reset_heads"] = RC.param_sums(agent, ("actor", "critic"))
    # plasticity injection
    rows.update(_injection(work))
    # continual backprop
    refs["cbp"] = {}
    for case in RC.CBP_CASES:
        ref = gnt_run(case)
        refs["cbp"][case] = ref
        mine = RC.ours_cbp(case)
        for key in ("replaced", "stats", "digests"):
            rows[f"cbp {case}: {key} bit for bit"] = mine[key] == ref[key]
        rows[f"cbp {case}: units replaced"] = sum(len(u) for s in ref["replaced"] for u in s)
    rows.update(gnt_adam_moments())
    return refs, rows, all(v for v in rows.values() if isinstance(v, bool))


def _injection(work: Path) -> dict:
    rows = {}
    for frozen in (True, False):
        diff, noop, change = _injection_case(work, frozen)
        tag = "encoder frozen" if frozen else "encoder trained"
        rows[f"injection, {tag}: paper-trained Injector vs ours, max |diff|"] = diff
        rows[f"injection, {tag}: Plasticine as written vs none, max |diff|"] = noop
        rows[f"injection, {tag}: ours vs none, max |diff|"] = change
    rows["injection, encoder frozen: ours = paper's within float32 rounding"] = (
        rows["injection, encoder frozen: paper-trained Injector vs ours, max |diff|"] < 1e-5
        and rows["injection, encoder frozen: ours vs none, max |diff|"] > 1e-3
    )
    return rows


def _injection_case(work: Path, frozen: bool) -> tuple[float, float, float]:
    """Train 3 steps, inject, train 5 steps; max |logit or value difference| on a probe
    batch of (Plasticine's Injector trained as the paper means, ours), (Plasticine as
    written, no injection), (ours, no injection)."""
    before = RC.train_batches(RC.SEED, 3)
    after = RC.train_batches(RC.SEED + 1, 5)
    probe = RC.observations(RC.SEED + 2, 8)

    def adam(net):
        if frozen:
            net.encoder.requires_grad_(False)
        return th.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=1e-3, eps=1e-5)

    # the paper's injection with Plasticine's Injector: original frozen, new_a trained
    ref = plasticine_agent(work, RC.twin())
    opt = adam(ref)
    for b in before:
        RC.train_step(ref, opt, b)
    ref.plasticine_plasticity_injection()
    for head in (ref.actor, ref.critic):
        head.original.requires_grad_(False)
    fresh = th.optim.Adam([p for p in ref.parameters() if p.requires_grad], lr=1e-3, eps=1e-5)
    for p in ref.encoder.parameters():
        if p in opt.state:
            fresh.state[p] = opt.state[p]
    for b in after:
        RC.train_step(ref, fresh, b)
    # Plasticine as written: the optimizer built once keeps training the original
    written = plasticine_agent(work, RC.twin())
    opt_w = adam(written)
    plain = RC.twin()
    opt_p = adam(plain)
    for b in before:
        RC.train_step(written, opt_w, b)
        RC.train_step(plain, opt_p, b)
    written.plasticine_plasticity_injection()
    for b in after:
        RC.train_step(written, opt_w, b)
        RC.train_step(plain, opt_p, b)
    # ours
    ours = RC.twin()
    RC.ours_injection(ours, adam(ours), before, after)
    with th.no_grad():
        r, o, w, n = (m(probe) for m in (ref, ours, written, plain))

    def gap(x, y):
        return max(float((a - b).abs().max()) for a, b in zip(x[1:], y[1:], strict=True))

    return gap(r, o), gap(w, n), gap(o, n)


def _gnt(net, opt, cfg: dict):
    from lop.algos.gnt import GnT

    return GnT(
        net,
        "relu",
        opt,
        decay_rate=cfg["decay"],
        replacement_rate=cfg["replacement_rate"],
        init="lecun",
        maturity_threshold=cfg["maturity"],
        accumulate=cfg["accumulate"],
    )


def gnt_run(case: str) -> dict:
    """GnT over the run of ``RC.ours_cbp(case)``: the paper's RL loop (torch Adam, GnT after
    each step on that step's activations)."""
    net = RC.gnt_net()
    opt = th.optim.Adam(net.parameters(), lr=1e-2)
    gnt = _gnt(net, opt, RC.CBP_CASES[case])
    acts: dict[int, th.Tensor] = {}
    for i in (1, 3):
        net[i].register_forward_hook(lambda m, inp, out, i=i: acts.__setitem__(i, out.detach()))
    th.manual_seed(RC.SEED)
    replaced = []
    for batch in RC.cbp_batches():
        loss = RC.cbp_loss(net, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with th.no_grad():
            ftr, num = gnt.test_features(features=[acts[1], acts[3], None])
            gnt.gen_new_features(ftr, num)
            gnt.update_optim_params(ftr, num)
        replaced.append([f.tolist() if n else [] for f, n in zip(ftr, num, strict=True)])
    stats = {
        name: {
            "util": gnt.util[i],
            "bias_corrected_util": gnt.bias_corrected_util[i],
            "ages": gnt.ages[i],
            "mean_act": gnt.mean_feature_act[i],
        }
        for i, name in enumerate(("0", "2"))
    }
    return RC.cbp_record(net, stats, replaced)


def gnt_adam_moments() -> dict:
    """One replacement: GnT with its ``AdamGnT`` against ours with torch's Adam, on the same
    weights, moments and features: the weights and the zeroed moments."""
    from lop.utils.AdamGnT import AdamGnT

    from baselines_sb3.remedies import ContinualBackprop, capture_features, sequential_links

    cfg = {"replacement_rate": 0.3, "maturity": 0, "decay": 0.99, "accumulate": True}
    ours = RC.gnt_net()
    opt = th.optim.Adam(ours.parameters(), lr=1e-2)
    links = sequential_links(ours)
    with capture_features(links) as feats:
        loss = RC.cbp_loss(ours, RC.cbp_batches()[0])
    opt.zero_grad()
    loss.backward()
    opt.step()
    ref = RC.clone(ours)
    ref_opt = AdamGnT(ref.parameters(), lr=1e-2)
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        ref_opt.state[q] = {
            "step": th.ones_like(q),
            "exp_avg": opt.state[p]["exp_avg"].clone(),
            "exp_avg_sq": opt.state[p]["exp_avg_sq"].clone(),
        }
    gnt = _gnt(ref, ref_opt, cfg)
    cbp = ContinualBackprop(links, opt, init="lecun", **cfg)
    th.manual_seed(RC.SEED)
    ftr, num = gnt.test_features(features=[feats["0"], feats["2"], None])
    gnt.gen_new_features(ftr, num)
    gnt.update_optim_params(ftr, num)
    th.manual_seed(RC.SEED)
    mine = cbp.observe(feats)
    pairs = list(zip(ours.parameters(), ref.parameters(), strict=True))
    return {
        "cbp with AdamGnT: same units": [m.tolist() for m in mine.values()]
        == [f.tolist() for f in ftr],
        "cbp with AdamGnT: weights bit for bit": all(th.equal(p, q) for p, q in pairs),
        "cbp with AdamGnT: zeroed moments bit for bit": all(
            th.equal(opt.state[p][k], ref_opt.state[q][k])
            for p, q in pairs
            for k in ("exp_avg", "exp_avg_sq")
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plasticine", type=Path, required=True, help="Plasticine git dir")
    parser.add_argument("--dopamine", type=Path, help="google/dopamine git dir (diagnostics)")
    parser.add_argument("--lop", type=Path, help="shibhansh/loss-of-plasticity git dir (remedies)")
    parser.add_argument("--only", choices=("diagnostics", "remedies"), help="one section only")
    parser.add_argument("--work", type=Path, default=Path("/tmp/plasticity_refs"))
    parser.add_argument("--pin", action="store_true", help="write tests/golden pins")
    args = parser.parse_args(argv)
    sections = [args.only] if args.only else ["diagnostics", "remedies"]
    if "diagnostics" in sections and args.dopamine is None:
        parser.error("the diagnostics need --dopamine (or --only remedies)")
    if "remedies" in sections and args.lop is None:
        if args.only:
            parser.error("the remedies need --lop")
        sections.remove("remedies")
    th.set_num_threads(1)
    code = 0
    if "diagnostics" in sections:
        code |= diagnostics(args)
    if "remedies" in sections:
        code |= remedies_main(args)
    return code


def remedies_main(args: argparse.Namespace) -> int:
    commits = {
        "RLE-Foundation/Plasticine": export(args.plasticine, PLASTICINE_AGENT_FILES, args.work),
        "shibhansh/loss-of-plasticity": export(args.lop, LOP_FILES, args.work),
    }
    sys.path.insert(0, str(args.work))
    refs, rows, ok = remedies(args.work)
    for key, value in rows.items():
        print(f"{key:66} {value}")
    print("remedies:", "all equal" if ok else "DIFFERENCES")
    record = {"commits": commits, "rows": rows, "all_equal": ok}
    out = ROOT / "benchmarks" / "results" / "remedies_reference.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    if args.pin:
        pins = {"commits": commits, **refs}
        (ROOT / "tests" / "golden" / "remedies_reference.json").write_text(
            json.dumps(pins, indent=1) + "\n"
        )
    return 0 if ok else 1


def diagnostics(args: argparse.Namespace) -> int:
    commits = {
        "RLE-Foundation/Plasticine": export(args.plasticine, PLASTICINE_FILES, args.work),
        "google/dopamine": export(args.dopamine, REDO_FILES, args.work),
    }
    sys.path.insert(0, str(args.work))
    _stub_gin()
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
