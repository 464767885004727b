"""Sebulba: host actor threads stepping environments, device learners (Hessel et al., 2021,
https://arxiv.org/abs/2104.06272, section 4).

A run is a few roles, each one function (host side; :mod:`podracer.loops.sebulba.pipeline` has the
waits and the stop signal)::

    compile (calling thread)    the learner mesh, the learner step compiled for the shapes of
                                the rollout (jax.eval_shape), the actors' act warmed up
    actor i (thread, device d)  params slot -> step_and_record on the host environment ...
                                -> Trajectory [T, B] -> device_put onto the learner mesh,
                                split along B -> its bounded queue
    learner (thread)            one trajectory from every actor (in actor order) ->
                                jit(shard_map(learner.update)) over the learner mesh ->
                                publish params (version = updates done)
    summarise (calling thread)  the run's numbers

:func:`run` starts the roles as threads of one :class:`SebulbaRun`; a new role (evaluation,
reanalyse) is one more function of a :class:`SebulbaRun` given to ``run(extra_roles=...)``.

``learner.update`` is the one :func:`podracer.core.learner.make_learner` built — the same that
Anakin runs; only the mesh around it differs. Acting is
:func:`podracer.core.acting.step_and_record`, as in Anakin's rollout.

Several processes (after :func:`podracer.parallel.initialize`): every process runs its own actors
on its own actor devices; the learner devices of every process form one learner mesh, and each
update takes actor ``i``'s trajectory of every process as one global batch (process ``p``'s
environments are columns ``[p * B, (p + 1) * B)``). Every process runs the same compiled update,
so the params are the same on all of them.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer.core.acting import Acted, RolloutState, reset_and_act, step_and_record
from podracer.core.learner.buffers import break_streams
from podracer.core.learner.skeleton import one_device, per_device
from podracer.core.learner.skeleton import state_specs as learner_specs
from podracer.core.rollout import trajectory_shape
from podracer.errors import ConfigValueError
from podracer.loops.base import Members, Periodic, RunResult
from podracer.loops.common import over_members, summary, train_record
from podracer.loops.recipe import Recipe
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.pipeline import Lifetime, ParamsSlot, Stopped, TrajectoryQueue
from podracer.parallel import (
    DATA_AXIS,
    Watchdog,
    barrier,
    data_mesh,
    devices_by_local_ids,
    global_array,
    local_copy,
)
from podracer.types import Agent, LearnerState, Trajectory
from podracer.util import ops, seeding

JOIN_TIMEOUT_S = 10.0


@functools.partial(jax.jit, static_argnums=1)
def rollout_keys(key: jax.Array, rollout_len: int) -> jax.Array:
    """The acting keys of one rollout ``[T]``: the schedule of
    :func:`podracer.core.rollout.make_rollout` (split per step, first half to ``act``). One
    dispatch (op by op, the splits cost a millisecond or more per rollout)."""
    return _rollout_keys(key, rollout_len)


def _rollout_keys(key: jax.Array, rollout_len: int) -> jax.Array:
    return jax.vmap(lambda k: jax.random.split(k)[0])(jax.random.split(key, rollout_len))


@functools.partial(jax.jit, static_argnums=2)
def member_rollout_keys(keys: jax.Array, rollout: int, rollout_len: int) -> jax.Array:
    """``[P, T]``: every member's acting keys of rollout ``rollout`` (its actor key ``[P]``
    folded with ``rollout``, then :func:`rollout_keys`), in one dispatch."""
    return jax.vmap(lambda k: _rollout_keys(jax.random.fold_in(k, rollout), rollout_len))(keys)


_fold_in = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))  # [P] keys, one dispatch


class RolloutStats(NamedTuple):
    """The episodes that ended in a rollout, per member ``[P]``."""

    episodes: np.ndarray  # int [P]
    return_sum: np.ndarray  # float [P]
    length_sum: np.ndarray  # int [P]


def member_stats(done, returns, lengths, members: int) -> RolloutStats:
    """:class:`RolloutStats` ``[members]`` of ``[T, members * E]`` episode flags, returns and
    lengths (member-major environments; entries where ``done`` is False are ignored)."""
    done = np.asarray(done, bool).reshape(done.shape[0], members, -1)
    returns = np.where(done, np.asarray(returns).reshape(done.shape), 0.0)
    lengths = np.where(done, np.asarray(lengths).reshape(done.shape), 0)
    return RolloutStats(
        done.sum(axis=(0, 2)),
        returns.sum(axis=(0, 2), dtype=np.float64),
        lengths.sum(axis=(0, 2), dtype=np.int64),
    )


class Timers:
    """Seconds spent per named phase (host side)."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def add(self, name: str, start: float) -> float:
        now = time.perf_counter()
        self.seconds[name] += now - start
        return now


