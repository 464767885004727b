"""Sebulba: host environments stepped by actor threads, device learners (the shared core)."""

from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.system import SebulbaRun, host_act, host_rollout, rollout_keys, run
from podracer.sebulba.train import LOOP, SebulbaSystem, env_factory, steps_per_update, train

__all__ = [
    "LOOP",
    "SebulbaConfig",
    "SebulbaRun",
    "SebulbaSystem",
    "env_factory",
    "host_act",
    "host_rollout",
    "rollout_keys",
    "run",
    "steps_per_update",
    "train",
]
