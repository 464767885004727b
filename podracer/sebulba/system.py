"""Sebulba: host actor threads stepping environments, device learners (Hessel et al., 2021,
https://arxiv.org/abs/2104.06272, section 4).

A run is a few roles, each one function (host side; :mod:`podracer.sebulba.pipeline` has the
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

from podracer import ops, seeding
from podracer.config import ConfigValueError
from podracer.core.acting import Acted, RolloutState, reset_and_act, step_and_record
from podracer.core.learner import one_device, per_device
from podracer.core.learner import state_specs as learner_specs
from podracer.core.replay import break_streams
from podracer.core.rollout import trajectory_shape
from podracer.loops.common import RunResult, summary, train_record
from podracer.loops.recipe import Recipe
from podracer.parallel import (
    DATA_AXIS,
    Watchdog,
    barrier,
    data_mesh,
    devices_by_local_ids,
    global_array,
    local_copy,
)
from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.pipeline import Lifetime, ParamsSlot, Stopped, TrajectoryQueue
from podracer.types import Agent, LearnerState, Trajectory

JOIN_TIMEOUT_S = 10.0


@functools.partial(jax.jit, static_argnums=1)
def rollout_keys(key: jax.Array, rollout_len: int) -> jax.Array:
    """The acting keys of one rollout ``[T]``: the schedule of
    :func:`podracer.core.rollout.make_rollout` (split per step, first half to ``act``). One
    dispatch (op by op, the splits cost a millisecond or more per rollout)."""
    return jax.vmap(lambda k: jax.random.split(k)[0])(jax.random.split(key, rollout_len))


_fold_in = jax.jit(jax.random.fold_in)  # one dispatch per rollout, not several


class RolloutStats(NamedTuple):
    episodes: int
    return_sum: float
    length_sum: int


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
    env, act, params, carry: RolloutState, keys, timers: Timers | None = None
) -> tuple[RolloutState, Trajectory, RolloutStats]:
    """One rollout of ``len(keys)`` steps on a (sync) host environment: ``len(keys)`` calls of
    :func:`podracer.core.acting.step_and_record` with ``act`` (:func:`host_act`) and the host
    environment's ``step``; the carry's ``env_state`` is ``()`` (the environment keeps its own).

    Returns the carry, the NumPy ``Trajectory [T, B]`` (the layout Anakin's rollout emits,
    ``actor_state`` included) and the statistics of the episodes that ended. Only the action
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
    for t in range(keys.shape[0]):
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
    return carry, traj, _episode_stats(infos)


def _episode_stats(infos: list) -> RolloutStats:
    """The statistics of the episodes that ended in a rollout's steps (their ``EpisodeInfo``,
    or None from an environment that reports none), counted once per rollout instead of with
    a few small NumPy reductions at every step."""
    infos = [info for info in infos if info is not None]
    if not infos:
        return RolloutStats(0, 0.0, 0)
    done = np.stack([np.asarray(info.done) for info in infos])
    returns = np.stack([np.asarray(info.episode_return) for info in infos])
    lengths = np.stack([np.asarray(info.episode_length) for info in infos])
    return RolloutStats(
        int(done.sum()),
        float(returns[done].sum(dtype=np.float64)),
        int(lengths[done].sum(dtype=np.int64)),
    )


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

    def __init__(self, env, rollout_len: int, initial_actor_state: Any = ()):
        self.env = env
        self.rollout_len = rollout_len
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

    def rollout(self, act, params, key, timers: Timers):
        T = self.rollout_len
        block_start = self.calls  # the keys of calls block_start .. block_start + key_block - 1
        keys = async_keys(key, block_start, self.key_block)
        acted, results = [], []  # written into the buffers once, when the rollout is complete
        while self.buffers is None or self.count.min() < T:
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
        done = first["episode_done"]
        stats = RolloutStats(
            int(done.sum()),
            float(first["episode_return"][done].sum()),
            int(first["episode_length"][done].sum()),
        )
        return traj, stats