@jax.jit
def _stack_on_device(rows: list) -> Any:
    """``[T]`` pytrees of ``[B, ...]`` device arrays -> one pytree ``[T, B, ...]``, in one
    dispatch (fetching every step's leaves one by one costs ~10 us a leaf)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *rows)


def host_act(agent: Agent):
    """The actors' jitted act: ``act(params, actor_state, obs, done, (keys, t)) -> Acted``, the
    one :func:`podracer.core.acting.reset_and_act` (the reset rule) with the key ``keys[t]``
    taken inside the same dispatch. ``params`` and ``keys`` live on the actor's device, where the
    computation runs; ``obs`` and ``done`` go in as NumPy (placed beside the committed params:
    an explicit ``device_put`` first costs a dispatch of its own)."""
    act = reset_and_act(agent)

    def step(params, actor_state, obs, done, keys_and_step):
        keys, t = keys_and_step
        return act(params, actor_state, obs, done, keys[t])

    return jax.jit(step)


def host_rollout(
    env,
    act,
    params,
    carry: RolloutState,
    keys,
    timers: Timers | None = None,
    members: int = 1,
    lifetime: Lifetime | None = None,
) -> tuple[RolloutState, Trajectory, RolloutStats]:
    """One rollout of ``T = keys.shape[-1]`` steps on a (sync) host environment: ``T`` calls of
    :func:`podracer.core.acting.step_and_record` with ``act`` (:func:`host_act`) and the host
    environment's ``step``; the carry's ``env_state`` is ``()`` (the environment keeps its own).

    Returns the carry, the NumPy ``Trajectory [T, B]`` (the layout Anakin's rollout emits,
    ``actor_state`` included) and the statistics of the episodes that ended (per member, the
    environments member-major: ``[members]``; ``keys`` ``[members, T]`` with
    :func:`member_act`); a ``lifetime`` that is stopping ends it between two steps
    (:class:`~podracer.loops.sebulba.pipeline.Stopped`), so that a run's threads stop within a step
    however long a rollout of many members takes. Only the action
    comes back from the device at each step; the rest of the actor's output stays there until
    the rollout ends and is fetched in one dispatch.
    """
    timers = timers or Timers()

    def timed_act(params, actor_state, obs, done, key) -> Acted:
        start = time.perf_counter()
        acted = act(params, actor_state, obs, done, key)
        np.asarray(acted.out.action)  # waits for it (jax.Array keeps the NumPy copy)
        timers.add("inference", start)
        return acted

    def env_step(env_state, action, env_key):
        del env_key
        start = time.perf_counter()
        ts = env.step(np.asarray(action))
        timers.add("env_step", start)
        return env_state, ts

    steps, infos = [], []
    for t in range(keys.shape[-1]):
        if lifetime is not None and lifetime.stopping:  # a stop is seen within one step
            raise Stopped
        carry, step, info = step_and_record(timed_act, env_step, params, carry, (keys, t), None)
        steps.append(step)
        infos.append(info)
    start = time.perf_counter()
    behaviour, actor_states = jax.device_get(
        _stack_on_device([(step.behaviour, step.actor_state) for step in steps])
    )
    timers.add("inference", start)
    traj = Trajectory(
        obs=jax.tree.map(lambda *xs: np.stack(xs), *[step.obs for step in steps]),
        reward=np.stack([step.reward for step in steps]).astype(np.float32),
        terminated=np.stack([step.terminated for step in steps]).astype(bool),
        truncated=np.stack([step.truncated for step in steps]).astype(bool),
        bootstrap_obs=jax.tree.map(lambda *xs: np.stack(xs), *[s.bootstrap_obs for s in steps]),
        behaviour=behaviour,
        actor_state=actor_states,
    )
    return carry, traj, _episode_stats(infos, members)


def _episode_stats(infos: list, members: int = 1) -> RolloutStats:
    """The statistics ``[members]`` of the episodes that ended in a rollout's steps (their
    ``EpisodeInfo``, or None from an environment that reports none), counted once per rollout
    instead of with a few small NumPy reductions at every step."""
    infos = [info for info in infos if info is not None]
    if not infos:
        zeros = np.zeros(members, np.int64)
        return RolloutStats(zeros, zeros.astype(np.float64), zeros)
    done = np.stack([np.asarray(info.done) for info in infos])
    returns = np.stack([np.asarray(info.episode_return) for info in infos])
    lengths = np.stack([np.asarray(info.episode_length) for info in infos])
    return member_stats(done, returns, lengths, members)


class AsyncCollector:
    """Builds ``Trajectory [T, num_envs]`` from envpool's async mode (``recv`` gives a batch of
    ``batch_size`` env ids, ``send`` answers them).

    Each env keeps its own sequence: the transition of env ``i`` is complete when ``i`` comes
    back from ``recv`` with the result of the action it was sent. When every env has ``T``
    complete transitions, the first ``T`` of each form the trajectory (time-major, env order);
    later ones wait for the next trajectory. Each env's actor state is kept here (NumPy rows)
    and reset where its episode starts, by the actors' one ``act`` (:func:`host_act`: the
    reset rule of :func:`podracer.core.acting.reset_and_act`). The statistics of a rollout are
    those of the episodes that end inside its trajectory (an episode that ends in a transition
    held back for the next trajectory counts there), so every episode counts once, with the
    trajectory it is in.

    The book-keeping is NumPy over env ids (no Python loop over the rows of a batch): every
    field has a buffer ``[capacity, num_envs, ...]`` and env ``i`` writes its next transition
    at row ``count[i]`` (its complete transitions so far): the acting half (observation, the
    actor's output and state) when it acts, the environment's half (reward, flags, final
    observation, episode statistics) when its result comes back, which completes the row.
    The ids of one ``recv`` are distinct, so one scatter per field writes the whole batch.
    """

    def __init__(self, env, rollout_len: int, initial_actor_state: Any = (), members: int = 1):
        self.env = env
        self.rollout_len = rollout_len
        self.members = members  # statistics per member (member-major environments)
        n = env.num_envs
        # writable NumPy rows (device_get may give read-only views of device buffers)
        self.actor_state = jax.tree.map(np.array, jax.device_get(initial_actor_state))
        self.count = np.zeros(n, np.int64)  # complete transitions of each env in the buffers
        self.acting = np.zeros(n, bool)  # acted in row count[i], waiting for its result
        self.buffers: Any = None  # made at the first act, when the shapes are known
        self.calls = 0  # recv batches acted on: the acting key of call c is fold_in(key, c)
        self.key_block = async_key_block(n, env.batch_size, rollout_len)
        env.async_reset()

    def _grow(self, needed: int) -> None:
        """Room for row ``needed`` of every env (an env may run ahead of the slowest)."""
        capacity = jax.tree.leaves(self.buffers)[0].shape[0]
        if needed < capacity:
            return
        capacity = max(2 * capacity, needed + 1)

        def grow(x):
            bigger = np.zeros((capacity, *x.shape[1:]), x.dtype)
            bigger[: x.shape[0]] = x
            return bigger

        self.buffers = jax.tree.map(grow, self.buffers)

    def _make_buffers(self, ts, out, used) -> None:
        n, capacity = self.env.num_envs, 2 * self.rollout_len

        def like(x, dtype=None):
            x = np.asarray(x)
            return np.zeros((capacity, n, *x.shape[1:]), dtype or x.dtype)

        self.buffers = dict(
            obs=like(ts.obs),
            behaviour=jax.tree.map(like, out),
            actor_state=jax.tree.map(like, used),
            reward=like(ts.reward, np.float32),
            terminated=like(ts.terminated, bool),
            truncated=like(ts.truncated, bool),
            bootstrap_obs=like(ts.final_obs),
            episode_done=like(ts.terminated, bool),
            episode_return=like(ts.reward, np.float64),
            episode_length=like(ts.reward, np.int64),
        )

    def _write(self, acted: list, results: list) -> None:
        """Writes a rollout's batches into the buffers: one scatter per field for all of them
        (``acted``: ``(ids, rows, {field: [b, ...]})`` of the acting half; ``results``: the same
        of the environment's half)."""
        for log in (acted, results):
            if not log:
                continue
            ids = np.concatenate([entry[0] for entry in log])
            rows = np.concatenate([entry[1] for entry in log])
            self._grow(int(rows.max()))
            fields = [entry[2] for entry in log]
            for name in fields[0]:
                parts = [f[name] for f in fields]
                leaves = [jax.tree.leaves(part) for part in parts]
                for i, buf in enumerate(jax.tree.leaves(self.buffers[name])):
                    buf[rows, ids] = np.concatenate([leaf[i] for leaf in leaves])

    def rollout(self, act, params, key, timers: Timers, lifetime: Lifetime | None = None):
        T = self.rollout_len
        block_start = self.calls  # the keys of calls block_start .. block_start + key_block - 1
        keys = async_keys(key, block_start, self.key_block)
        acted, results = [], []  # written into the buffers once, when the rollout is complete
        while self.buffers is None or self.count.min() < T:
            if lifetime is not None and lifetime.stopping:  # a stop is seen within one recv
                raise Stopped
            start = time.perf_counter()
            ts, env_ids = self.env.recv()
            start = timers.add("env_step", start)
            back = self.acting[env_ids]  # these envs' results complete their rows
            if back.any():
                ids = env_ids if back.all() else env_ids[back]
                part = ts if ids is env_ids else jax.tree.map(lambda x, b=back: x[b], ts)
                fields = dict(
                    reward=part.reward,
                    terminated=part.terminated,
                    truncated=part.truncated,
                    bootstrap_obs=part.final_obs,
                )
                if part.info is not None:
                    done = np.asarray(part.info.done)
                    fields.update(
                        episode_done=done,
                        episode_return=np.where(done, part.info.episode_return, 0.0),
                        episode_length=np.where(done, part.info.episode_length, 0),
                    )
                results.append((ids, self.count[ids], fields))
                self.count[ids] += 1
            if self.calls - block_start == self.key_block:  # a longer rollout than expected
                block_start = self.calls
                keys = async_keys(key, block_start, self.key_block)
            states = jax.tree.map(lambda x, ids=env_ids: x[ids], self.actor_state)
            # runs beside the params
            step = act(params, states, ts.obs, ts.done, (keys, self.calls - block_start))
            # np.asarray per leaf: ~1 us each where jax.device_get costs ~10 (the rows are
            # copied into the buffers when the rollout is complete, so read-only views do)
            step = jax.tree.map(np.asarray, step)
            used, states, out = step.actor_state, step.next_actor_state, step.out
            self.calls += 1
            start = timers.add("inference", start)
            self.env.send(out.action, env_ids)
            timers.add("env_step", start)

            if self.buffers is None:
                self._make_buffers(ts, out, used)
            acted.append(
                (env_ids, self.count[env_ids], dict(obs=ts.obs, behaviour=out, actor_state=used))
            )
            for s, x in zip(
                jax.tree.leaves(self.actor_state), jax.tree.leaves(states), strict=True
            ):
                s[env_ids] = x
            self.acting[env_ids] = True
        self._write(acted, results)
        buf = self.buffers

        first = jax.tree.map(lambda x: x[:T].copy(), buf)
        # the rows after the first T (and the row in progress) move to the front
        for x in jax.tree.leaves(buf):
            x[: x.shape[0] - T] = x[T:]
        self.count -= T
        traj = Trajectory(
            obs=first["obs"],
            reward=first["reward"],
            terminated=first["terminated"],
            truncated=first["truncated"],
            bootstrap_obs=first["bootstrap_obs"],
            behaviour=first["behaviour"],
            actor_state=first["actor_state"],
        )
        stats = member_stats(
            first["episode_done"], first["episode_return"], first["episode_length"], self.members
        )
        return traj, stats


def async_key_block(num_envs: int, batch_size: int, rollout_len: int) -> int:
    """Acting keys an async actor makes at once: enough for the ``recv`` batches of one
    rollout (``rollout_len`` steps of every env, ``batch_size`` envs a batch) and some more."""
    return 2 * -(-rollout_len * num_envs // batch_size) + 8


@functools.partial(jax.jit, static_argnums=2)
def async_keys(key: jax.Array, start, count: int) -> jax.Array:
    """``[count]`` acting keys of async mode: ``fold_in(key, c)`` for the ``recv`` batches
    ``c = start, ..., start + count - 1``, in one dispatch instead of one per batch; ``[P,
    count]`` for a key per member ``[P]``."""

    def block(k):
        return jax.vmap(lambda c: jax.random.fold_in(k, c))(start + jnp.arange(count))

    return block(key) if key.ndim == 0 else jax.vmap(block)(key)


# --- the members -----------------------------------------------------------------------------


class SebulbaState(NamedTuple):
    """The state of a Sebulba run; every leaf has a leading member axis ``[P]`` (``[1]`` for a
    single member). What a checkpoint holds and what the hooks and a population see: the
    members' parts of Anakin's state (actors' environments start afresh on every run)."""

    learner: LearnerState  # on the learner mesh: replicated, a per-device agent state split
    hparams: dict[str, jax.Array]  # [P] each: the members' traced hyper-parameters
    periodic: Any = ()  # [P, ...]: the state of Periodic work (a population's lineage)


AgentOf = Callable[[dict[str, jax.Array]], tuple[Agent, Any]]
"""``agent_of(hparams) -> (agent, optimizer)`` of one member (traced hyper-parameters)."""


def agent_of(recipe: Recipe, members: Members | None) -> AgentOf:
    """The members' ``(agent, optimizer)`` by hyper-parameters: the recipe's for seeds alone."""
    if members is None:
        return lambda hparams: (recipe.agent, recipe.optimizer)
    return members.build


def member_act(agent_of: AgentOf, num_members: int, member_loop: str = "vmap"):
    """The actors' jitted act for ``num_members`` members: ``act((params [P], hparams [P]),
    actor_state, obs, done, (keys [P, K], t)) -> Acted``, where the environments (and the actor
    state's rows) are member-major ``[P * B]``: member ``p``'s ``B`` are acted on with its params
    and its key ``keys[p, t]`` by :func:`podracer.core.acting.reset_and_act`, every member in
    one call (:func:`podracer.loops.common.over_members`). One member computes exactly what
    :func:`host_act` computes."""

    def one(params, hparams, actor_state, obs, done, key):
        agent, _ = agent_of(hparams)
        return reset_and_act(agent)(params, actor_state, obs, done, key)

    def step(params_and_hparams, actor_state, obs, done, keys_and_step):
        params, hparams = params_and_hparams
        keys, t = keys_and_step

        def split(x):
            return x.reshape(num_members, x.shape[0] // num_members, *x.shape[1:])

        acted = over_members(one, num_members, member_loop)(
            params,
            hparams,
            jax.tree.map(split, actor_state),
            jax.tree.map(split, obs),
            split(done),
            keys[:, t],
        )
        return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), acted)

    return jax.jit(step)


def by_member(traj: Trajectory, members: int) -> Trajectory:
    """``[T, P * E, ...]`` NumPy -> ``[T, P, E, ...]`` (a view): the layout the learner mesh
    splits along ``E``, so that every learner device holds a share of every member's
    environments."""
    return jax.tree.map(lambda x: x.reshape(x.shape[0], members, -1, *x.shape[2:]), traj)


def recent_scores(history: dict[str, list], interval: int) -> np.ndarray:
    """``[P]``: each member's mean return over the episodes that ended in the last ``interval``
    updates (NaN for a member with none), every process's episodes counted (with several
    processes, every process calls this at the same update): a population's score on Sebulba,
    whose environments are host environments the program cannot evaluate in place
    (``docs/population.md``)."""
    episodes = np.sum(history["episodes"][-interval:], axis=0)
    returns = np.sum(history["return_sum"][-interval:], axis=0)
    if jax.process_count() > 1:
        episodes, returns = (
            multihost_utils.process_allgather(x).sum(axis=0) for x in (episodes, returns)
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(episodes > 0, returns / np.maximum(episodes, 1), np.nan).astype(np.float32)


# --- the run, in roles ----------------------------------------------------------------------


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


def compile_run(
    recipe: Recipe,
    config: SebulbaConfig,
    make_env: Callable[[int], Any],
    *,
    seed: int,
    devices: Sequence[jax.Device] | None = None,
    state: SebulbaState | None = None,
    start_update: int = 0,
    hooks: Any = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
) -> SebulbaRun:
    """The compile role: the learner mesh, the state (``state``, or a fresh one), the learner
    step compiled for the trajectories the actors will send (their shapes are
    ``jax.eval_shape`` of the rollout, :func:`podracer.core.rollout.trajectory_shape`) and the
    actors' act compiled on every actor device, all before any thread starts, so that compile
    time is measured apart. ``members`` (a sweep's, a population's) give each member its
    hyper-parameters; ``periodic`` (a population's tournament) runs between updates."""
    num_processes = jax.process_count()
    if devices is not None and num_processes > 1:
        raise ValueError(
            "devices= applies to single-process runs; with several processes, "
            "SebulbaConfig's device ids name every process's local devices"
        )
    devices = list(devices if devices is not None else jax.local_devices())
    learner_mesh = make_learner_mesh(config, devices)
    if not 0 <= start_update < recipe.num_updates:
        raise ConfigValueError(
            f"run: start_update={start_update} is not allowed: the run has "
            f"{recipe.num_updates} updates of {recipe.steps_per_update} steps "
            f"(total_timesteps={recipe.total_timesteps})"
        )
    num_members, loop = config.num_seeds, config.member_loop
    build = agent_of(recipe, members)
    traj_sharding = NamedSharding(learner_mesh, P(None, None, DATA_AXIS))
    specs, state_sharding = state_placement(recipe.agent, learner_mesh)

    def one_update(learner_state, hparams, traj):
        agent, optimizer = build(hparams)
        learner = recipe.learner(
            agent, optimizer, axis_name=DATA_AXIS, envs_per_device=envs_per_device(config)
        )
        return learner.update(learner_state, traj)

    def update_all(state: SebulbaState, trajs):
        traj = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=2), *trajs)  # [T, P, E]
        traj = jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0), traj)
        learner, metrics = over_members(one_update, num_members, loop)(
            state.learner, state.hparams, traj
        )
        return state._replace(learner=learner), metrics

    update = jax.jit(
        jax.shard_map(
            update_all,
            mesh=learner_mesh,
            in_specs=(specs, P(None, None, DATA_AXIS)),
            out_specs=(specs, P()),
        ),
        donate_argnums=0,
    )
    t0 = time.perf_counter()
    if state is None:
        state = init_state(recipe, config, seed, devices, members=members, periodic=periodic)
    else:  # a no-op for a state made by init_state or restored into it
        state = jax.tree.map(
            lambda sharding, part: jax.tree.map(lambda x: _placed(x, sharding), part),
            state_sharding,
            state,
            is_leaf=lambda x: isinstance(x, NamedSharding),
        )
        if start_update:  # resumed: the actors' environments start afresh, so do the streams
            state = jax.jit(_break_streams, out_shardings=state_sharding)(state)

    def acting_params(state: SebulbaState):
        def one(params, agent_state, hparams):
            agent, _ = build(hparams)
            return agent.actor_params(params, one_device(agent, agent_state))

        params = over_members(one, num_members, loop)(
            state.learner.params, state.learner.agent_state, state.hparams
        )
        return params, state.hparams

    acting = jax.jit(acting_params)
    # One actor's columns of every process, as the rollout records them, member by member.
    one_member = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), acting.eval_shape(state)[0]
    )
    shapes = trajectory_shape(
        recipe.agent,
        one_member,
        recipe.env_spec,
        config.envs_per_actor * num_processes,
        config.rollout_len,
    )
    shapes = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(
            (s.shape[0], num_members, *s.shape[1:]), s.dtype, sharding=traj_sharding
        ),
        shapes,
    )
    update = update.lower(state, (shapes,) * config.num_actors).compile()
    tournament = None
    if periodic is not None:
        tournament = jax.jit(
            periodic.apply_scored, donate_argnums=0, out_shardings=(state_sharding, None)
        )
    act = member_act(build, num_members, loop)
    actor_devices = [devices[i] for i in config.actor_device_ids]
    params = jax.tree.map(local_copy, acting(state))
    for device in set(actor_devices):
        warm_up_actor(recipe.agent, act, config, recipe.example_obs(), params, device)
    compile_s = time.perf_counter() - t0
    barrier("the Sebulba learner compiled")  # the first update's collectives start together
    return SebulbaRun(
        recipe=recipe,
        config=config,
        make_env=make_env,
        seed=seed,
        actor_devices=actor_devices,
        first_actor=jax.process_index() * config.num_actors,
        learner_mesh=learner_mesh,
        traj_sharding=traj_sharding,
        update=update,
        act=act,
        acting=acting,
        state=state,
        start_update=start_update,
        compile_s=compile_s,
        seed_offsets=member_offsets(config, members),
        hooks=hooks,
        periodic=periodic,
        tournament=tournament,
    )


