"""Our L2M metrics against DARPA's ``l2metrics`` 3.1.0 run on our own l2logger export.

The scenario is built to expose the four causes of disagreement found before (issue 12
item 9): experts whose task ids differ from the learner's (matched by name), experts with
two Learning Blocks (smoothed per block), a saturation tie that a cumulative-sum moving
average breaks the other way (``np.convolve`` as l2metrics), and a task whose trend is
negative against its own LX index but positive against the lifetime's experience counter
(l2metrics' ``exp_num``). l2metrics runs in its own venv (``tests/metrics/l2metrics_venv.py``);
the test is skipped, with the reason, only when that venv cannot be built.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from cl_suites.metrics import export_l2logger, l2m, load_run
from cl_suites.metrics.preprocess import l2m_smooth

from .conftest import write_run
from .l2metrics_venv import l2metrics_python

NAMES = ("Climber_Easy", "Ninja", "big fish")
INFO = {"complexity": "1-low", "difficulty": "2-medium"}
EPISODES = 30
# a block whose cumulative-sum moving average (window 3) peaks at LX 11, np.convolve at LX 1
TIE = [0.2, 0.7, 0.2, 0.1, 0.3, 0.3, 0.1, 0.1, 0.2, 0.7, 0.2, 0.7, 0.2, 0.1, 0.7]
# ours -> l2metrics' lifetime metric names
KEYS = {
    "PM": "perf_maintenance_mrlep",
    "FT_contrast": "forward_transfer_contrast",
    "FT_ratio": "forward_transfer_ratio",
    "BT_contrast": "backward_transfer_contrast",
    "BT_ratio": "backward_transfer_ratio",
    "PR": "perf_recovery",
    "RP": "ste_rel_perf",
    "SE": "sample_efficiency",
}


def _eval_return(task: int, split: str, step: int) -> float:
    """Learning while a task trains, decay afterwards, deterministic wiggle."""
    level = 0.0
    for cycle in range(3):
        start = (cycle * 3 + task) * 1000
        if step >= start:
            level = max(level, (task + 1) * min(1.0, (step - start) / 1000) * (1 + cycle))
            if step > start + 1000:
                level *= 0.7 ** ((step - start - 1000) / 1000)
    return level + 0.05 * np.sin(0.37 * step + task) - (0.3 if split == "test" else 0.0)


def _episode_return(task: int, seg: int, n: int) -> float:
    block = seg // 3
    if task == 0:  # falls within each block, rises from block to block
        return 20.0 + 4 * block + 20.0 - 40.0 * n / (EPISODES - 1)
    noise = np.random.default_rng([task, seg, n]).normal(0, 0.3)
    return (task + 1) * (1 - np.exp(-(n + EPISODES * block) / 10)) + noise


def _expert_return(task: int):
    def f(_t: int, seg: int, n: int) -> float:
        if task == 2 and seg == 0 and n < len(TIE):
            return TIE[n] * 3
        noise = np.random.default_rng([task, seg, n, 7]).normal(0, 0.3)
        return (task + 1) * (1 - np.exp(-(n + 40 * seg) / 15)) + noise

    return f


@pytest.fixture(scope="module")
def l2metrics(tmp_path_factory):
    python, reason = l2metrics_python()
    if python is None:
        pytest.skip(reason)
    return python


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("l2cmp")
    learner = write_run(
        root / "learner",
        returns=_eval_return,
        n_tasks=3,
        cycles=3,
        steps_per_task=1000,
        eval_every=250,
        splits=("train", "test"),
        episodes_per_segment=EPISODES,
        episode_return=_episode_return,
        task_names=NAMES,
    )
    experts = [
        write_run(
            root / f"ste-{task}-{rep}",
            method="ste",
            seed=rep,
            n_tasks=1,
            cycles=2,
            returns=lambda t, s, k: 1.0,
            steps_per_task=1000,
            eval_every=500,
            episodes_per_segment=40,
            episode_return=_expert_return(task),
            task_names=[NAMES[task]],
        )
        for task, rep in ((0, 0), (1, 0), (1, 1), (2, 0))
    ]
    return root, learner, experts


def _run(python, args, env, cwd):
    done = subprocess.run(
        [str(python), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_l2m_metrics_agree_with_l2metrics(l2metrics, scenario):
    root, learner, experts = scenario
    env = dict(os.environ, L2DATA=str(root / "l2data"), MPLBACKEND="Agg")
    for d in experts:
        export_l2logger(d, root / "export-ste" / d.name, scenario_info=INFO)
    _run(l2metrics, ["-m", "l2metrics", "-R", "-l", str(root / "export-ste"), "-s", "a"], env, root)
    scenario_dir = export_l2logger(learner, root / "export-ll", scenario_info=INFO)
    args = ["-m", "l2metrics", "-l", str(scenario_dir), "-t", "both", "--no-plot"]
    _run(l2metrics, [*args, "-O", str(root / "results"), "-o", "ll"], env, root)
    theirs = json.loads((root / "results" / "ll_metrics.json").read_text())
    # l2metrics skips a zero denominator only (our RATIO_FLOOR leaves out more)
    ours, notes = l2m.l2m_metrics(
        load_run(learner), [load_run(d) for d in experts], ratio_floor=0.0
    )
    assert not notes
    for key, their_key in KEYS.items():
        assert np.isfinite(ours[key]), key
        assert ours[key] == pytest.approx(theirs[their_key], rel=1e-9, abs=1e-12), key
    assert set(theirs["task_metrics"]) == {l2m.l2m_task_name(n) for n in NAMES}


def test_scenario_exposes_the_four_causes(scenario):
    """Each old rule would change a value of the scenario above (so the agreement test can
    fail), checked on our own preprocessed data."""
    _root, learner, experts = scenario
    run = load_run(learner)
    # 1. experts number their only task 0; by id all four would land on task 0
    assert {int(load_run(d).schedule["task_id"].iloc[0]) for d in experts} == {0}
    curves = l2m.ste_curves([load_run(d) for d in experts])
    assert sorted(curves) == sorted(l2m.l2m_task_name(n) for n in NAMES)
    assert len(curves["ninja"]) == 2
    # 2. an expert's two blocks smoothed as one curve differ from smoothing each block
    blocks = curves["ninja"][0]
    assert len(blocks) == 2
    per_block = np.concatenate([l2m_smooth(b) for b in blocks])
    assert not np.allclose(per_block, l2m_smooth(np.concatenate(blocks)))
    # 3. cumulative-sum smoothing breaks the tie of TIE the other way
    x = np.asarray(TIE)
    padded = np.pad(x, 2, mode="reflect")
    csum = np.concatenate([[0.0], np.cumsum(padded)])
    cumsum_ma = ((csum[3:] - csum[:-3]) / 3)[0 : x.size]
    assert int(np.argmax(l2m_smooth(x))) == 1 and int(np.argmax(cumsum_ma)) == 11
    # 4. task 0's trend: negative against its own LX index, positive against exp_num
    log = l2m.lifetime_log(run)
    lx = log[log["block_type"] == "train"].rename(columns={"block": "lb"})
    lx = l2m.l2m_preprocess(l2m.L2MData(lx, log.iloc[:0])).lx
    task0 = lx[lx["task_id"] == 0]
    assert np.polyfit(np.arange(len(task0)), task0["perf"], 1)[0] < 0
    assert np.polyfit(task0["exp_num"], task0["perf"], 1)[0] > 0


def test_smoothing_is_bitwise_l2metrics(l2metrics, tmp_path):
    code = (
        "import json, sys, numpy as np; from l2metrics._localutil import smooth; "
        "print(json.dumps([[float(v) for v in smooth(np.array(x))] "
        "for x in json.loads(sys.stdin.read())]))"
    )
    rng = np.random.default_rng(3)
    blocks = [TIE, list(rng.normal(size=57)), list(rng.normal(size=1234))]
    done = subprocess.run(
        [str(l2metrics), "-c", code],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for values, theirs in zip(blocks, json.loads(done.stdout), strict=True):
        np.testing.assert_array_equal(l2m_smooth(np.asarray(values)), theirs)
