"""Writing frames: a video file (MP4 with imageio-ffmpeg's own ffmpeg, or GIF) and a GIF's
bytes (TensorBoard), with imageio: ``pip install 'podracer[video]'``."""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Iterable

import numpy as np

from podracer.errors import ConfigError, ConfigValueError

FPS = 30
"""Frames per second of a video (a step a frame)."""


def require_writer(path: str) -> None:
    """A :class:`ConfigError` of one line when the ``video`` extra (imageio, and
    imageio-ffmpeg for MP4) is missing; a path that is neither ``.mp4`` nor ``.gif`` is
    refused."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".mp4", ".gif"):
        raise ConfigValueError(
            f"--video {path!r} is not allowed: a video is written as .mp4 or .gif"
        )
    needed = ["imageio", "PIL"] + (["imageio_ffmpeg"] if suffix == ".mp4" else [])
    for module in needed:
        try:
            __import__(module)
        except ImportError:
            raise ConfigError(
                f"videos need the video extra ({module} is not installed): "
                "pip install 'podracer[video]'"
            ) from None


def _even(frames: np.ndarray) -> np.ndarray:
    """Frames padded (black) to an even height and width, which H.264 needs."""
    height, width = frames.shape[1:3]
    pad = ((0, 0), (0, height % 2), (0, width % 2), (0, 0))
    return np.pad(frames, pad) if height % 2 or width % 2 else frames


def _fit(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Frames padded (black) or cut to ``height x width`` (a video's frames have one size)."""
    frames = frames[:, :height, :width]
    pad = ((0, 0), (0, height - frames.shape[1]), (0, width - frames.shape[2]), (0, 0))
    return np.pad(frames, pad)


def write_video(path: str, chunks: Iterable[np.ndarray], fps: int = FPS) -> int:
    """Writes frames, uint8 ``[n, H, W, 3]`` chunks in order (an array of all of them is one
    chunk), as an MP4 (H.264, streamed to imageio-ffmpeg's own ffmpeg) or a GIF (by the suffix);
    every frame takes the first frame's size (padded to even); returns the frames written."""
    import imageio.v2 as imageio

    require_writer(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if isinstance(chunks, np.ndarray):
        chunks = [chunks]
    if path.lower().endswith(".gif"):
        writer = imageio.get_writer(path, mode="I", duration=1000 / fps, loop=0)
    else:
        with warnings.catch_warnings():  # imageio-ffmpeg starts ffmpeg, which JAX warns of
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            writer = imageio.get_writer(
                path, fps=fps, codec="libx264", macro_block_size=1, ffmpeg_log_level="error"
            )
    count, size = 0, None
    with writer:
        for frames in chunks:
            frames = np.asarray(frames, np.uint8)
            size = size or _even(frames[:1]).shape[1:3]
            for frame in _fit(frames, *size):
                writer.append_data(frame)
                count += 1
    return count


def gif_bytes(frames: np.ndarray, fps: int = FPS) -> bytes:
    """The frames as an animated GIF's bytes (TensorBoard's image panel plays them)."""
    import imageio.v3 as iio

    buffer = io.BytesIO()
    iio.imwrite(buffer, _even(frames), extension=".gif", duration=1000 / fps, loop=0)
    return buffer.getvalue()


__all__ = ["FPS", "gif_bytes", "require_writer", "write_video"]