def _placed(x, sharding: NamedSharding):
    """``x`` on ``sharding``: as it is where it is there already (with several processes a
    transfer of a global array is not allowed, and a ``[P]`` key array made with ``P()`` reports
    ``P(None)``)."""
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
    return jax.device_put(x, sharding)


def _break_streams(state: SebulbaState) -> SebulbaState:
    return state._replace(
        learner=state.learner._replace(replay=break_streams(state.learner.replay))
    )


def member_offsets(config: SebulbaConfig, members: Members | None) -> np.ndarray:
    """``[P]``: member ``p`` runs seed ``seed + offsets[p]`` (its environments, its actors'
    keys, its learner's)."""
    if members is None:
        return np.arange(config.num_seeds)
    offsets = np.asarray(members.seed_offsets)
    if offsets.shape != (config.num_seeds,):
        raise ConfigValueError(
            f"SebulbaConfig.num_seeds={config.num_seeds} is not allowed with "
            f"{offsets.shape[0]} members: give the members' count"
        )
    return offsets


def warm_up_actor(agent: Agent, act, config: SebulbaConfig, example_obs, params, device) -> None:
    """Compiles the actors' act for ``device`` with the exact signature of every later call:
    params and keys on the device, the observations and episode ends as NumPy, the step index a
    Python int (another signature would compile again in the thread); and, in sync mode, the
    rollout's final stacking. The act compiles inside ``ops.unrolled_threefry()``: the same
    bits, and on a CPU about half the time per call."""
    members = config.num_seeds
    acting_envs = members * (config.async_batch_size or config.envs_per_actor)
    obs = jax.tree.map(lambda x: np.zeros((acting_envs, *x.shape), x.dtype), example_obs)
    done = np.zeros(acting_envs, bool)
    member_keys = jax.random.split(jax.random.key(0), members)
    if config.async_batch_size:  # a block of keys, one per recv: AsyncCollector.rollout
        block = async_key_block(config.envs_per_actor, config.async_batch_size, config.rollout_len)
        keys = async_keys(member_keys, 0, block)
        actor_state = jax.device_get(agent.initial_actor_state(acting_envs))
    else:
        keys = member_rollout_keys(member_keys, 0, config.rollout_len)
        actor_state = jax.device_put(agent.initial_actor_state(acting_envs), device)
    params, keys = jax.device_put((params, keys), device)
    with ops.unrolled_threefry():
        acted = act(params, actor_state, obs, done, (keys, 0))
        if not config.async_batch_size:  # the signature of every later step
            acted = act(params, acted.next_actor_state, obs, done, (keys, 0))
    if not config.async_batch_size:
        rows = [(acted.out, acted.actor_state)] * config.rollout_len
        jax.block_until_ready(_stack_on_device(rows))  # host_rollout's end


