"""Anakin's compiled program: the mesh (:func:`checked_mesh`), one member's update (rollout,
then the learner core), the step of ``k`` updates over the mesh with the periodic work where due,
and the initial state, built into an :class:`~podracer.loops.anakin.system.Anakin` system
(:func:`build_system`, :attr:`Loop.build_system` of Anakin)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from podracer.core.learner.skeleton import one_device, per_device
from podracer.core.rollout import make_rollout, reset_envs
from podracer.envs.wrappers import EpisodeStatistics
from podracer.errors import ConfigError
from podracer.loops.anakin.config import AnakinConfig
from podracer.loops.anakin.state import AnakinState, UpdateMetrics, state_layout
from podracer.loops.anakin.system import Anakin
from podracer.loops.base import Members, Periodic
from podracer.loops.common import over_members
from podracer.loops.recipe import Recipe
from podracer.parallel import (
    DATA_AXIS,
    MEMBER_AXIS,
    member_mesh,
)
from podracer.util import seeding


def checked_mesh(
    config: AnakinConfig, devices: Sequence[jax.Device] | None, members: Members | None
) -> jax.sharding.Mesh:
    """The ``(MEMBER_AXIS, DATA_AXIS)`` mesh of a run, after the checks that its sizes divide
    (members over member groups, environments over each group's devices, one hyper-parameter
    value and one seed offset per member)."""
    if config.num_seeds % config.member_shards:
        raise ConfigError(
            f"AnakinConfig.member_shards={config.member_shards} is not allowed with "
            f"{config.num_seeds} members (num_seeds, or the sweep or population size): it must "
            "divide the number of members"
        )
    mesh = member_mesh(devices, config.member_shards)
    num_devices = mesh.shape[DATA_AXIS]
    if config.num_envs % num_devices:
        where = (
            f"on {num_devices} devices: it must be a multiple of the device count ({num_devices})"
            if config.member_shards == 1
            else f"on {mesh.devices.size} devices with member_shards={config.member_shards}: it "
            f"must be a multiple of the devices per member group ({num_devices})"
        )
        raise ConfigError(f"AnakinConfig.num_envs={config.num_envs} is not allowed {where}")
    if members is not None:
        for name, values in members.hparams.items():
            if np.shape(values) != (config.num_seeds,):
                raise ConfigError(
                    f"Members.hparams[{name!r}] has shape {np.shape(values)}: it must be "
                    f"({config.num_seeds},), one value per member (AnakinConfig.num_seeds)"
                )
        if np.shape(members.seed_offsets) != (config.num_seeds,):
            raise ConfigError(
                f"Members.seed_offsets has shape {np.shape(members.seed_offsets)}: it must be "
                f"({config.num_seeds},)"
            )
    return mesh


def with_periodic(step: Callable, periodic: Periodic) -> Callable:
    """``step`` followed, when its last update is a multiple of ``periodic.interval``, by
    ``periodic.apply`` (inside a ``lax.cond``); the metrics get its events and ``due``."""

    def stepped(state: AnakinState):
        state, metrics = step(state)
        _, shapes = jax.eval_shape(periodic.apply, state)
        due = state.learner.update_count[0] % periodic.interval == 0
        state, events = jax.lax.cond(
            due,
            periodic.apply,
            lambda s: (s, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)),
            state,
        )
        return state, metrics._replace(events={"due": due, **events})

    return stepped


def env_checks_vma(env) -> bool:
    """Whether the program's ``shard_map`` checks varying manual axes (``check_vma``): yes,
    unless the environment says its code cannot be traced so (``check_vma = False`` on an
    adapter whose library has a ``lax.cond`` with a constant branch and a varying one, which
    JAX 0.10 refuses inside a checked ``shard_map``). Unchecked, the program computes the same
    numbers: the learner all-reduces its gradients itself (tests/test_anakin.py)."""
    return bool(getattr(env, "check_vma", True))


def make_one_update(parts: Callable, env_params: Any) -> Callable:
    """One update of one member inside the program (a ``lax.scan`` body): ``parts(hparams)``
    gives the member's agent, learner and rollout; its environments are rolled out with the
    acting params, the learner updates on the trajectory, and the episode statistics are
    summed over the data axis."""

    def one_update(state: AnakinState, _):
        agent, learner, rollout = parts(state.hparams)
        key, rollout_key = jax.random.split(state.key)
        rollout_key = jax.random.fold_in(rollout_key, jax.lax.axis_index(DATA_AXIS))
        acting = agent.actor_params(
            state.learner.params, one_device(agent, state.learner.agent_state)
        )
        rollout_state, traj, info = rollout(acting, state.rollout, env_params, rollout_key)
        learner_state, learner_metrics = learner.update(state.learner, traj)
        metrics = UpdateMetrics(
            learner=learner_metrics,
            episodes=jax.lax.psum(jnp.sum(info.done, dtype=jnp.int32), DATA_AXIS),
            return_sum=jax.lax.psum(jnp.sum(info.episode_return), DATA_AXIS),
            length_sum=jax.lax.psum(jnp.sum(info.episode_length), DATA_AXIS),
        )
        return state._replace(learner=learner_state, rollout=rollout_state, key=key), metrics

    return one_update


def member_parts(
    recipe: Recipe, config: AnakinConfig, env, members: Members | None, num_devices: int
) -> Callable:
    """``parts(hparams) -> (agent, learner, rollout)``: one member's agent, its learner core
    (over ``DATA_AXIS``, acting with the params it learns) and its rollout on ``env``; built
    inside the trace for members with hyper-parameters of their own, the recipe's otherwise."""

    def parts(hparams):
        member_agent, member_optimizer = (
            (recipe.agent, recipe.optimizer) if members is None else members.build(hparams)
        )
        learner = recipe.learner(
            member_agent,
            member_optimizer,
            axis_name=DATA_AXIS,
            envs_per_device=config.num_envs // num_devices,
            no_policy_lag=True,  # the rollout acts with the learner's params of this update
        )
        rollout = make_rollout(env, member_agent, config.rollout_len, unroll=config.rollout_unroll)
        return member_agent, learner, rollout

    return parts