def async_key_block(num_envs: int, batch_size: int, rollout_len: int) -> int:
    """Acting keys an async actor makes at once: enough for the ``recv`` batches of one
    rollout (``rollout_len`` steps of every env, ``batch_size`` envs a batch) and some more."""
    return 2 * -(-rollout_len * num_envs // batch_size) + 8


@functools.partial(jax.jit, static_argnums=2)
def async_keys(key: jax.Array, start, count: int) -> jax.Array:
    """``[count]`` acting keys of async mode: ``fold_in(key, c)`` for the ``recv`` batches
    ``c = start, ..., start + count - 1``, in one dispatch instead of one per batch."""
    return jax.vmap(lambda c: jax.random.fold_in(key, c))(start + jnp.arange(count))


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
    update: Any  # compiled: (LearnerState, trajectories of every actor) -> (state, metrics)
    act: Any  # the actors' jitted act (host_act), compiled on every actor device
    state: LearnerState
    start_update: int
    compile_s: float
    hooks: Any = None
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
        self.start = time.perf_counter()

    @property
    def actors(self) -> range:
        return range(self.config.num_actors)

    @property
    def num_updates(self) -> int:
        return self.recipe.num_updates

    def acting_params(self, state: LearnerState):
        """What the actors act with (``Agent.actor_params`` of the first learner device's
        agent state)."""
        agent = self.recipe.agent
        return agent.actor_params(state.params, one_device(agent, state.agent_state))

    def publish(self, version: int) -> None:
        """The params of ``state`` into the slot, one copy per actor device (the learner's
        state is donated to the next update: the actors must not hold its buffers)."""
        params = jax.tree.map(local_copy, self.acting_params(self.state))
        copies = {d: jax.device_put(params, d, may_alias=False) for d in set(self.actor_devices)}
        self.slot.publish(copies, version)

    def record(self) -> dict[str, Any]:
        """The ``"train"`` record (:func:`podracer.loops.common.train_record`) of the updates
        done so far; its episode return is over the last 5 updates."""
        history = {name: list(values) for name, values in list(self.history.items())}
        run_updates = len(history.get("episodes", ()))
        recent = slice(max(0, run_updates - 5), run_updates)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return train_record(
            updates=self.start_update + run_updates,
            num_updates=self.num_updates,
            start_update=self.start_update,
            steps_per_update=self.recipe.steps_per_update,
            num_members=1,
            start=self.start,
            returns=np.asarray([sum(history.get("return_sum", [])[recent])]),
            episodes=np.asarray([sum(history.get("episodes", [])[recent])]),
            metrics={n: v[-1] for n, v in history.items() if n not in _BOOKKEEPING and v},
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
    state: LearnerState | None = None,
    start_update: int = 0,
    hooks: Any = None,
) -> SebulbaRun:
    """The compile role: the learner mesh, the learner state (``state``, or a fresh one), the
    learner step compiled for the trajectories the actors will send (their shapes are
    ``jax.eval_shape`` of the rollout, :func:`podracer.core.rollout.trajectory_shape`) and the
    actors' act compiled on every actor device, all before any thread starts, so that compile
    time is measured apart."""
    agent = recipe.agent
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
    traj_sharding = NamedSharding(learner_mesh, P(None, DATA_AXIS))
    specs, state_sharding = learner_placement(agent, learner_mesh)
    learner = recipe.learner(axis_name=DATA_AXIS, envs_per_device=envs_per_device(config))

    def update_all(state, trajs):
        traj = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *trajs)
        return learner.update(state, traj)

    update = jax.jit(
        jax.shard_map(
            update_all,
            mesh=learner_mesh,
            in_specs=(specs, P(None, DATA_AXIS)),
            out_specs=(specs, P()),
        ),
        donate_argnums=0,
    )
    t0 = time.perf_counter()
    if state is None:
        state = init_state(recipe, config, seed, devices)
    else:  # a no-op for a state made by init_state or restored into it
        state = jax.device_put(state, state_sharding)
        if start_update:  # resumed: the actors' environments start afresh, so do the streams
            state = jax.jit(
                lambda s: s._replace(replay=break_streams(s.replay)),
                out_shardings=state_sharding,
            )(state)

    def acting_params(state):
        return agent.actor_params(state.params, one_device(agent, state.agent_state))

    # One actor's columns of every process, as the rollout records them.
    shapes = trajectory_shape(
        agent,
        acting_params(state),
        recipe.env_spec,
        config.envs_per_actor * num_processes,
        config.rollout_len,
    )
    shapes = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=traj_sharding), shapes
    )
    update = update.lower(state, (shapes,) * config.num_actors).compile()
    act = host_act(agent)
    actor_devices = [devices[i] for i in config.actor_device_ids]
    params = jax.tree.map(local_copy, acting_params(state))
    for device in set(actor_devices):
        warm_up_actor(agent, act, config, recipe.example_obs(), params, device)
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
        state=state,
        start_update=start_update,
        compile_s=compile_s,
        hooks=hooks,
    )