def actor_role(run: SebulbaRun, index: int) -> None:
    """Actor ``index`` of this process: its own host environments (every member's, side by
    side), acting on its actor device with the latest params (in deterministic mode, rollout
    ``k`` with those of update ``k - 1``), one trajectory ``[T, P, E]`` per rollout onto the
    learner mesh and into its queue."""
    config, agent = run.config, run.recipe.agent
    members = run.num_members
    device = run.actor_devices[index // config.actors_per_device]
    timers = run.actor_timers[index]
    actor = run.first_actor + index  # global: every actor of every process has its own seed
    env = run.make_env(actor)
    try:
        seeds = run.seed + run.seed_offsets + seeding.ACTOR_KEY_OFFSET
        key = jax.device_put(_actor_keys(seeds, actor), device)  # [P]
        initial = agent.initial_actor_state(env.num_envs)
        if env.is_async:
            collector = AsyncCollector(env, config.rollout_len, initial, members)
        else:
            carry = RolloutState((), env.reset(), jax.device_put(initial, device))
        rollout = run.start_update  # rollout k acts with the params of update k - 1
        while not run.lifetime.stopping:
            start = time.perf_counter()
            wanted = max(rollout - 1, run.start_update) if config.deterministic else None
            copies, version = run.slot.get(wanted)
            params = copies[device]
            timers.add("params_fetch", start)
            if env.is_async:
                traj, stats = collector.rollout(
                    run.act, params, _fold_in(key, rollout), timers, run.lifetime
                )
            else:
                keys = member_rollout_keys(key, rollout, config.rollout_len)
                carry, traj, stats = host_rollout(
                    env, run.act, params, carry, keys, timers, members, run.lifetime
                )
            start = time.perf_counter()
            # this process's columns of every member
            traj = global_array(run.traj_sharding, by_member(traj, members))
            timers.add("place_on_learners", start)
            run.queues[index].put((traj, version, stats))
            run.actor_steps[index] += env.num_envs * config.rollout_len
            rollout += 1
    finally:
        env.close()


@jax.jit
def _actor_keys(seeds, actor):
    return jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), actor))(seeds)