def make_init(
    recipe: Recipe,
    config: AnakinConfig,
    env,
    env_params: Any,
    parts: Callable,
    *,
    num_devices: int,
    state_shardings: AnakinState,
    make_step: Callable[[int], Callable],
    members: Members | None,
    periodic: Periodic | None,
) -> Callable[[int], AnakinState]:
    """``init(seed) -> AnakinState``: the initial state of every member, one jitted program over
    the mesh (with several processes each computes only its own devices' shards)."""
    example_obs = jax.tree.map(jnp.asarray, recipe.example_obs())

    def init_one(key, hparams):
        agent, learner, _ = parts(hparams)
        learner_key, env_key, act_key = jax.random.split(key, 3)
        env_keys = jax.random.split(env_key, config.num_envs)
        return AnakinState(
            learner=per_device(agent, learner.init(learner_key, example_obs), num_devices),
            rollout=reset_envs(env, env_keys, env_params, agent.initial_actor_state),
            key=act_key,
            hparams=hparams,
        )

    def init_all(keys, hparams):
        # One member after another, not vmapped: the orthogonal initialisers' QR factorisations
        # would be one batched LAPACK call, which in jaxlib 0.10 on CPU splits its batch over
        # the intra-op thread pool and waits for it from a pool thread; two such calls at once
        # on a 2-thread pool wait for each other forever (docs/design.md, "Tests").
        state = jax.lax.map(lambda args: init_one(*args), (keys, hparams))
        if periodic is None:
            return state
        # Its own keys, so that the periodic work never draws from the training keys.
        return state._replace(
            periodic=periodic.init(
                jax.vmap(lambda k: jax.random.fold_in(k, seeding.PERIODIC_STREAM))(keys)
            )
        )

    # One program over the global mesh: with several processes, each computes (and holds) only
    # the shards of its own devices, i.e. its own slice of the environment batch.
    init_seeds = jax.jit(
        lambda seeds, hparams: init_all(jax.vmap(jax.random.key)(seeds), hparams),
        out_shardings=state_shardings,
    )
    offsets = np.arange(config.num_seeds) if members is None else members.seed_offsets
    initial_hparams = {} if members is None else dict(members.hparams)
    checked: list[bool] = []

    def init(seed: int) -> AnakinState:
        """The initial state of runs ``seed, ..., seed + num_seeds - 1`` (members: of seeds
        ``seed + seed_offsets``). The first call checks the step's shapes, so a size that does
        not divide fails here, before any compilation."""
        seeds = (seed + np.asarray(offsets)).astype(np.uint32)
        hparams = {k: np.asarray(v, np.float32) for k, v in initial_hparams.items()}
        if not checked:
            jax.eval_shape(make_step(1), jax.eval_shape(init_seeds, seeds, hparams))
            checked.append(True)
        return init_seeds(seeds, hparams)

    return init


