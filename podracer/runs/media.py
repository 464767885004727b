"""Writing frames: a video file (MP4 with imageio-ffmpeg's own ffmpeg, or GIF) and a GIF's
bytes (TensorBoard), with imageio: ``pip install 'podracer[video]'``."""

from __future__ import annotations

import io
import os
import warnings

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


def write_video(path: str, frames: np.ndarray, fps: int = FPS) -> str:
    """Writes uint8 ``[N, H, W, 3]`` frames as an MP4 (H.264, imageio-ffmpeg's own ffmpeg) or a
    GIF (by the suffix); returns ``path``."""
    import imageio.v3 as iio

    require_writer(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    frames = _even(np.asarray(frames, np.uint8))
    if path.lower().endswith(".gif"):
        iio.imwrite(path, frames, extension=".gif", duration=1000 / fps, loop=0)
        return path
    with warnings.catch_warnings():  # imageio-ffmpeg starts ffmpeg, which JAX warns of
        warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
        iio.imwrite(path, frames, extension=".mp4", fps=fps, codec="libx264", macro_block_size=1)
    return path


def gif_bytes(frames: np.ndarray, fps: int = FPS) -> bytes:
    """The frames as an animated GIF's bytes (TensorBoard's image panel plays them)."""
    import imageio.v3 as iio

    buffer = io.BytesIO()
    iio.imwrite(buffer, _even(frames), extension=".gif", duration=1000 / fps, loop=0)
    return buffer.getvalue()


__all__ = ["FPS", "gif_bytes", "require_writer", "write_video"]
