"""The plasticity probe batch in checkpoints (issue 55 item 8): a checkpoint refers to the
run's ``plasticity_probe.npz`` for the rows it already holds instead of copying them (a
tiny Procgen run's checkpoints were 21 MB, 19 MB of them the probe batch), and a resume
reads them back identically."""

from __future__ import annotations

import io

import numpy as np
import torch

from cl_suites.metrics.plasticity_tracker import PlasticitySettings, PlasticityTracker


def _tracker(probe_file) -> PlasticityTracker:
    tracker = PlasticityTracker(PlasticitySettings(probe_size=64), probe_file=probe_file)
    rng = np.random.default_rng(0)
    for task in (0, 1):
        tracker.observe(task, rng.integers(0, 255, (32, 3, 64, 64), dtype=np.uint8), 10 * task)
    return tracker


def _bytes(state) -> int:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


def test_a_checkpoint_refers_to_the_probe_file_and_resumes_the_same_batch(tmp_path):
    probe = tmp_path / "plasticity_probe.npz"
    tracker = _tracker(probe)
    state = tracker.state_dict()
    assert _bytes(state) < 50_000 < tracker.probe.obs.nbytes  # the rows are in the file
    assert probe.exists()
    tracker.observe(2, np.ones((32, 3, 64, 64), np.uint8), 20)  # rows after the checkpoint
    tracker._save_probe()
    resumed = PlasticityTracker(PlasticitySettings(probe_size=64), probe_file=probe)
    resumed.load_state_dict(state)
    assert len(resumed.probe) == 64
    np.testing.assert_array_equal(resumed.probe.obs, tracker.probe.obs[:64])
    np.testing.assert_array_equal(resumed.probe.task_ids, tracker.probe.task_ids[:64])


def test_without_a_probe_file_the_checkpoint_holds_the_rows(tmp_path):
    tracker = _tracker(None)
    resumed = PlasticityTracker(PlasticitySettings(probe_size=64))
    resumed.load_state_dict(tracker.state_dict())
    np.testing.assert_array_equal(resumed.probe.obs, tracker.probe.obs)