def warm_up_actor(agent: Agent, act, config: SebulbaConfig, example_obs, params, device) -> None:
    """Compiles the actors' act for ``device`` with the exact signature of every later call:
    params and keys on the device, the observations and episode ends as NumPy, the step index a
    Python int (another signature would compile again in the thread); and, in sync mode, the
    rollout's final stacking. The act compiles inside ``ops.unrolled_threefry()``: the same
    bits, and on a CPU about half the time per call."""
    acting_envs = config.async_batch_size or config.envs_per_actor
    obs = jax.tree.map(lambda x: np.zeros((acting_envs, *x.shape), x.dtype), example_obs)
    done = np.zeros(acting_envs, bool)
    if config.async_batch_size:  # a block of keys, one per recv: AsyncCollector.rollout
        block = async_key_block(config.envs_per_actor, acting_envs, config.rollout_len)
        keys = async_keys(jax.random.key(0), 0, block)
        actor_state = jax.device_get(agent.initial_actor_state(acting_envs))
    else:
        keys = rollout_keys(jax.random.key(0), config.rollout_len)
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
    """Actor ``index`` of this process: its own host environments, acting on its actor device
    with the latest params (in deterministic mode, rollout ``k`` with those of update
    ``k - 1``), one trajectory per rollout onto the learner mesh and into its queue."""
    config, agent = run.config, run.recipe.agent
    device = run.actor_devices[index // config.actors_per_device]
    timers = run.actor_timers[index]
    actor = run.first_actor + index  # global: every actor of every process has its own seed
    env = run.make_env(actor)
    try:
        key = jax.random.key(run.seed + seeding.ACTOR_KEY_OFFSET)
        key = jax.device_put(jax.random.fold_in(key, actor), device)
        initial = agent.initial_actor_state(env.num_envs)
        if env.is_async:
            collector = AsyncCollector(env, config.rollout_len, initial)
        else:
            carry = RolloutState((), env.reset(), jax.device_put(initial, device))
        rollout = run.start_update  # rollout k acts with the params of update k - 1
        while not run.lifetime.stopping:
            start = time.perf_counter()
            wanted = max(rollout - 1, run.start_update) if config.deterministic else None
            copies, version = run.slot.get(wanted)
            params = copies[device]
            timers.add("params_fetch", start)
            rollout_key = _fold_in(key, rollout)
            if env.is_async:
                traj, stats = collector.rollout(run.act, params, rollout_key, timers)
            else:
                keys = rollout_keys(rollout_key, config.rollout_len)
                carry, traj, stats = host_rollout(env, run.act, params, carry, keys, timers)
            start = time.perf_counter()
            traj = global_array(run.traj_sharding, traj)  # this process's columns
            timers.add("place_on_learners", start)
            run.queues[index].put((traj, version, stats))
            run.actor_steps[index] += config.envs_per_actor * config.rollout_len
            rollout += 1
    finally:
        env.close()


def learner_role(run: SebulbaRun) -> None:
    """The learner: one trajectory from every actor, in actor order, then the compiled update
    over the learner mesh, the hooks (checkpoints, evaluation) and the new params published;
    until the run's last update, which stops every role."""
    hooks, timers = run.hooks, run.learner_timers
    run.publish(run.start_update)
    for k in range(run.start_update, run.num_updates):
        if run.watchdog is not None:
            run.watchdog.beat()
        start = time.perf_counter()
        items = [queue.get() for queue in run.queues]
        start = timers.add("wait_for_data", start)
        run.state, metrics = run.update(run.state, tuple(item[0] for item in items))
        metrics = jax.device_get(metrics)
        timers.add("update", start)
        if hasattr(hooks, "after_metrics"):  # optional in a hooks object of a user's
            hooks.after_metrics(metrics, k)
        run.publish(k + 1)
        run.done_updates = k + 1
        if hooks is not None:
            hooks.after_call(run.state, run.done_updates, run.done_updates == run.num_updates)
        run.lags.extend(k - item[1] for item in items)
        run.history["episodes"].append(sum(item[2].episodes for item in items))
        run.history["return_sum"].append(sum(item[2].return_sum for item in items))
        run.history["length_sum"].append(sum(item[2].length_sum for item in items))
        for name, value in metrics.items():
            run.history[name].append(float(value))
        run.history["queue_size"].append(float(np.mean([q.qsize() for q in run.queues])))
    run.lifetime.stop()


def summarise(run: SebulbaRun, elapsed: float) -> RunResult:
    """The summary role: the run's numbers (every process's episodes counted), the final
    state and the per-update history."""
    hist = {name: np.asarray(values)[None] for name, values in run.history.items()}
    if jax.process_count() > 1:  # the episodes of every process's actors (every process is here)
        for name in ("episodes", "return_sum", "length_sum"):
            hist[name] = multihost_utils.process_allgather(hist[name]).sum(axis=0)
    numbers = summary(
        hist,
        steps_per_update=run.recipe.steps_per_update,
        num_updates=run.num_updates,
        start_update=run.start_update,
        num_members=1,
        elapsed=elapsed,
        compile_s=run.compile_s,
        params=jax.device_get(run.state.params),
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
    return RunResult(numbers, run.state, hist)


def run(
    recipe: Recipe,
    config: SebulbaConfig,
    make_env: Callable[[int], Any],
    *,
    seed: int,
    progress: Callable[[dict[str, Any]], None] | None = None,
    devices: Sequence[jax.Device] | None = None,
    state: LearnerState | None = None,
    start_update: int = 0,
    hooks: Any = None,
    extra_roles: Sequence[tuple[str, Role]] = (),
) -> RunResult:
    """Trains the recipe's agent until its ``total_timesteps`` environment steps (all actors of
    every process together) are learnt from: :func:`compile_run`, then :func:`actor_role` for
    every actor and :func:`learner_role` (and ``extra_roles``, ``(name, role)`` pairs) as
    threads, then :func:`summarise`.

    ``make_env(actor_index)`` builds an actor's host environment with
    ``config.envs_per_actor`` environments; the index is global (actor ``i`` of process ``p`` is
    ``p * num_actors + i``), so every actor of every process has its own seed. ``devices`` are
    the local devices that the config's device ids index (default ``jax.local_devices()``; with
    several processes the learner mesh takes the learner ids' devices of every process).
    ``total_timesteps`` counts the steps of every process. Any thread's error stops the run and
    is raised here; Ctrl-C stops every thread cleanly.

    A resumed run passes the restored learner ``state`` and the updates it had done as
    ``start_update``; the environments start afresh. ``hooks`` (see
    :class:`podracer.loops.RunHooks`) gets ``after_call(state, updates, last)`` in the learner
    thread after every update, and ``interrupted(state, updates)`` in the calling thread on
    Ctrl-C. The learner is the recipe's (its agent spec's ``make_learner`` in its layout) over
    the learner mesh's DATA_AXIS.

    Args:
      recipe: the run's :class:`~podracer.loops.Recipe`.
      config: the loop's devices and sizes (:class:`~podracer.sebulba.SebulbaConfig`).
      make_env: ``make_env(actor_index) -> HostEnvironment`` (:func:`env_factory`).
      seed: the run seed (actors' keys and the learner's).
      progress: receives a ``"train"`` record (:mod:`podracer.logging`) about once a second.
      devices: the local devices the config's device ids index.
      state: a restored :class:`~podracer.types.LearnerState` to resume from; None starts
        afresh.
      start_update: the updates ``state`` holds.
      hooks: host work between updates (:class:`~podracer.loops.RunHooks`).
      extra_roles: more threads, ``(name, role)`` pairs, each ``role(run)`` given the
        :class:`SebulbaRun`.

    Returns:
      The :class:`~podracer.loops.RunResult`: the summary (with the actors' and the learner's
      timings, policy lag and queue sizes), the final learner state and the per-update metrics.
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
    )
    roles: list[tuple[str, Role]] = [
        (f"actor-{i}", functools.partial(actor_role, index=i)) for i in sebulba.actors
    ]
    roles += [("learner", learner_role), *extra_roles]
    threads = [sebulba.lifetime.thread(name, role, sebulba) for name, role in roles]
    sebulba.watchdog = Watchdog("the Sebulba learner step")
    sebulba.start = last_report = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        while not sebulba.lifetime.wait(0.1):
            if progress is not None and time.perf_counter() - last_report >= 1.0:
                last_report = time.perf_counter()
                progress(sebulba.record())
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
    if progress is not None:
        progress(sebulba.record())
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


def learner_placement(agent: Agent, mesh) -> tuple[LearnerState, LearnerState]:
    """``(specs, shardings)`` of the learner state on the learner mesh: replicated, an agent
    state kept per device split over DATA_AXIS."""
    specs = learner_specs(agent, P(), P(DATA_AXIS))
    shardings = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), specs, is_leaf=lambda x: isinstance(x, P)
    )
    return specs, shardings


def init_state(
    recipe: Recipe, config: SebulbaConfig, seed: int, devices: Sequence[jax.Device] | None = None
) -> LearnerState:
    """The learner's initial state, made on the learner mesh (with several processes, every
    process makes its part of it; a checkpoint restores into it in place)."""
    mesh = make_learner_mesh(config, devices)
    _, sharding = learner_placement(recipe.agent, mesh)
    learner = recipe.learner(axis_name=DATA_AXIS, envs_per_device=envs_per_device(config))
    return jax.jit(
        lambda obs: per_device(
            recipe.agent, learner.init(jax.random.key(seed), obs), mesh.devices.size
        ),
        out_shardings=sharding,
    )(recipe.example_obs())


def envs_per_device(config: SebulbaConfig) -> int:
    """The environments of one learner device's share of an update's trajectories: every
    actor's of every process, split over the learner devices of every process."""
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
    "Stopped",
    "actor_role",
    "compile_run",
    "host_act",
    "host_rollout",
    "learner_role",
    "rollout_keys",
    "run",
    "summarise",
]