def step_maker(
    config: AnakinConfig,
    mesh: jax.sharding.Mesh,
    env,
    one_update: Callable,
    periodic: Periodic | None,
    state_specs: AnakinState,
    state_shardings: AnakinState,
) -> Callable[[int], Callable]:
    """``make_step(k)``: the jitted step of ``k`` updates (a ``lax.scan`` of ``one_update``),
    its members over ``MEMBER_AXIS`` and their environments over ``DATA_AXIS`` in one
    ``shard_map``, the state donated, then the periodic work where due; one per ``k``."""
    local_members = config.num_seeds // config.member_shards

    @functools.cache
    def make_step(k: int):
        def one_seed(state):
            return jax.lax.scan(one_update, state, None, length=k)

        sharded = jax.shard_map(
            over_members(one_seed, local_members, config.member_loop),
            mesh=mesh,
            in_specs=(state_specs,),
            out_specs=(state_specs, P(MEMBER_AXIS)),
            check_vma=env_checks_vma(env),
        )
        # Metrics come back replicated: every process can read them, even when the members
        # are split over processes (an all-gather of a few numbers per member).
        out_shardings = (state_shardings, jax.sharding.NamedSharding(mesh, P()))
        step = sharded if periodic is None else with_periodic(sharded, periodic)
        return jax.jit(step, donate_argnums=0, out_shardings=out_shardings)

    return make_step


def build_system(
    recipe: Recipe,
    config: AnakinConfig,
    *,
    updates_per_call: int = 1,
    devices: Sequence[jax.Device] | None = None,
    env_params: Any = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
) -> Anakin:
    """:attr:`Loop.build_system` of Anakin: the Anakin system of a
    :class:`~podracer.loops.Recipe` (its environment, built
    with its options by ``recipe.make_env()``, is an on-device
    :class:`~podracer.types.Environment`; its agent, optimizer and learner layout).

    ``env_params`` (default: the environment's ``default_params``, which carry the recipe's
    ``--env-param`` values) are the params the rollout steps with. The environment is wrapped
    in :class:`~podracer.envs.EpisodeStatistics` for the episode metrics. ``devices`` defaults
    to every device of every process. With
    ``members``, the ``num_seeds`` vmapped runs are members with hyper-parameters of their own,
    carried in the state as traced values: the agent and optimizer are built per member inside
    the program, so members differ without a recompile. With ``periodic``, every step that ends
    at a multiple of ``periodic.interval`` updates ends with ``periodic.apply``
    (:class:`Periodic`).

    The mesh is ``(MEMBER_AXIS, DATA_AXIS)`` (:func:`~podracer.parallel.member_mesh`) with
    ``config.member_shards`` groups of devices; each group splits its members' environments.

    Args:
      recipe: the run's :class:`~podracer.loops.Recipe` (environment, agent, optimizer,
        learner layout).
      config: the loop's sizes (:class:`AnakinConfig`).
      updates_per_call: updates done by one call of the compiled ``step``.
      devices: the mesh's devices (default: every device of every process).
      env_params: the params the rollout steps with (default: the environment's
        ``default_params``).
      members: the members' hyper-parameters and how to build a member's agent
        (:class:`~podracer.loops.Members`); None: ``num_seeds`` runs of the recipe's agent.
      periodic: work at the end of every step that ends at a multiple of its ``interval``.

    Returns:
      The :class:`Anakin` system: ``init(seed)``, the jitted ``step`` and :meth:`Anakin.run`.
    """
    mesh = checked_mesh(config, devices, members)
    num_devices = mesh.shape[DATA_AXIS]
    env = EpisodeStatistics(recipe.make_env())
    env_params = env.default_params if env_params is None else env_params
    parts = member_parts(recipe, config, env, members, num_devices)
    state_specs, state_shardings = state_layout(recipe.agent, mesh)
    one_update = make_one_update(parts, env_params)
    make_step = step_maker(config, mesh, env, one_update, periodic, state_specs, state_shardings)
    init = make_init(
        recipe,
        config,
        env,
        env_params,
        parts,
        num_devices=num_devices,
        state_shardings=state_shardings,
        make_step=make_step,
        members=members,
        periodic=periodic,
    )
    return Anakin(
        init=init,
        step=make_step(updates_per_call),
        make_step=make_step,
        mesh=mesh,
        config=config,
        compiled={},
        periodic=periodic,
        recipe=recipe,
    )
