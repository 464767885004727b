"""Anakin as a loop of the registry (:data:`LOOP`): its probe, where its members run on a CPU's
cores, its system (:func:`~podracer.loops.anakin.program.build_system`), and :func:`build` and
:func:`train` of an environment id and an agent's config (the registry's, with :data:`LOOP`)."""

from __future__ import annotations

import dataclasses
import functools

import jax

from podracer.envs.options import EnvOptions
from podracer.loops import registry
from podracer.loops.anakin.config import AnakinConfig
from podracer.loops.anakin.program import build_system
from podracer.loops.base import Loop
from podracer.loops.recipe import EnvFactory, Recipe, as_factory
from podracer.parallel import (
    cores_per_member,
    member_placement,
)
from podracer.types import EnvSpec


def probe(
    env: str | EnvFactory,
    config: AnakinConfig,
    seed: int,
    env_options: EnvOptions | None = None,
) -> EnvSpec:
    """The specs of the run's JAX environment: the one its :class:`EnvFactory` builds (and
    keeps: the rollout, the evaluator and a population's tournament get that same object from
    ``recipe.make_env()``); an id is taken with ``env_options``. An unknown id or option fails
    here."""
    del config, seed
    built = as_factory(env, env_options).make()
    return EnvSpec(built.observation_spec, built.action_spec)


def place_members(
    config: AnakinConfig, recipe: Recipe | None = None
) -> tuple[AnakinConfig, list[jax.Device] | None]:
    """:attr:`Loop.place_members` of Anakin: the members on as many of the CPU's cores as divide
    them (:func:`~podracer.parallel.member_placement`), each group of cores running whole
    members with no collective between groups. Cores left over (fewer members than cores)
    split each member's environments between them, data parallel, where every core gets at
    least :data:`~podracer.parallel.MIN_STEPS_PER_CORE` steps an update
    (:func:`~podracer.parallel.cores_per_member`; below that the all-reduces cost more than
    they save) and the agent's learner keeps nothing per device (no replay buffer). A config
    that sets ``member_shards`` keeps its own placement."""
    if config.member_shards != 1:
        return config, None
    devices, shards = member_placement(config.num_seeds)
    per_device_state = recipe is not None and (
        recipe.agent.replay is not None or recipe.agent.state_per_device
    )
    if not per_device_state:
        cores = jax.local_devices()
        split = cores_per_member(config.num_envs, config.steps_per_update, len(cores) // shards)
        devices = cores[: shards * split]
    return dataclasses.replace(config, member_shards=shards), devices


LOOP = Loop(
    name="anakin",
    config_cls=AnakinConfig,
    default_env=lambda agent_spec: agent_spec.default_env,
    probe=probe,
    steps_per_update=lambda config: config.steps_per_update,
    build_system=build_system,
    members_in_one_program=True,
    with_members=lambda config, n: dataclasses.replace(config, num_seeds=n),
    place_members=place_members,
    sizes={"envs": "num_envs", "rollout_len": "rollout_len"},
    runs_in_pods=True,
)


build = functools.partial(registry.build, LOOP)
"""``build(env_id, agent_config, config, *, total_timesteps, agent_spec, seed, devices, members,
periodic, env_options, env_params)``: :func:`podracer.loops.build` on Anakin, the
:class:`~podracer.loops.anakin.system.Anakin` system of an environment id and an agent's
config."""

train = functools.partial(registry.train, LOOP)
"""``train(env_id, agent_config, config, *, seed, total_timesteps, devices, progress, state,
start_update, hooks, env_options, ...)``: :func:`podracer.loops.train` on Anakin."""
