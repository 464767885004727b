"""Environments of tests/test_video.py, importable by the video process (``module:attribute``)."""

from podracer.envs.jax.catch import Catch


class FailingDrawing(Catch):
    """Catch whose drawing fails: the video process's error must stop the run."""

    def render(self, state, params):
        raise ValueError("this drawing fails on purpose")
