"""Sebulba: host environments stepped by actor threads, device learners (the shared core)."""

from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.system import SebulbaResult, host_rollout, rollout_keys, run
from podracer.sebulba.train import env_factory, train

__all__ = [
    "SebulbaConfig",
    "SebulbaResult",
    "env_factory",
    "host_rollout",
    "rollout_keys",
    "run",
    "train",
]