def learner_role(run: SebulbaRun) -> None:
    """The learner: one trajectory from every actor, in actor order, then the compiled update
    of every member over the learner mesh, the Periodic work when due (a population's
    tournament, scored by the members' recent returns), the hooks (checkpoints, evaluation) and
    the new params published; until the run's last update, which stops every role."""
    hooks, timers = run.hooks, run.learner_timers
    run.publish(run.start_update)
    for k in range(run.start_update, run.num_updates):
        if run.watchdog is not None:
            run.watchdog.beat()
        start = time.perf_counter()
        items = [queue.get() for queue in run.queues]
        start = timers.add("wait_for_data", start)
        run.state, metrics = run.update(run.state, tuple(item[0] for item in items))
        metrics = jax.device_get(metrics)  # [P] each
        timers.add("update", start)
        if hooks is not None:
            hooks.after_metrics({n: np.asarray(v)[:, None] for n, v in metrics.items()}, k)
        run.lags.extend(k - item[1] for item in items)
        for name in ("episodes", "return_sum", "length_sum"):
            run.history[name].append(sum(getattr(item[2], name) for item in items))
        for name, value in metrics.items():
            run.history[name].append(np.asarray(value, np.float64))
        run.history["queue_size"].append(float(np.mean([q.qsize() for q in run.queues])))
        if run.periodic is not None and (k + 1) % run.periodic.interval == 0:
            scores = recent_scores(run.history, run.periodic.interval)
            run.state, events = run.tournament(run.state, scores)
            for record in run.periodic.describe(jax.device_get(events), k + 1):
                run.events.append({"step": (k + 1) * run.recipe.steps_per_update, **record})
        run.publish(k + 1)
        run.done_updates = k + 1
        if hooks is not None:
            hooks.after_call(run.state, run.done_updates, run.done_updates == run.num_updates)
    run.lifetime.stop()


