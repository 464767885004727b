"""Sebulba's learner: the update of every member over the learner mesh, compiled for the
trajectories the actors will send, the acting params it publishes, and the learner role (one
trajectory from every actor, the update, the periodic work, the hooks, the params published)."""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer.core.learner.buffers import break_streams
from podracer.core.learner.skeleton import one_device
from podracer.core.rollout import trajectory_shape
from podracer.loops.common import over_members
from podracer.loops.recipe import Recipe
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.members import AgentOf, SebulbaState, envs_per_device
from podracer.loops.sebulba.shared import SebulbaRun
from podracer.parallel import DATA_AXIS


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


def learner_update(
    recipe: Recipe, config: SebulbaConfig, build: AgentOf, mesh, specs: SebulbaState
) -> Callable:
    """The learner's update, jitted (not yet compiled): ``update(state, trajectories of every
    actor) -> (state, metrics [P])``, one ``shard_map`` over the learner mesh's ``DATA_AXIS``
    (the trajectories split along their environments), every member's learner core (with its
    hyper-parameters) over the members; the state is donated."""
    num_members, loop = config.num_seeds, config.member_loop

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

    return jax.jit(
        jax.shard_map(
            update_all,
            mesh=mesh,
            in_specs=(specs, P(None, None, DATA_AXIS)),
            out_specs=(specs, P()),
        ),
        donate_argnums=0,
    )


def acting_params(build: AgentOf, num_members: int, member_loop: str) -> Callable:
    """``acting(state) -> (acting params [P], hparams [P])``, jitted: what the learner publishes
    to the actors (each member's agent's ``actor_params`` of its learner state)."""

    def acting(state: SebulbaState):
        def one(params, agent_state, hparams):
            agent, _ = build(hparams)
            return agent.actor_params(params, one_device(agent, agent_state))

        params = over_members(one, num_members, member_loop)(
            state.learner.params, state.learner.agent_state, state.hparams
        )
        return params, state.hparams

    return jax.jit(acting)


def compile_update(
    update, acting, state: SebulbaState, recipe: Recipe, config: SebulbaConfig, traj_sharding
):
    """``update`` compiled for ``state`` and the trajectories the actors will send: one
    actor's columns of every process, as the rollout records them, member by member (their
    shapes are ``jax.eval_shape`` of the rollout, :func:`podracer.core.rollout.trajectory_shape`,
    for the acting params' shapes)."""
    num_members = config.num_seeds
    one_member = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), acting.eval_shape(state)[0]
    )
    shapes = trajectory_shape(
        recipe.agent,
        one_member,
        recipe.env_spec,
        config.envs_per_actor * jax.process_count(),
        config.rollout_len,
    )
    shapes = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(
            (s.shape[0], num_members, *s.shape[1:]), s.dtype, sharding=traj_sharding
        ),
        shapes,
    )
    return update.lower(state, (shapes,) * config.num_actors).compile()


def placed_state(state: SebulbaState, sharding: SebulbaState, start_update: int) -> SebulbaState:
    """A given (restored) state on the learner mesh: a no-op for a state made by
    :func:`~podracer.loops.sebulba.members.init_state` or restored into it; a resumed run's
    replay streams broken (its actors' environments start afresh)."""
    state = jax.tree.map(
        lambda sharding, part: jax.tree.map(lambda x: _placed(x, sharding), part),
        sharding,
        state,
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )
    if start_update:  # resumed: the actors' environments start afresh, so do the streams
        state = jax.jit(_break_streams, out_shardings=sharding)(state)
    return state
