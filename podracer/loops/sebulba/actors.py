"""Sebulba's actors: the acting keys, the jitted act (one member, :func:`host_act`, or every
member, :func:`member_act`), a rollout on a sync host environment (:func:`host_rollout`) or
envpool's async mode (:class:`AsyncCollector`), the warm-up that compiles the act, and the actor
role (:func:`actor_role`: rollouts onto the learner mesh and into the actor's queue)."""

from __future__ import annotations

import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.core.acting import Acted, RolloutState, reset_and_act, step_and_record
from podracer.loops.common import over_members
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.members import AgentOf
from podracer.loops.sebulba.pipeline import Lifetime, Stopped
from podracer.loops.sebulba.shared import SebulbaRun, Timers
from podracer.parallel import (
    global_array,
)
from podracer.types import Agent, Trajectory
from podracer.util import ops, seeding


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
