"""Sebulba: host environments stepped by actor threads, device learners (the shared core)."""

from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.system import HostCarry, host_rollout, make_act, rollout_keys, run
from podracer.sebulba.train import LOOP, SebulbaSystem, env_factory, steps_per_update, train

__all__ = [
    "LOOP",
    "HostCarry",
    "SebulbaConfig",
    "SebulbaSystem",
    "env_factory",
    "host_rollout",
    "make_act",
    "rollout_keys",
    "run",
    "steps_per_update",
    "train",
]