def summarise(run: SebulbaRun, elapsed: float) -> RunResult:
    """The summary role: the run's numbers (every process's episodes counted), the final
    state, the per-update history ``[P, updates]`` and the Periodic records."""
    hist = {
        name: np.stack([np.broadcast_to(v, (run.num_members,)) for v in values], axis=1)
        for name, values in run.history.items()
    }
    if jax.process_count() > 1:  # the episodes of every process's actors (every process is here)
        for name in ("episodes", "return_sum", "length_sum"):
            hist[name] = multihost_utils.process_allgather(hist[name]).sum(axis=0)
    numbers = summary(
        hist,
        steps_per_update=run.recipe.steps_per_update,
        num_updates=run.num_updates,
        start_update=run.start_update,
        num_members=run.num_members,
        elapsed=elapsed,
        compile_s=run.compile_s,
        params=jax.device_get(run.state.learner.params),
    )
    lags = run.lags
    numbers.update(
        env=run.recipe.env_id,
        arch="sebulba",
        seed=run.seed,
        devices=len(run.learner_mesh.devices.flat),
        processes=jax.process_count(),
        process=jax.process_index(),
        actor_sps=sum(run.actor_steps) / elapsed,
        per_actor_sps=[s / elapsed for s in run.actor_steps],
        policy_lag_mean=float(np.mean(lags)) if lags else None,
        policy_lag_max=int(np.max(lags)) if lags else None,
        actor_time_s=_mean_timers(run.actor_timers),
        learner_time_s=dict(run.learner_timers.seconds),
        queue_size_mean=float(np.mean(run.history["queue_size"])),
    )
    return RunResult(numbers, run.state, hist, tuple(run.events))


