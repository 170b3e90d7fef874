"""render_mode="rgb_array" everywhere, so gymnasium's RecordVideo, PettingZoo's
RecordVideoParallel and SB3's VecVideoRecorder record episodes (issue 12 item 1)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cl_suites
from cl_suites.core.task import TaskSpec

pytest.importorskip("moviepy")
pytest.importorskip("imageio_ffmpeg")

from tests.helpers.video import video_frames


def test_record_video_writes_a_procgen6_episode(tmp_path):
    env = gym.make("CLSuite/Procgen6-v0", steps_per_task=40, cycles=1, render_mode="rgb_array")
    assert env.metadata["render_fps"] == 15
    env = gym.wrappers.RecordVideo(env, str(tmp_path), episode_trigger=lambda e: e == 0)
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, terminated, truncated, _info = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            break
    frame = env.render()
    assert frame.shape == (512, 512, 3) and frame.dtype == np.uint8  # procgen's render size
    env.reset()  # ends the recording: the video is written
    env.close()
    (video,) = tmp_path.glob("*.mp4")
    assert video_frames(video) == (steps + 1, (512, 512))  # reset frame + one per step


def test_vector_env_renders_one_frame_per_sub_env():
    # procgen's native batch and gymnasium's SyncVectorEnv (Diagnostic) alike
    venv = cl_suites.make_vec("Procgen6", 3, steps_per_task=30, render_mode="rgb_array")
    venv.reset(seed=0)
    frames = venv.render()
    assert len(frames) == 3 and all(f.shape == (512, 512, 3) for f in frames)
    assert not np.array_equal(frames[0], frames[1])  # three different levels
    venv.close()

    venv = gym.make_vec("CLSuite/Diagnostic-v0", num_envs=2, render_mode="rgb_array")
    venv.reset(seed=0)
    venv.step(np.array([0, 1]))
    frames = venv.render()
    assert len(frames) == 2 and frames[0].shape == (96, 96, 3)
    # row 2 shows the last action (green: rewarded, red: not): 0 in sub-env 0, 1 in sub-env 1
    lit = {(60, 200, 80), (220, 60, 60)}
    assert tuple(frames[0][80, 16]) in lit and tuple(frames[0][80, 48]) == (40, 40, 40)
    assert tuple(frames[1][80, 48]) in lit and tuple(frames[1][80, 16]) == (40, 40, 40)
    assert cl_suites.make_vec("Diagnostic", 2).render() is None  # no render mode asked for


def test_factories_get_render_mode_only_when_asked():
    calls = []

    def factory(**kwargs):
        calls.append(kwargs)
        return gym.make("CartPole-v1", **kwargs)

    task = TaskSpec("cartpole", make_train=factory, budget=10)
    task.env_factory("train")()
    task.env_factory("train", render_mode="rgb_array")()
    assert calls == [{}, {"render_mode": "rgb_array"}]
    with pytest.raises(ValueError, match="render_mode 'human' is not supported"):
        cl_suites.make_env("Diagnostic", render_mode="human")


def test_vec_video_recorder_on_the_sb3_adapter(tmp_path):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import VecVideoRecorder

    venv = cl_suites.SB3VecEnv(
        cl_suites.make_vec("Diagnostic", 2, steps_per_task=100, render_mode="rgb_array")
    )
    assert venv.render_mode == "rgb_array" and venv.metadata["render_fps"] == 4
    recorder = VecVideoRecorder(venv, str(tmp_path), lambda step: step == 0, video_length=12)
    recorder.reset()
    for _ in range(12):
        recorder.step(np.array([0, 1]))
    recorder.close()
    (video,) = tmp_path.glob("*.mp4")
    count, size = video_frames(video)
    assert count == 13 and size == (96, 2 * 96)  # SB3 tiles the two sub-envs' frames
