"""Reading back the videos the tests record."""

from __future__ import annotations


def video_frames(path) -> tuple[int, tuple[int, int]]:
    """(frame count, (width, height)) of an mp4, decoded with ffmpeg."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    count = sum(1 for _ in reader)
    return count, tuple(meta["size"])