def run(
    recipe: Recipe,
    config: SebulbaConfig,
    make_env: Callable[[int], Any],
    *,
    seed: int,
    progress: Callable[[dict[str, Any]], None] | None = None,
    devices: Sequence[jax.Device] | None = None,
    state: SebulbaState | None = None,
    start_update: int = 0,
    hooks: Any = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
    extra_roles: Sequence[tuple[str, Role]] = (),
) -> RunResult:
    """Trains the recipe's agent (``config.num_seeds`` members of it) until its
    ``total_timesteps`` environment steps per member (all actors of every process together) are
    learnt from: :func:`compile_run`, then :func:`actor_role` for every actor and
    :func:`learner_role` (and ``extra_roles``, ``(name, role)`` pairs) as threads, then
    :func:`summarise`.

    ``make_env(actor_index)`` builds an actor's host environment: every member's
    ``config.envs_per_actor`` environments, member-major (:func:`podracer.loops.sebulba.env_factory`);
    the index is global (actor ``i`` of process ``p`` is ``p * num_actors + i``), so every actor
    of every process has its own seed. ``devices`` are the local devices that the config's
    device ids index (default ``jax.local_devices()``; with several processes the learner mesh
    takes the learner ids' devices of every process). ``total_timesteps`` counts the steps of
    every process. Any thread's error stops the run and is raised here; Ctrl-C stops every
    thread cleanly.

    A resumed run passes the restored ``state`` and the updates it had done as
    ``start_update``; the environments start afresh. ``hooks`` (see
    :class:`podracer.loops.RunHooks`) gets ``after_metrics`` and ``after_call(state, updates,
    last)`` in the learner thread after every update, and ``interrupted(state, updates)`` in the
    calling thread on Ctrl-C. The learner is the recipe's (its agent spec's ``make_learner`` in
    its layout) over the learner mesh's DATA_AXIS, vmapped over the members.

    Args:
      recipe: the run's :class:`~podracer.loops.Recipe`.
      config: the loop's devices and sizes (:class:`~podracer.loops.sebulba.SebulbaConfig`).
      make_env: ``make_env(actor_index) -> HostEnvironment`` (:func:`env_factory`).
      seed: the run seed (member ``p`` runs ``seed + seed_offsets[p]``).
      progress: receives a ``"train"`` record (:mod:`podracer.runs.logging`) about once a second,
        and every Periodic record (a population's ``"leaderboard"``).
      devices: the local devices the config's device ids index.
      state: a restored :class:`SebulbaState` to resume from; None starts afresh.
      start_update: the updates ``state`` holds.
      hooks: host work between updates (:class:`~podracer.loops.RunHooks`).
      members: a sweep's or a population's members (:class:`~podracer.loops.Members`).
      periodic: a population's tournament (:class:`~podracer.loops.Periodic`, its
        ``apply_scored``), every ``interval`` updates.
      extra_roles: more threads, ``(name, role)`` pairs, each ``role(run)`` given the
        :class:`SebulbaRun`.

    Returns:
      The :class:`~podracer.loops.RunResult`: the summary (with the actors' and the learner's
      timings, policy lag and queue sizes), the final state, the per-update metrics
      ``[P, updates]`` and the Periodic records.
    """
    sebulba = compile_run(
        recipe,
        config,
        make_env,
        seed=seed,
        devices=devices,
        state=state,
        start_update=start_update,
        hooks=hooks,
        members=members,
        periodic=periodic,
    )
    roles: list[tuple[str, Role]] = [
        (f"actor-{i}", functools.partial(actor_role, index=i)) for i in sebulba.actors
    ]
    roles += [("learner", learner_role), *extra_roles]
    threads = [sebulba.lifetime.thread(name, role, sebulba) for name, role in roles]
    sebulba.watchdog = Watchdog("the Sebulba learner step")
    sebulba.start = last_report = time.perf_counter()

    def report(train: bool) -> None:
        if progress is None:
            return
        for record in sebulba.new_events():
            progress(record)
        if train:
            progress(sebulba.record())

    try:
        for thread in threads:
            thread.start()
        while not sebulba.lifetime.wait(0.1):
            due = time.perf_counter() - last_report >= 1.0
            report(due)
            last_report = time.perf_counter() if due else last_report
    except KeyboardInterrupt:
        sebulba.lifetime.stop()
        _join(threads)
        if hooks is not None and not any(x.is_deleted() for x in jax.tree.leaves(sebulba.state)):
            hooks.interrupted(sebulba.state, sebulba.done_updates)
        raise
    finally:
        sebulba.watchdog.close()
    stuck = _join(threads, raise_stuck=False)
    sebulba.lifetime.raise_if_failed()  # a role's own error first: it is why the others stopped
    if stuck:
        raise RuntimeError(f"podracer threads did not stop within {JOIN_TIMEOUT_S} s: {stuck}")
    elapsed = time.perf_counter() - sebulba.start
    report(True)
    return summarise(sebulba, elapsed)


