"""Sebulba: host actor threads stepping environments, device learners (Hessel et al., 2021,
https://arxiv.org/abs/2104.06272, section 4).

Threads (host side, see :mod:`podracer.sebulba.pipeline` for the waits and the stop signal)::

    actor i (on actor device d):  params slot -> act (jitted, on d) -> env.step (host) -> ...
                                   -> Trajectory [T, B] -> device_put onto the learner mesh,
                                      split along B -> its bounded queue
    learner:                       one trajectory from every actor (in actor order) ->
                                   jit(shard_map(learner.update)) over the learner mesh ->
                                   publish params (version = updates done)

``learner.update`` is the one :func:`podracer.core.learner.make_learner` built — the same that
Anakin runs; only the mesh around it differs.

Several processes (after :func:`podracer.parallel.initialize`): every process runs its own actors
on its own actor devices; the learner devices of every process form one learner mesh, and each
update takes actor ``i``'s trajectory of every process as one global batch (process ``p``'s
environments are columns ``[p * B, (p + 1) * B)``). Every process runs the same compiled update,
so the params are the same on all of them.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import seeding
from podracer.config import ConfigValueError
from podracer.core.learner import one_device, per_device
from podracer.core.learner import state_specs as learner_specs
from podracer.core.rollout import reset_actor_state
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
from podracer.types import Agent, LearnerState, TimeStep, Trajectory

JOIN_TIMEOUT_S = 10.0


def rollout_keys(key: jax.Array, rollout_len: int) -> jax.Array:
    """The acting keys of one rollout ``[T]``: the schedule of
    :func:`podracer.core.rollout.make_rollout` (split per step, first half to ``act``)."""
    return jax.vmap(lambda k: jax.random.split(k)[0])(jax.random.split(key, rollout_len))


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


class HostCarry(NamedTuple):
    """What an actor carries from one rollout to the next (sync mode)."""

    timestep: TimeStep  # the last TimeStep (NumPy); its obs is the next one to act in
    actor_state: Any  # the agent's actor state after the last act, on the actor's device


def _stack(rows: list) -> Any:
    """``[T]`` pytrees of ``[B, ...]`` (device or NumPy) -> one NumPy pytree ``[T, B, ...]``."""
    return jax.tree.map(lambda *xs: np.stack(xs), *jax.device_get(rows))


def host_rollout(
    env, act, params, carry: HostCarry, keys, timers: Timers | None = None
) -> tuple[HostCarry, Trajectory, RolloutStats]:
    """One rollout of ``len(keys)`` steps on a host environment (sync mode).

    ``act`` is :func:`make_act` of the agent (``agent.act`` with the key ``keys[t]``, the actor
    state reset where an episode starts, one dispatch per step); ``params`` and ``keys`` live on
    the actor's device, where the computation runs.
    Returns the carry, the NumPy ``Trajectory [T, B]`` (the layout Anakin's rollout emits,
    ``actor_state`` included) and the statistics of the episodes that ended.
    """
    timers = timers or Timers()
    timestep, actor_state = carry
    obs, rewards, terms, truncs, finals, outs, states = [], [], [], [], [], [], []
    episodes, return_sum, length_sum = 0, 0.0, 0
    for t in range(keys.shape[0]):
        start = time.perf_counter()
        # The observation goes in as NumPy (placed beside the committed params: an explicit
        # device_put first costs a dispatch of its own), and only the action comes back now;
        # the rest of the actor's output is fetched once, after the rollout.
        used, actor_state, out = act(params, actor_state, timestep.obs, timestep.done, keys, t)
        action = np.asarray(out.action)
        start = timers.add("inference", start)
        next_ts = env.step(action)
        timers.add("env_step", start)
        obs.append(timestep.obs)
        outs.append(out)
        states.append(used)
        rewards.append(next_ts.reward)
        terms.append(next_ts.terminated)
        truncs.append(next_ts.truncated)
        finals.append(next_ts.final_obs)
        if next_ts.info is not None:
            done = np.asarray(next_ts.info.done)
            episodes += int(done.sum())
            return_sum += float(np.asarray(next_ts.info.episode_return)[done].sum())
            length_sum += int(np.asarray(next_ts.info.episode_length)[done].sum())
        timestep = next_ts
    start = time.perf_counter()
    behaviour, actor_states = _stack(outs), _stack(states)
    timers.add("inference", start)
    traj = Trajectory(
        obs=np.stack(obs),
        reward=np.stack(rewards).astype(np.float32),
        terminated=np.stack(terms).astype(bool),
        truncated=np.stack(truncs).astype(bool),
        bootstrap_obs=np.stack(finals),
        behaviour=behaviour,
        actor_state=actor_states,
    )
    return HostCarry(timestep, actor_state), traj, RolloutStats(episodes, return_sum, length_sum)


class AsyncCollector:
    """Builds ``Trajectory [T, num_envs]`` from envpool's async mode (``recv`` gives a batch of
    ``batch_size`` env ids, ``send`` answers them).

    Each env keeps its own sequence: the transition of env ``i`` is complete when ``i`` comes
    back from ``recv`` with the result of the action it was sent. When every env has ``T``
    complete transitions, the first ``T`` of each form the trajectory (time-major, env order);
    later ones wait for the next trajectory. Each env's actor state is kept here (NumPy rows)
    and reset where its episode starts. The statistics of a rollout are those of the episodes
    that end inside its trajectory (an episode that ends in a transition held back for the next
    trajectory counts there), so every episode counts once, with the trajectory it is in.
    """

    def __init__(self, env, rollout_len: int, initial_actor_state: Any = ()):
        self.env = env
        self.rollout_len = rollout_len
        self.buffers: list[list] = [[] for _ in range(env.num_envs)]
        self.pending: dict[int, tuple] = {}
        self.actor_state = jax.device_get(initial_actor_state)  # [num_envs, ...] NumPy
        self.calls = 0
        env.async_reset()

    def rollout(self, act, params, key, timers: Timers):
        while min(len(b) for b in self.buffers) < self.rollout_len:
            start = time.perf_counter()
            ts, env_ids = self.env.recv()
            start = timers.add("env_step", start)
            ids = env_ids.tolist()
            info = ts.info
            for j, i in enumerate(ids):
                if i in self.pending:
                    obs, out, used = self.pending.pop(i)
                    ended = info is not None and bool(info.done[j])
                    episode = (
                        (1, float(info.episode_return[j]), int(info.episode_length[j]))
                        if ended
                        else (0, 0.0, 0)
                    )
                    self.buffers[i].append(
                        (
                            obs,
                            out,
                            ts.reward[j],
                            ts.terminated[j],
                            ts.truncated[j],
                            ts.final_obs[j],
                            used,
                            episode,
                        )
                    )
            keys = jax.random.fold_in(key, self.calls)[None]
            rows = jax.tree.map(lambda x, ids=env_ids: x[ids], self.actor_state)
            # runs beside the params
            used, rows, out = jax.device_get(act(params, rows, ts.obs, ts.done, keys, 0))
            self.calls += 1
            start = timers.add("inference", start)
            self.env.send(out.action, env_ids)
            timers.add("env_step", start)

            def scatter(x, new, ids=env_ids):
                x = np.array(x)
                x[ids] = new
                return x

            self.actor_state = jax.tree.map(scatter, self.actor_state, rows)
            for j, i in enumerate(ids):
                self.pending[i] = (
                    ts.obs[j],
                    jax.tree.map(lambda x, j=j: x[j], out),
                    jax.tree.map(lambda x, j=j: x[j], used),
                )
        steps = [b[: self.rollout_len] for b in self.buffers]
        self.buffers = [b[self.rollout_len :] for b in self.buffers]

        def stack(field):  # [T, num_envs, ...]
            rows = [[seq[t][field] for seq in steps] for t in range(self.rollout_len)]
            return jax.tree.map(lambda *xs: np.stack(xs), *[_stack(row) for row in rows])

        traj = Trajectory(
            obs=stack(0),
            reward=stack(2).astype(np.float32),
            terminated=stack(3).astype(bool),
            truncated=stack(4).astype(bool),
            bootstrap_obs=stack(5),
            behaviour=stack(1),
            actor_state=stack(6),
        )
        episodes = [step[7] for seq in steps for step in seq]
        stats = RolloutStats(
            sum(e[0] for e in episodes), sum(e[1] for e in episodes), sum(e[2] for e in episodes)
        )
        return traj, stats


def make_act(agent: Agent):
    """The actor's jitted step: ``act(params, actor_state, obs, done, keys, t) -> (actor_state
    given to agent.act, its next actor state, ActorOutput)``, with ``keys[t]`` and the actor
    state reset to ``agent.initial_actor_state`` where ``done`` (the observation starts an
    episode)."""

    def step(params, actor_state, obs, done, keys, t):
        initial = agent.initial_actor_state(obs.shape[0])
        actor_state = reset_actor_state(initial, actor_state, done)
        next_state, out = agent.act(params, actor_state, obs, keys[t])
        return actor_state, next_state, out

    return jax.jit(step)


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
) -> RunResult:
    """Trains the recipe's agent until its ``total_timesteps`` environment steps (all actors of
    every process together) are learnt from.

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
    """
    agent = recipe.agent
    num_processes = jax.process_count()
    if devices is not None and num_processes > 1:
        raise ValueError(
            "devices= applies to single-process runs; with several processes, "
            "SebulbaConfig's device ids name every process's local devices"
        )
    devices = list(devices if devices is not None else jax.local_devices())
    actor_devices = [devices[i] for i in config.actor_device_ids]
    learner_mesh = make_learner_mesh(config, devices)
    first_actor = jax.process_index() * config.num_actors  # global index of local actor 0
    steps_per_update, num_updates = recipe.steps_per_update, recipe.num_updates
    if not 0 <= start_update < num_updates:
        raise ConfigValueError(
            f"run: start_update={start_update} is not allowed: the run has {num_updates} updates "
            f"of {steps_per_update} steps (total_timesteps={recipe.total_timesteps})"
        )
    lifetime = Lifetime()
    slot = ParamsSlot(lifetime)
    queues = [TrajectoryQueue(lifetime, config.queue_size) for _ in range(config.num_actors)]
    traj_sharding = NamedSharding(learner_mesh, P(None, DATA_AXIS))
    specs, state_sharding = learner_placement(agent, learner_mesh)

    learner = recipe.learner(axis_name=DATA_AXIS)

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

    # Everything is compiled before the threads start, so compile time is measured apart.
    t0 = time.perf_counter()
    example_obs = recipe.example_obs()
    if state is None:
        state = init_state(recipe, config, seed, devices)
    else:  # a no-op for a state made by init_state or restored into it
        state = jax.device_put(state, state_sharding)
    act = make_act(agent)
    batch_obs = np.zeros((config.envs_per_actor, *example_obs.shape), example_obs.dtype)
    initial_actor_state = agent.initial_actor_state(config.envs_per_actor)

    def acting(params, agent_state):
        return agent.actor_params(params, one_device(agent, agent_state))

    _, out_shape = jax.eval_shape(
        agent.act,
        acting(state.params, state.agent_state),
        initial_actor_state,
        batch_obs,
        jax.random.key(0),
    )
    state_shape = jax.eval_shape(lambda: initial_actor_state)
    global_envs = config.envs_per_actor * num_processes  # one actor's columns, every process
    global_obs = (config.rollout_len, global_envs, *example_obs.shape)
    traj_shape = Trajectory(
        obs=jax.ShapeDtypeStruct(global_obs, example_obs.dtype),
        reward=jax.ShapeDtypeStruct((config.rollout_len, global_envs), jnp.float32),
        terminated=jax.ShapeDtypeStruct((config.rollout_len, global_envs), jnp.bool_),
        truncated=jax.ShapeDtypeStruct((config.rollout_len, global_envs), jnp.bool_),
        bootstrap_obs=jax.ShapeDtypeStruct(global_obs, example_obs.dtype),
        behaviour=jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(
                (config.rollout_len, global_envs, *s.shape[1:]), s.dtype
            ),
            out_shape,
        ),
        actor_state=jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(
                (config.rollout_len, global_envs, *s.shape[1:]), s.dtype
            ),
            state_shape,
        ),
    )
    traj_shape = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=traj_sharding), traj_shape
    )
    update = update.lower(state, (traj_shape,) * config.num_actors).compile()
    # The actors' own call signature: params and keys on the device, the observations as NumPy
    # and the step index as a Python int (another signature would compile again in the thread).
    acting_envs = config.async_batch_size or config.envs_per_actor
    acting_obs = batch_obs[:acting_envs]
    acting_done = np.zeros(acting_envs, bool)
    for device in actor_devices:
        if config.async_batch_size:  # one key per recv, see AsyncCollector.rollout
            keys = jax.random.fold_in(jax.random.key(0), 0)[None]
            actor_state = jax.device_get(agent.initial_actor_state(acting_envs))
        else:
            keys = rollout_keys(jax.random.key(0), config.rollout_len)
            actor_state = jax.device_put(initial_actor_state, device)
        params = jax.tree.map(local_copy, acting(state.params, state.agent_state))
        params, keys = jax.device_put((params, keys), device)
        _, actor_state, _ = act(params, actor_state, acting_obs, acting_done, keys, 0)
        if not config.async_batch_size:  # the signature of every later step
            jax.block_until_ready(act(params, actor_state, acting_obs, acting_done, keys, 0))
    compile_s = time.perf_counter() - t0
    barrier("the Sebulba learner compiled")  # the first update's collectives start together

    actor_timers = [Timers() for _ in range(config.num_actors)]
    actor_steps = [0] * config.num_actors
    learner_timers = Timers()
    history: dict[str, list] = collections.defaultdict(list)
    lags: list[int] = []

    def actor_loop(index: int):
        device = actor_devices[index // config.actors_per_device]
        timers = actor_timers[index]
        env = make_env(first_actor + index)
        try:
            key = jax.random.key(seed + seeding.ACTOR_KEY_OFFSET)
            key = jax.device_put(jax.random.fold_in(key, first_actor + index), device)
            initial = agent.initial_actor_state(env.num_envs)
            if env.is_async:
                collector = AsyncCollector(env, config.rollout_len, initial)
            else:
                carry = HostCarry(env.reset(), jax.device_put(initial, device))
            rollout = start_update  # rollout k acts with the params of update k - 1
            while not lifetime.stopping:
                start = time.perf_counter()
                wanted = max(rollout - 1, start_update) if config.deterministic else None
                copies, version = slot.get(wanted)
                params = copies[device]
                timers.add("params_fetch", start)
                rollout_key = jax.random.fold_in(key, rollout)
                if env.is_async:
                    traj, stats = collector.rollout(act, params, rollout_key, timers)
                else:
                    keys = rollout_keys(rollout_key, config.rollout_len)
                    carry, traj, stats = host_rollout(env, act, params, carry, keys, timers)
                start = time.perf_counter()
                traj = global_array(traj_sharding, traj)  # this process's columns
                timers.add("place_on_learners", start)
                queues[index].put((traj, version, stats))
                actor_steps[index] += config.envs_per_actor * config.rollout_len
                rollout += 1
        finally:
            env.close()

    def publish(state, version):
        # A copy on every actor device: the learner's state is donated to the next update.
        params = jax.tree.map(local_copy, acting(state.params, state.agent_state))
        copies = {d: jax.device_put(params, d, may_alias=False) for d in set(actor_devices)}
        slot.publish(copies, version)

    def learner_loop():
        nonlocal state, done_updates
        publish(state, start_update)
        for k in range(start_update, num_updates):
            watchdog.beat()
            start = time.perf_counter()
            items = [q.get() for q in queues]
            start = learner_timers.add("wait_for_data", start)
            state, metrics = update(state, tuple(item[0] for item in items))
            metrics = jax.device_get(metrics)
            learner_timers.add("update", start)
            if hasattr(hooks, "after_metrics"):  # optional in a hooks object of a user's
                hooks.after_metrics(metrics, k)
            publish(state, k + 1)
            done_updates = k + 1
            if hooks is not None:
                hooks.after_call(state, done_updates, done_updates == num_updates)
            lags.extend(k - item[1] for item in items)
            history["episodes"].append(sum(item[2].episodes for item in items))
            history["return_sum"].append(sum(item[2].return_sum for item in items))
            history["length_sum"].append(sum(item[2].length_sum for item in items))
            for name, value in metrics.items():
                history[name].append(float(value))
            history["queue_size"].append(float(np.mean([q.qsize() for q in queues])))
        lifetime.stop()

    done_updates = start_update
    watchdog = Watchdog("the Sebulba learner step")  # armed only with several processes
    threads = [lifetime.thread(f"actor-{i}", actor_loop, i) for i in range(config.num_actors)]
    threads.append(lifetime.thread("learner", learner_loop))
    start = time.perf_counter()
    last_report = start

    def record():
        return _record(
            history, lags, config, steps_per_update, num_updates, start_update, start, actor_steps
        )

    try:
        for thread in threads:
            thread.start()
        while not lifetime.wait(0.1):
            if progress is not None and time.perf_counter() - last_report >= 1.0:
                last_report = time.perf_counter()
                progress(record())
    except KeyboardInterrupt:
        lifetime.stop()
        _join(threads)
        if hooks is not None and not any(x.is_deleted() for x in jax.tree.leaves(state)):
            hooks.interrupted(state, done_updates)
        raise
    finally:
        watchdog.close()
    _join(threads)
    lifetime.raise_if_failed()
    elapsed = time.perf_counter() - start
    if progress is not None:
        progress(record())

    hist = {name: np.asarray(values)[None] for name, values in history.items()}
    if num_processes > 1:  # the episodes of every process's actors (every process is here)
        for name in ("episodes", "return_sum", "length_sum"):
            hist[name] = multihost_utils.process_allgather(hist[name]).sum(axis=0)
    numbers = summary(
        hist,
        steps_per_update=steps_per_update,
        num_updates=num_updates,
        start_update=start_update,
        num_members=1,
        elapsed=elapsed,
        compile_s=compile_s,
        params=jax.device_get(state.params),
    )
    numbers.update(
        env=recipe.env_id,
        arch="sebulba",
        seed=seed,
        devices=len(learner_mesh.devices.flat),
        processes=num_processes,
        process=jax.process_index(),
        actor_sps=sum(actor_steps) / elapsed,
        per_actor_sps=[s / elapsed for s in actor_steps],
        policy_lag_mean=float(np.mean(lags)) if lags else None,
        policy_lag_max=int(np.max(lags)) if lags else None,
        actor_time_s=_mean_timers(actor_timers),
        learner_time_s=dict(learner_timers.seconds),
        queue_size_mean=float(np.mean(history["queue_size"])),
    )
    return RunResult(numbers, state, hist)


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
    learner = recipe.learner(axis_name=DATA_AXIS)
    return jax.jit(
        lambda obs: per_device(
            recipe.agent, learner.init(jax.random.key(seed), obs), mesh.devices.size
        ),
        out_shardings=sharding,
    )(recipe.example_obs())


def _join(threads) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for thread in threads:
        if thread.ident is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        raise RuntimeError(f"podracer threads did not stop within {JOIN_TIMEOUT_S} s: {alive}")


def _mean_timers(timers: list[Timers]) -> dict[str, float]:
    names = sorted({name for t in timers for name in t.seconds})
    return {name: float(np.mean([t.seconds.get(name, 0.0) for t in timers])) for name in names}


_BOOKKEEPING = ("episodes", "return_sum", "length_sum", "queue_size")


def _record(
    history, lags, config, steps_per_update, num_updates, start_update, start, actor_steps
) -> dict[str, Any]:
    """The ``"train"`` record (:func:`podracer.loops.common.train_record`) of the updates done
    so far; its episode return is over the last 5 updates."""
    history = {name: list(values) for name, values in list(history.items())}  # a snapshot
    run_updates = len(history.get("episodes", ()))
    recent = slice(max(0, run_updates - 5), run_updates)
    elapsed = max(time.perf_counter() - start, 1e-9)
    return train_record(
        updates=start_update + run_updates,
        num_updates=num_updates,
        start_update=start_update,
        steps_per_update=steps_per_update,
        num_members=1,
        start=start,
        returns=np.asarray([sum(history.get("return_sum", [])[recent])]),
        episodes=np.asarray([sum(history.get("episodes", [])[recent])]),
        metrics={n: v[-1] for n, v in history.items() if n not in _BOOKKEEPING and v},
        actor_sps=sum(actor_steps) / elapsed,
        policy_lag=float(np.mean(lags[-5 * config.num_actors :])) if lags else None,
        queue_size=history["queue_size"][-1] if history.get("queue_size") else None,
    )


__all__ = ["HostCarry", "Stopped", "host_rollout", "make_act", "rollout_keys", "run"]
