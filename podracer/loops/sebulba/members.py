"""Sebulba's members and their state on the learner mesh: :class:`SebulbaState` (every leaf
``[P, ...]``), each member's agent by its hyper-parameters, its seed offset, the learner mesh and
the state's placement on it, and the initial state."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer.core.learner.skeleton import per_device
from podracer.core.learner.skeleton import state_specs as learner_specs
from podracer.errors import ConfigValueError
from podracer.loops.base import Members, Periodic
from podracer.loops.common import over_members
from podracer.loops.recipe import Recipe
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.parallel import (
    DATA_AXIS,
    data_mesh,
    devices_by_local_ids,
)
from podracer.types import Agent, LearnerState
from podracer.util import seeding


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
