"""Our V-trace learner and CL methods give, update for update, the values CORA's own code
computed on the same inputs (issue 28 item 5) - no CORA checkout needed.

``tests/golden/cora_parity.json`` holds, for every case of ``benchmarks/parity/cora_cases.py``
(a network family x IMPALA / EWC / online EWC / P&C / CLEAR, each a short schedule of
rollouts and task switches), what CORA's ``Monobeast.learn`` (``AGI-Labs/continual_rl``
at f2754bb) computed from the case's parameters and rollouts: learning rates, losses,
gradient norms (total and per tensor), the first entries of every parameter after each
update, of every Fisher and anchor, and the running reward moments. Its ``provenance``
names CORA's functions, the commit and the command that regenerates it
(``python -m benchmarks.parity.parity_cora ... update --write-pins``), which also checks
that our side passes this test. The cases' inputs come from numpy seeds, so our side
(``benchmarks/parity/cora_ours.py``) rebuilds them here.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.parity import cora_cases, cora_ours, cora_reference, parity_cora

PINS = cora_cases.load_pins()


def test_every_case_is_pinned_with_its_provenance():
    assert set(PINS["cases"]) == {case.name for case in cora_cases.CASES}
    assert set(PINS["observations"]) == {case.name for case in cora_cases.OBSERVATION_CASES}
    provenance = PINS["provenance"]
    assert "continual_rl@f2754bb" in provenance["cora"]
    assert "parity_cora" in provenance["command"] and "--write-pins" in provenance["command"]


@pytest.mark.parametrize("name", sorted(PINS["cases"]))
def test_updates_reproduce_coras_values(name):
    records = cora_ours.OurSide(cora_cases.find_case(name)).run()
    pinned = PINS["cases"][name]
    assert len(records) == len(pinned)
    problems = [
        f"update {i}: {problem}"
        for i, (pin, record) in enumerate(zip(pinned, records, strict=True))
        for problem in cora_cases.pin_differences(pin, record)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("atari/ft", {"loss_reduction": "mean"}),  # TorchBeast sums over the batch
        ("atari/ft", {"rms_prop_eps": 1e-5}),  # CORA's RMSProp eps 0.01
        ("atari/ft", {"vf_coef": 0.25}),  # baseline cost 0.5
        ("atari/ft", {"lr_schedule": "constant"}),  # CORA's LambdaLR decays per task
        ("minihack/ewc", {"max_grad_norm": 400.0}),  # CORA clips at 40 (update 3: 146)
        ("minihack/ft", {"reward_std_count": "true"}),  # CORA's count of T per batch
    ],
)
def test_a_changed_learner_setting_leaves_the_pins(name, change):
    """The pins see a learner that no longer computes what CORA computes."""
    records = cora_ours.OurSide(cora_cases.find_case(name), learner_changes=change).run()
    problems = [
        p
        for pin, record in zip(PINS["cases"][name], records, strict=True)
        for p in cora_cases.pin_differences(pin, record)
    ]
    assert problems


SIMULATORS = {"minihack": "minihack", "procgen": "procgen", "atari": "ale_py"}


@pytest.mark.parametrize("name", sorted(PINS["observations"]))
def test_observation_pipeline_reproduces_coras_env_stack(name):
    """Our suite's task env behind the learner's wrappers gives, for the same seed and
    actions, the frames, rewards, episode ends and previous-action / reward inputs that
    CORA's env stack gave in TorchBeast's ``Environment`` (frames by their SHA-256)."""
    case = next(c for c in cora_cases.OBSERVATION_CASES if c.name == name)
    pytest.importorskip(SIMULATORS[case.family])
    pinned = PINS["observations"][name]
    ours = cora_cases.stream_pins(cora_ours.our_observation_stream(case))
    for key in ("rewards", "dones", "prev_actions", "prev_rewards", "frame_sums"):
        assert len(ours[key]) == len(pinned[key]), key
        pairs = enumerate(zip(ours[key], pinned[key], strict=True))
        first = next((i for i, (a, b) in pairs if a != b), None)
        assert first is None, f"{key} differ from step {first}"
    assert ours["frames_sha256"] == pinned["frames_sha256"]


def test_parity_script_names_a_bad_checkout_or_interpreter_in_one_line(
    tmp_path, capsys, monkeypatch
):
    """``benchmarks.parity.parity_cora``: a path that is not CORA's checkout, or an
    interpreter where CORA's code cannot import (this one: no gym 0.25), end in one line
    naming what is missing and the command that builds it, exit status 2, no traceback."""
    parity = parity_cora
    monkeypatch.setattr(parity.signal, "signal", lambda *args: None)  # no SIGTERM handler here
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    assert parity.main(["--cora-repo", str(tmp_path), "update"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a checkout of AGI-Labs/continual_rl" in err
    assert "git clone https://github.com/AGI-Labs/continual_rl" in err  # how to get one
    for marker in cora_reference.MARKER_FILES:  # no git: the interpreter next
        (tmp_path / marker).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / marker).touch()
    assert parity.main(["--cora-repo", str(tmp_path), "update"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bash benchmarks/parity/cora_env.sh" in err
