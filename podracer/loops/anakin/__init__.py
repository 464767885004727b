"""Anakin: environment, acting and learning compiled into one program on every device.

Hessel et al., 2021, "Podracer architectures for scalable reinforcement learning",
https://arxiv.org/abs/2104.06272, section 3.

One call of the compiled step does ``updates_per_call`` updates. Inside it, per device::

    shard_map over DATA_AXIS (1-D mesh of all devices)
      vmap over seeds (independent runs)
        lax.scan over updates
          rollout: lax.scan over time of (agent.act on [B/D] envs, vmap(env.step))
          learner.update (THE shared core; gradients pmean-ed over DATA_AXIS)

Params, optimizer state and keys are replicated; environment state is split along the
environment axis. The carried state is donated, metrics are reduced on device.

The package, by role (as :mod:`podracer.loops.sebulba`'s): ``config.py`` the loop's sizes
(:class:`AnakinConfig`); ``state.py`` the state and metrics of the compiled program and their
layout on the mesh; ``program.py`` the program itself (the mesh, one member's update, the step of
``k`` updates, the initial state) built into an :class:`Anakin` system (:func:`build_system`);
``system.py`` the system and its host loop (:func:`run`: the schedule of calls, the reports between
them); ``loop.py`` Anakin as a loop of the registry (:data:`LOOP`, :func:`build`, :func:`train`).
"""

from podracer.loops.anakin.config import AnakinConfig
from podracer.loops.anakin.loop import LOOP, build, place_members, probe, train
from podracer.loops.anakin.program import (
    build_system,
    checked_mesh,
    env_checks_vma,
    make_one_update,
    with_periodic,
)
from podracer.loops.anakin.state import AnakinState, UpdateMetrics, state_layout
from podracer.loops.anakin.system import (
    MAX_STEPS_PER_CALL,
    Anakin,
    call_schedule,
    choose_updates_per_call,
    run,
)
from podracer.loops.base import Members, Periodic, RunResult
from podracer.loops.common import params_checksum

__all__ = [
    "LOOP",
    "MAX_STEPS_PER_CALL",
    "Anakin",
    "AnakinConfig",
    "AnakinState",
    "Members",
    "Periodic",
    "RunResult",
    "UpdateMetrics",
    "build",
    "build_system",
    "call_schedule",
    "checked_mesh",
    "choose_updates_per_call",
    "env_checks_vma",
    "make_one_update",
    "params_checksum",
    "place_members",
    "probe",
    "run",
    "state_layout",
    "train",
    "with_periodic",
]
