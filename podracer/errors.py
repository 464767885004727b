"""The errors users see: a config value, an id or a size that is not allowed.

The command line prints these as one line (exit code 2); anything else keeps its traceback.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A config value, an id or a size that is not allowed: the command line prints its message
    as one line (exit code 2). Raised for what a user chose, never for a bug, whose exception
    keeps its traceback.

    Not a ``ValueError``: tyro turns a ``ValueError`` raised while it builds a config into its
    own error box, and the command line prints ours."""


class ConfigValueError(ConfigError, ValueError):
    """A :class:`ConfigError` that is also a ``ValueError``, where one was raised before: an
    unknown environment id, agent or torso, a size that does not divide."""


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable or does not fit the run."""
