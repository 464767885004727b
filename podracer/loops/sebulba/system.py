"""Sebulba: host actor threads stepping environments, device learners (Hessel et al., 2021,
https://arxiv.org/abs/2104.06272, section 4).

A run is a few roles, each one function (host side; :mod:`podracer.loops.sebulba.pipeline` has the
waits and the stop signal), each in its module: the actors in ``actors.py``, the learner in
``learner.py``, the members' state in ``members.py``, what the roles share (:class:`SebulbaRun`)
in ``shared.py``, and here the system that wires them (:func:`compile_run`, :func:`run`,
:func:`summarise`)::

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

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer.errors import ConfigValueError
from podracer.loops.base import Members, Periodic, RunResult
from podracer.loops.common import summary
from podracer.loops.recipe import Recipe
from podracer.loops.sebulba.actors import actor_role, member_act, warm_up_actor
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.learner import (
    acting_params,
    compile_update,
    learner_role,
    learner_update,
    placed_state,
)
from podracer.loops.sebulba.members import (
    SebulbaState,
    agent_of,
    init_state,
    make_learner_mesh,
    member_offsets,
    state_placement,
)
from podracer.loops.sebulba.shared import Role, SebulbaRun, Timers
from podracer.parallel import (
    DATA_AXIS,
    Watchdog,
    barrier,
    local_copy,
)

JOIN_TIMEOUT_S = 10.0


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
    if devices is not None and jax.process_count() > 1:
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
    build = agent_of(recipe, members)
    traj_sharding = NamedSharding(learner_mesh, P(None, None, DATA_AXIS))
    specs, state_sharding = state_placement(recipe.agent, learner_mesh)
    update = learner_update(recipe, config, build, learner_mesh, specs)
    t0 = time.perf_counter()
    if state is None:
        state = init_state(recipe, config, seed, devices, members=members, periodic=periodic)
    else:
        state = placed_state(state, state_sharding, start_update)
    acting = acting_params(build, config.num_seeds, config.member_loop)
    update = compile_update(update, acting, state, recipe, config, traj_sharding)
    tournament = None
    if periodic is not None:
        tournament = jax.jit(
            periodic.apply_scored, donate_argnums=0, out_shardings=(state_sharding, None)
        )
    act = member_act(build, config.num_seeds, config.member_loop)
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
    ``config.envs_per_actor`` environments, member-major
    (:func:`podracer.loops.sebulba.env_factory`); the index is global (actor ``i`` of process
    ``p`` is ``p * num_actors + i``), so every actor of every process has its own seed.
    ``devices`` are the local devices that the config's device ids index (default
    ``jax.local_devices()``; with several processes the learner mesh takes the learner ids'
    devices of every process). ``total_timesteps`` counts the steps of every process. Any
    thread's error stops the run and is raised here; Ctrl-C stops every thread cleanly.

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
    run_roles(sebulba, threads, hooks, progress)
    elapsed = time.perf_counter() - sebulba.start
    report_progress(sebulba, progress, train=True)
    return summarise(sebulba, elapsed)


def report_progress(sebulba: SebulbaRun, progress, train: bool) -> None:
    """Hands ``progress`` the periodic records not yet handed, then (``train``) a ``"train"``
    record of the updates done so far."""
    if progress is None:
        return
    for record in sebulba.new_events():
        progress(record)
    if train:
        progress(sebulba.record())


def run_roles(sebulba: SebulbaRun, threads, hooks, progress) -> None:
    """Starts the roles' ``threads`` and waits, in the calling thread, until the run stops (a
    ``"train"`` record about once a second meanwhile); then joins them, and raises a role's
    error, or names the threads that did not stop. Ctrl-C stops every role and gives the last
    whole state to ``hooks.interrupted`` before it goes on."""
    sebulba.watchdog = Watchdog("the Sebulba learner step")
    sebulba.start = last_report = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        while not sebulba.lifetime.wait(0.1):
            due = time.perf_counter() - last_report >= 1.0
            report_progress(sebulba, progress, due)
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
