"""Sebulba: host environments stepped by actor threads, device learners (the shared core).

The package, by role (as :mod:`podracer.loops.anakin`'s): ``config.py`` the loop's devices, threads
and sizes (:class:`SebulbaConfig`); ``members.py`` the members' state on the learner mesh;
``actors.py`` the actors; ``learner.py`` the learner; ``pipeline.py`` the host plumbing between them
(the stop signal, the params slot, the trajectory queues); ``shared.py`` what the roles of a run
share (:class:`SebulbaRun`); ``system.py`` the system that wires them (:func:`compile_run`,
:func:`run`); ``loop.py`` Sebulba as a loop of the registry (:data:`LOOP`, :func:`build`,
:func:`train`).
"""

from podracer.loops.sebulba.actors import (
    AsyncCollector,
    actor_role,
    host_act,
    host_rollout,
    member_act,
    rollout_keys,
)
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.learner import learner_role
from podracer.loops.sebulba.loop import (
    LOOP,
    SebulbaSystem,
    build,
    build_system,
    env_factory,
    steps_per_update,
    train,
)
from podracer.loops.sebulba.members import SebulbaState
from podracer.loops.sebulba.pipeline import Stopped
from podracer.loops.sebulba.shared import Role, SebulbaRun, Timers
from podracer.loops.sebulba.system import compile_run, run, summarise

__all__ = [
    "LOOP",
    "AsyncCollector",
    "Role",
    "SebulbaConfig",
    "SebulbaRun",
    "SebulbaState",
    "SebulbaSystem",
    "Stopped",
    "Timers",
    "actor_role",
    "build",
    "build_system",
    "compile_run",
    "env_factory",
    "host_act",
    "host_rollout",
    "learner_role",
    "member_act",
    "rollout_keys",
    "run",
    "steps_per_update",
    "summarise",
    "train",
]
