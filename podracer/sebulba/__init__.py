"""Sebulba: host environments stepped by actor threads, device learners (the shared core)."""

from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.system import SebulbaResult, host_rollout, rollout_keys, run

__all__ = ["SebulbaConfig", "SebulbaResult", "host_rollout", "rollout_keys", "run"]
