"""What the roles of one Sebulba run share: :class:`SebulbaRun` (the compiled update and act,
the state, the params slot, the trajectory queues, the history), the :data:`Role` type and the
host :class:`Timers`."""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from podracer.loops.base import Periodic
from podracer.loops.common import train_record
from podracer.loops.recipe import Recipe
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.members import SebulbaState
from podracer.loops.sebulba.pipeline import Lifetime, ParamsSlot, TrajectoryQueue
from podracer.parallel import (
    local_copy,
)


class Timers:
    """Seconds spent per named phase (host side)."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def add(self, name: str, start: float) -> float:
        now = time.perf_counter()
        self.seconds[name] += now - start
        return now


@dataclasses.dataclass
class SebulbaRun:
    """One Sebulba run: what its roles share (host side).

    Made by the compile role (:func:`compile_run`). The actor roles and the learner role run in
    threads and meet only in ``slot`` (params: learner -> actors) and ``queues`` (trajectories:
    actor ``i`` -> learner); ``lifetime`` stops them all and keeps the first error. The learner
    role replaces ``state`` after every update, and each update *donates* the state it was
    given: any other role (an evaluator, a reanalyser) reads the params from ``slot.get()``
    (a copy per actor device, with its version), never ``state``."""

    recipe: Recipe
    config: SebulbaConfig
    make_env: Callable[[int], Any]
    seed: int
    actor_devices: list
    first_actor: int  # the global index of this process's actor 0
    learner_mesh: Any
    traj_sharding: NamedSharding
    update: Any  # compiled: (SebulbaState, trajectories of every actor) -> (state, metrics [P])
    act: Any  # the actors' jitted act (member_act), compiled on every actor device
    acting: Any  # jitted: SebulbaState -> (acting params [P], hparams [P])
    state: SebulbaState
    start_update: int
    compile_s: float
    seed_offsets: np.ndarray  # [P]: member p runs seed + seed_offsets[p]
    hooks: Any = None
    periodic: Periodic | None = None
    tournament: Any = None  # jitted periodic.apply_scored on the learner mesh (donated state)
    lifetime: Lifetime = dataclasses.field(default_factory=Lifetime)
    watchdog: Any = None  # a parallel.Watchdog while the roles run (armed with several processes)

    def __post_init__(self):
        config = self.config
        self.done_updates = self.start_update
        self.slot = ParamsSlot(self.lifetime)
        self.queues = [TrajectoryQueue(self.lifetime, config.queue_size) for _ in self.actors]
        self.actor_timers = [Timers() for _ in self.actors]
        self.actor_steps = [0] * config.num_actors
        self.learner_timers = Timers()
        self.history: dict[str, list] = collections.defaultdict(list)
        self.lags: list[int] = []
        self.events: list[dict[str, Any]] = []  # the Periodic records, in order
        self.reported = 0  # events handed to progress so far
        self.start = time.perf_counter()

    @property
    def actors(self) -> range:
        return range(self.config.num_actors)

    @property
    def num_members(self) -> int:
        return self.config.num_seeds

    @property
    def num_updates(self) -> int:
        return self.recipe.num_updates

    def publish(self, version: int) -> None:
        """The acting params and hyper-parameters of ``state`` into the slot, one copy per actor
        device (the learner's state is donated to the next update: the actors must not hold
        its buffers)."""
        acting = jax.tree.map(local_copy, self.acting(self.state))
        copies = {d: jax.device_put(acting, d, may_alias=False) for d in set(self.actor_devices)}
        self.slot.publish(copies, version)

    def new_events(self) -> list[dict[str, Any]]:
        """The Periodic records not yet handed to progress (the calling thread's)."""
        events = self.events[self.reported :]
        self.reported += len(events)
        return events

    def record(self) -> dict[str, Any]:
        """The ``"train"`` record (:func:`podracer.loops.common.train_record`) of the updates
        done so far; its episode returns (per member) are over the last 5 updates."""
        history = {name: list(values) for name, values in list(self.history.items())}
        run_updates = len(history.get("episodes", ()))
        recent = slice(max(0, run_updates - 5), run_updates)
        zeros = np.zeros(self.num_members)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return train_record(
            updates=self.start_update + run_updates,
            num_updates=self.num_updates,
            start_update=self.start_update,
            steps_per_update=self.recipe.steps_per_update,
            num_members=self.num_members,
            start=self.start,
            returns=np.sum([zeros, *history.get("return_sum", [])[recent]], axis=0),
            episodes=np.sum([zeros, *history.get("episodes", [])[recent]], axis=0),
            metrics={
                n: float(np.mean(v[-1])) for n, v in history.items() if n not in _BOOKKEEPING and v
            },
            actor_sps=sum(self.actor_steps) / elapsed,
            policy_lag=float(np.mean(self.lags[-5 * self.config.num_actors :]))
            if self.lags
            else None,
            queue_size=history["queue_size"][-1] if history.get("queue_size") else None,
        )


Role = Callable[[SebulbaRun], None]


"""A thread of a run: a function of the :class:`SebulbaRun` (its errors stop the run)."""


_BOOKKEEPING = ("episodes", "return_sum", "length_sum", "queue_size")
