"""Evaluation videos: which evaluation points to record, and writing the mp4 files.

Files are ``RUN_DIR/videos/eval-step{total_step:09d}-task{task_id:02d}-{split}.mp4``: one
episode per task and split at each recorded evaluation point (``total_step`` in the
run's step unit), each with a poster frame beside it (the same name, ``.png``: the
episode's middle frame), which the report shows before the video is played.
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

VIDEO_DIR = "videos"


def video_path(run_dir: str | Path, total_step: int, task_id: int, split: str) -> Path:
    """Where the video of ``(total_step, task_id, split)`` goes."""
    name = f"eval-step{int(total_step):09d}-task{int(task_id):02d}-{split}.mp4"
    return Path(run_dir) / VIDEO_DIR / name


def poster_path(video: str | Path) -> Path:
    """The poster frame of a video file: the same name, ``.png``."""
    return Path(video).with_suffix(".png")


def write_mp4(path: Path, frames: Sequence[np.ndarray], fps: int = 15) -> Path:
    """Write ``frames`` (``(H, W, 3)`` uint8 each) as an H.264 mp4 (moviepy + ffmpeg) and
    its poster frame (the middle frame; ``poster_path``)."""
    from PIL import Image

    with warnings.catch_warnings():  # imageio-ffmpeg imports the deprecated pkg_resources
        warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
        from moviepy import ImageSequenceClip

    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [np.ascontiguousarray(np.asarray(f, dtype=np.uint8)[..., :3]) for f in frames]
    if len(frames) == 1:
        frames = frames * 2  # ffmpeg needs a duration
    height, width = frames[0].shape[:2]
    if height % 2 or width % 2:  # yuv420p needs even sizes
        frames = [np.pad(f, ((0, height % 2), (0, width % 2), (0, 0))) for f in frames]
    tmp = path.with_name(path.stem + ".tmp.mp4")
    clip = ImageSequenceClip(frames, fps=fps)
    clip.write_videofile(str(tmp), codec="libx264", audio=False, logger=None)
    clip.close()
    tmp.replace(path)
    Image.fromarray(frames[len(frames) // 2]).save(poster_path(path))
    return path


class VideoRecorder:
    """Records evaluation episodes at chosen evaluation points.

    The evaluator records at the first evaluation point at or after each of
    ``boundaries`` (default in the main job: step 0 and the end of every schedule
    segment, i.e. right after each task finished training), then writes one mp4 per task
    and split with :func:`write_mp4`.

    Args:
        run_dir: the run directory (videos go to ``RUN_DIR/videos``).
        boundaries: steps after which the next evaluation is recorded.
        fps: frames per second of the files.
        max_frames: record at most this many frames of the episode (``None``: all of it;
            MEAL's own videos stop after 250-300 steps, and drawing a kitchen costs about
            0.1 s per frame).
    """

    def __init__(
        self,
        run_dir: str | Path,
        boundaries: Sequence[int],
        fps: int = 15,
        max_frames: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.boundaries = sorted({int(b) for b in boundaries})
        self.fps = int(fps)
        self.max_frames = max_frames
        self._next = 0  # index of the first boundary not yet recorded
        self.written: list[Path] = []

    def due(self, total_step: int) -> bool:
        return self._next < len(self.boundaries) and total_step >= self.boundaries[self._next]

    def done(self, total_step: int) -> None:
        """Mark every boundary up to ``total_step`` as recorded."""
        self._next = max(self._next, bisect.bisect_right(self.boundaries, int(total_step)))

    def write(self, total_step: int, task_id: int, split: str, frames: list[np.ndarray]) -> None:
        if frames:
            path = video_path(self.run_dir, total_step, task_id, split)
            self.written.append(write_mp4(path, frames, self.fps))

    def state_dict(self) -> dict[str, Any]:
        return {"next": self._next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._next = int(state["next"])
