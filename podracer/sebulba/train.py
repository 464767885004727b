"""Sebulba as a loop of the registry: the environment factory, the system and :func:`train`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from podracer import host_envs, loops, seeding
from podracer.core.learner import one_device
from podracer.envs.options import EnvOptions, as_options
from podracer.loops import Loop
from podracer.loops.common import Members, Periodic, RunHooks, RunResult
from podracer.loops.recipe import Recipe
from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.system import init_state, run
from podracer.types import EnvSpec, HostEnvironment

DEFAULT_ENV = "envpool:CartPole-v1"


def env_factory(
    env_id: str,
    config: SebulbaConfig,
    seed: int,
    env_options: EnvOptions | dict[str, Any] | None = None,
    evaluation: bool = False,
) -> Callable[[int], HostEnvironment]:
    """``make_env(actor_index)``: the host environments of one actor, built by THE factory of
    host environments (:func:`podracer.host_envs.make`) with the run's ``env_options``
    (:class:`~podracer.envs.EnvOptions`; a mapping is their ``params``: an envpool or gymnasium
    environment's ``make`` keyword arguments, a JAX environment's ``default_params`` fields),
    ``config.envs_per_actor`` of them, in async mode when ``config.async_batch_size`` is set;
    each actor gets its own seed (:data:`podracer.seeding.ENV_SEED_STRIDE`). The probe, the
    actors and the evaluator (``evaluation``: a JAX environment with its evaluation params) all
    build theirs here.

    Args:
      env_id: a host environment's id (``envpool:...``, ``gymnasium:...``) or a JAX one's
        (stepped on the host).
      config: the loop's config: ``envs_per_actor``, ``async_batch_size``, ``env_threads``.
      seed: the run seed; actor ``i`` seeds its environments from ``seed`` and ``i``.
      env_options: the run's :class:`~podracer.envs.EnvOptions` (or a mapping of its
        ``params``).
      evaluation: build the evaluator's environments.

    Returns:
      ``make_env(actor_index) -> HostEnvironment``.
    """
    env_options = as_options(env_options)

    def make_env(actor: int) -> HostEnvironment:
        return host_envs.make(
            env_id,
            num_envs=config.envs_per_actor,
            batch_size=config.async_batch_size or None,
            seed=seeding.env_seed(seed, actor),
            num_threads=config.env_threads,
            env_options=env_options,
            evaluation=evaluation,
        )

    return make_env


def steps_per_update(config: SebulbaConfig) -> int:
    """Environment steps per update, every process's actors together."""
    return config.steps_per_update * jax.process_count()


def probe(
    env_id: str, config: SebulbaConfig, seed: int, env_options: EnvOptions | None = None
) -> EnvSpec:
    """The specs of a host environment of ``env_id`` with the run's ``env_options``, built as
    the actors build theirs (:func:`env_factory`; one is built and closed: an unknown id or
    option fails here, in the caller's thread)."""
    env = env_factory(env_id, config, seed, env_options)(-1)
    try:
        return EnvSpec(env.observation_spec, env.action_spec)
    finally:
        env.close()


class SebulbaSystem(NamedTuple):
    """A built Sebulba system (a :class:`podracer.loops.System`). Its state is the learner's
    :class:`~podracer.types.LearnerState`; actors' environments start afresh on every run, and
    have the recipe's options (``recipe.env_options``), as the probe's had."""

    recipe: Recipe
    config: SebulbaConfig
    devices: Sequence[jax.Device] | None = None

    def init(self, seed: int):
        """A freshly initialised learner state on the learner mesh (also a checkpoint's template,
        so that a checkpoint restores in place, on every process)."""
        return init_state(self.recipe, self.config, seed, self.devices)

    def run(
        self,
        state=None,
        *,
        seed: int,
        start_update: int = 0,
        hooks: RunHooks | None = None,
        progress=None,
    ) -> RunResult:
        make_env = env_factory(self.recipe.env_id, self.config, seed, self.recipe.env_options)
        return run(
            self.recipe,
            self.config,
            make_env,
            seed=seed,
            progress=progress,
            devices=self.devices,
            state=state,
            start_update=start_update,
            hooks=hooks,
        )

    def evaluator(self, *, seed: int, episodes: int, greedy: bool):
        """``evaluate(state, updates) -> returns [1, episodes]``: the learner's params on a
        separate sync host environment of ``episodes`` environments."""
        from podracer.evaluation import eval_key, evaluate_host

        config = dataclasses.replace(
            self.config,
            envs_per_actor=episodes,
            async_batch_size=0,
            learner_device_ids=self.config.learner_device_ids[:1],
        )
        make_env = env_factory(
            self.recipe.env_id,
            config,
            seed + seeding.EVAL_SEED_OFFSET,
            self.recipe.env_options,
            evaluation=True,
        )
        agent = self.recipe.agent

        def evaluate(state, updates) -> np.ndarray:
            env = make_env(0)
            try:
                agent_state = one_device(agent, state.agent_state)
                params = jax.device_get(agent.actor_params(state.params, agent_state))
                returns = evaluate_host(env, agent, params, eval_key(seed, updates), greedy=greedy)
            finally:
                env.close()
            return returns[None]

        return evaluate


def build_system(
    recipe: Recipe,
    config: SebulbaConfig,
    *,
    devices: Sequence[jax.Device] | None = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
) -> SebulbaSystem:
    """:attr:`Loop.build` of Sebulba (one member; sweeps run their members in turn); the
    environments' options are the recipe's (``env_options`` of :func:`podracer.loops.build`)."""
    if members is not None or periodic is not None:
        raise ValueError("Sebulba runs one member per system: run the members in turn")
    return SebulbaSystem(recipe, config, devices)


LOOP = Loop(
    name="sebulba",
    config_cls=SebulbaConfig,
    default_env=lambda agent_spec: DEFAULT_ENV,
    probe=probe,
    steps_per_update=steps_per_update,
    build=build_system,
    members_in_one_program=False,
)


train = functools.partial(loops.train, LOOP)
"""``train(env_id, agent_config, config, *, seed, total_timesteps, devices, progress, state,
start_update, hooks, env_options)``: :func:`podracer.loops.train` on Sebulba."""