def make_learner_mesh(config: SebulbaConfig, devices: Sequence[jax.Device] | None = None):
    """The learner mesh: the learner device ids' devices of every process, over DATA_AXIS.
    ``devices`` are the local devices the ids index (default ``jax.local_devices()``)."""
    devices = list(devices if devices is not None else jax.local_devices())
    for field in ("actor_device_ids", "learner_device_ids"):
        bad = [i for i in getattr(config, field) if i >= len(devices)]
        if bad:
            raise ConfigValueError(
                f"SebulbaConfig.{field} has ids {bad} but only {len(devices)} local devices exist"
            )
    if jax.process_count() > 1:
        return data_mesh(devices_by_local_ids(config.learner_device_ids))
    return data_mesh([devices[i] for i in config.learner_device_ids])


def state_placement(agent: Agent, mesh) -> tuple[SebulbaState, SebulbaState]:
    """``(specs, shardings)`` of the :class:`SebulbaState` on the learner mesh: replicated, an
    agent state kept per device (and the replay buffers) split over DATA_AXIS behind the member
    axis."""
    specs = SebulbaState(
        learner=learner_specs(agent, P(), P(None, DATA_AXIS)), hparams=P(), periodic=P()
    )
    shardings = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), specs, is_leaf=lambda x: isinstance(x, P)
    )
    return specs, shardings


def init_state(
    recipe: Recipe,
    config: SebulbaConfig,
    seed: int,
    devices: Sequence[jax.Device] | None = None,
    *,
    members: Members | None = None,
    periodic: Periodic | None = None,
) -> SebulbaState:
    """The initial :class:`SebulbaState` of members ``seed + offsets[p]``, made on the learner
    mesh (with several processes, every process makes its part of it; a checkpoint restores
    into it in place). One member after another (``lax.map``), as Anakin's: a batched
    orthogonal initialiser's LAPACK call can deadlock jaxlib's CPU thread pool."""
    mesh = make_learner_mesh(config, devices)
    _, sharding = state_placement(recipe.agent, mesh)
    build = agent_of(recipe, members)
    offsets = member_offsets(config, members)
    hparams = {} if members is None else {n: np.asarray(v) for n, v in members.hparams.items()}

    def init_one(key, hparams, obs):
        agent, optimizer = build(hparams)
        learner = recipe.learner(
            agent, optimizer, axis_name=DATA_AXIS, envs_per_device=envs_per_device(config)
        )
        return per_device(agent, learner.init(key, obs), mesh.devices.size)

    def init_all(seeds, hparams, obs):
        keys = jax.vmap(jax.random.key)(seeds)
        one = functools.partial(init_one, obs=obs)
        learner = over_members(one, len(offsets), "map")(keys, hparams)
        lineage = ()
        if periodic is not None:  # its own keys, as Anakin's
            lineage = periodic.init(
                jax.vmap(lambda k: jax.random.fold_in(k, seeding.PERIODIC_STREAM))(keys)
            )
        # made inside the program, not forwarded from its input: with several processes a
        # forwarded input is a local array, not a global one on the learner mesh
        hparams = jax.tree.map(jnp.copy, hparams)
        return SebulbaState(learner, hparams, lineage)

    seeds = np.asarray(seed + offsets, np.uint32)
    return jax.jit(init_all, out_shardings=sharding)(seeds, hparams, recipe.example_obs())


def envs_per_device(config: SebulbaConfig) -> int:
    """The environments of one member in one learner device's share of an update's
    trajectories: every actor's of every process, split over the learner devices of every
    process."""
    return config.num_actors * config.envs_per_actor // len(config.learner_device_ids)


def _join(threads, raise_stuck: bool = True) -> list[str]:
    """Joins ``threads`` within ``JOIN_TIMEOUT_S`` together; the names of those still alive
    (an error naming them with ``raise_stuck``)."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for thread in threads:
        if thread.ident is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive and raise_stuck:
        raise RuntimeError(f"podracer threads did not stop within {JOIN_TIMEOUT_S} s: {alive}")
    return alive


def _mean_timers(timers: list[Timers]) -> dict[str, float]:
    names = sorted({name for t in timers for name in t.seconds})
    return {name: float(np.mean([t.seconds.get(name, 0.0) for t in timers])) for name in names}


_BOOKKEEPING = ("episodes", "return_sum", "length_sum", "queue_size")


__all__ = [
    "AsyncCollector",
    "Role",
    "SebulbaRun",
    "SebulbaState",
    "Stopped",
    "actor_role",
    "compile_run",
    "host_act",
    "host_rollout",
    "learner_role",
    "member_act",
    "rollout_keys",
    "run",
    "summarise",
]
