"""On-device environments: ``make(id)`` builds one by its id.

Ids: ``"catch"`` (the Podracer paper's demo) and ``"gymnax:<name>"`` for every discrete-action
environment of gymnax (``gymnax:CartPole-v1``, ``gymnax:Breakout-MinAtar``, ...).
"""

from __future__ import annotations

import difflib

from podracer.envs.catch import Catch
from podracer.envs.gymnax import DISCRETE_IDS, GymnaxEnvironment
from podracer.envs.wrappers import EpisodeStatistics

KNOWN_IDS: tuple[str, ...] = ("catch", *(f"gymnax:{name}" for name in DISCRETE_IDS))


def make(env_id: str, **kwargs):
    """Builds the environment ``env_id`` (see :data:`KNOWN_IDS`); kwargs go to its constructor."""
    if env_id == "catch":
        return Catch(**kwargs)
    if env_id.startswith("gymnax:") and env_id in KNOWN_IDS:
        return GymnaxEnvironment(env_id.removeprefix("gymnax:"), **kwargs)
    close = difflib.get_close_matches(env_id, KNOWN_IDS, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown environment id {env_id!r}.{hint} Known ids: {', '.join(KNOWN_IDS)}")


__all__ = ["KNOWN_IDS", "Catch", "EpisodeStatistics", "GymnaxEnvironment", "make"]
