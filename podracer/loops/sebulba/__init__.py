"""Sebulba: host environments stepped by actor threads, device learners (the shared core)."""

from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.loop import LOOP, SebulbaSystem, env_factory, steps_per_update, train
from podracer.loops.sebulba.system import SebulbaRun, host_act, host_rollout, rollout_keys, run

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

_REMOVED = {
    "HostCarry": "an actor's carry is podracer.core.RolloutState((), timestep, actor_state)",
    "make_act": "the actors' jitted act is podracer.loops.sebulba.host_act(agent), called as "
    "act(params, actor_state, obs, done, (keys, t))",
}


def __getattr__(name: str):
    if name in _REMOVED:
        raise AttributeError(f"podracer.loops.sebulba.{name} was removed: {_REMOVED[name]}")
    raise AttributeError(f"module 'podracer.loops.sebulba' has no attribute {name!r}")
