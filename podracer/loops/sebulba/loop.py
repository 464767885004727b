"""Sebulba as a loop of the registry: the environment factory, the system (:func:`build_system`),
and :func:`build` and :func:`train` (the registry's, with :data:`LOOP`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from podracer.core.learner.skeleton import one_device
from podracer.envs.host.members import side_by_side
from podracer.envs.options import EnvOptions
from podracer.loops import registry
from podracer.loops.base import Loop, Members, Periodic, RunHooks, RunResult
from podracer.loops.recipe import EnvFactory, Recipe, as_factory
from podracer.loops.sebulba.config import SebulbaConfig
from podracer.loops.sebulba.members import agent_of, envs_per_device, init_state, member_offsets
from podracer.loops.sebulba.system import run
from podracer.types import EnvSpec, HostEnvironment
from podracer.util import seeding

DEFAULT_ENV = "envpool:CartPole-v1"


def default_env(agent_spec) -> str:
    """Sebulba's environment when none is given: the agent's own default task through envpool
    where envpool has it (SAC's ``gymnax:Pendulum-v1`` is ``envpool:Pendulum-v1``), else
    :data:`DEFAULT_ENV`."""
    prefix, _, task = agent_spec.default_env.partition(":")
    if prefix == "gymnax" and task:
        import envpool

        if task in envpool.list_all_envs():
            return f"envpool:{task}"
    return DEFAULT_ENV


def env_factory(
    env_id: str | EnvFactory,
    config: SebulbaConfig,
    seed: int,
    env_options: EnvOptions | None = None,
    evaluation: bool = False,
    seed_offsets: Sequence[int] | None = None,
) -> Callable[[int], HostEnvironment]:
    """``make_env(actor_index)``: the host environments of one actor, built by the run's
    :class:`~podracer.loops.recipe.EnvFactory` (:meth:`~podracer.loops.recipe.EnvFactory.host`,
    :func:`podracer.envs.host.make`) with the run's ``env_options``
    (:class:`~podracer.envs.EnvOptions`; their ``params`` are an envpool or gymnasium
    environment's ``make`` keyword arguments, a JAX environment's ``default_params`` fields),
    ``config.envs_per_actor`` of them for each member, in async mode when
    ``config.async_batch_size`` is set; each actor of each member gets its own seed
    (:data:`podracer.util.seeding.ENV_SEED_STRIDE`; member ``p``'s are those of a run of seed
    ``seed + seed_offsets[p]``, and its environments are its own envpool), the members' side by
    side (:class:`~podracer.envs.host.members.MemberEnvironments`). The probe, the actors and
    the evaluator (``evaluation``: a JAX environment with its evaluation params) all build
    theirs here.

    Args:
      env_id: a host environment's id (``envpool:...``, ``gymnasium:...``) or a JAX one's
        (stepped on the host), or the run's :class:`~podracer.loops.recipe.EnvFactory` (which
        holds the options: ``env_options`` is then None).
      config: the loop's config: ``envs_per_actor``, ``async_batch_size``, ``env_threads``.
      seed: the run seed; actor ``i`` seeds its environments from ``seed`` and ``i``.
      env_options: the run's :class:`~podracer.envs.EnvOptions` (None: none).
      evaluation: build the evaluator's environments.
      seed_offsets: the members' seed offsets (default: ``range(config.num_seeds)``).

    Returns:
      ``make_env(actor_index) -> HostEnvironment``.
    """
    factory = as_factory(env_id, env_options)
    offsets = range(config.num_seeds) if seed_offsets is None else seed_offsets

    def one_member(actor: int, member_seed: int) -> HostEnvironment:
        return factory.host(
            num_envs=config.envs_per_actor,
            batch_size=config.async_batch_size or None,
            seed=seeding.env_seed(member_seed, actor),
            num_threads=config.env_threads,
            evaluation=evaluation,
        )

    def make_env(actor: int) -> HostEnvironment:
        envs: list[HostEnvironment] = []
        try:
            for offset in offsets:
                envs.append(one_member(actor, seed + int(offset)))
        except BaseException:
            for env in envs:
                env.close()
            raise
        return side_by_side(envs)

    return make_env


def steps_per_update(config: SebulbaConfig) -> int:
    """Environment steps per update, every process's actors together."""
    return config.steps_per_update * jax.process_count()


def probe(
    env: str | EnvFactory,
    config: SebulbaConfig,
    seed: int,
    env_options: EnvOptions | None = None,
) -> EnvSpec:
    """The specs of a host environment of the run's :class:`~podracer.loops.recipe.EnvFactory`
    (its id and options; an id is taken with ``env_options``), built as the actors build theirs
    (:func:`env_factory`; one is built and closed: an unknown id or option fails here, in the
    caller's thread)."""
    env = env_factory(as_factory(env, env_options), config, seed, seed_offsets=(0,))(-1)
    try:
        return EnvSpec(env.observation_spec, env.action_spec)
    finally:
        env.close()


class SebulbaSystem(NamedTuple):
    """A built Sebulba system (a :class:`podracer.loops.System`) of ``config.num_seeds``
    members. Its state is a :class:`~podracer.loops.sebulba.members.SebulbaState` (the members'
    learner states, hyper-parameters and lineage); actors' environments start afresh on every
    run, and have the recipe's options (``recipe.env_options``), as the probe's had."""

    recipe: Recipe
    config: SebulbaConfig
    devices: Sequence[jax.Device] | None = None
    members: Members | None = None
    periodic: Periodic | None = None

    @property
    def envs_per_device(self) -> int:
        """The environments of one member in one learner device's share of an update."""
        return envs_per_device(self.config)

    def init(self, seed: int):
        """A freshly initialised state on the learner mesh (also a checkpoint's template,
        so that a checkpoint restores in place, on every process)."""
        return init_state(
            self.recipe,
            self.config,
            seed,
            self.devices,
            members=self.members,
            periodic=self.periodic,
        )

    def _make_env(self, seed: int):
        return env_factory(
            self.recipe.envs,
            self.config,
            seed,
            seed_offsets=member_offsets(self.config, self.members),
        )

    def run(
        self,
        state=None,
        *,
        seed: int,
        start_update: int = 0,
        hooks: RunHooks | None = None,
        progress=None,
    ) -> RunResult:
        return run(
            self.recipe,
            self.config,
            self._make_env(seed),
            seed=seed,
            progress=progress,
            devices=self.devices,
            state=state,
            start_update=start_update,
            hooks=hooks,
            members=self.members,
            periodic=self.periodic,
        )

    @property
    def num_members(self) -> int:
        return self.config.num_seeds

    def policy(self, state, member: int):
        """``(agent, actor_params)`` of member ``member``, with its hyper-parameters
        (:meth:`podracer.loops.System.policy`)."""
        learner = state.learner
        params, agent_state, hparams = jax.device_get(
            (learner.params, learner.agent_state, state.hparams)
        )
        agent, _ = agent_of(self.recipe, self.members)({n: v[member] for n, v in hparams.items()})
        params, agent_state = jax.tree.map(lambda x: x[member], (params, agent_state))
        return agent, agent.actor_params(params, one_device(agent, agent_state))

    def evaluator(self, *, seed: int, episodes: int, greedy: bool):
        """``evaluate(state, updates) -> returns [members, episodes]``: each member's params
        (with its hyper-parameters) on a separate sync host environment of ``episodes``
        environments, member after member."""
        from podracer.core.evaluation import eval_key, evaluate_host

        config = dataclasses.replace(
            self.config,
            envs_per_actor=episodes,
            async_batch_size=0,
            learner_device_ids=self.config.learner_device_ids[:1],
        )
        offsets = member_offsets(self.config, self.members)

        def evaluate(state, updates) -> np.ndarray:
            rows = []
            for p, offset in enumerate(offsets):
                make_env = env_factory(
                    self.recipe.envs,
                    config,
                    seed + seeding.EVAL_SEED_OFFSET,
                    evaluation=True,
                    seed_offsets=(int(offset),),
                )
                agent, params = self.policy(state, p)
                env = make_env(0)
                try:
                    key = jax.random.fold_in(eval_key(seed, updates), p)
                    rows.append(evaluate_host(env, agent, params, key, greedy=greedy))
                finally:
                    env.close()
            return np.stack(rows)

        return evaluate


def build_system(
    recipe: Recipe,
    config: SebulbaConfig,
    *,
    devices: Sequence[jax.Device] | None = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
) -> SebulbaSystem:
    """:attr:`Loop.build_system` of Sebulba: ``config.num_seeds`` members in one program (a
    sweep's or a population's ``members``, with their hyper-parameters; ``periodic``: a population's
    tournament, between updates); the environments' options are the recipe's (``env_options``
    of :func:`podracer.loops.build`)."""
    if periodic is not None and periodic.apply_scored is None:
        raise ValueError(
            "Sebulba scores its members from their training returns: its Periodic work needs "
            "apply_scored"
        )
    member_offsets(config, members)  # a count that disagrees fails here
    return SebulbaSystem(recipe, config, devices, members, periodic)


LOOP = Loop(
    name="sebulba",
    config_cls=SebulbaConfig,
    default_env=default_env,
    probe=probe,
    steps_per_update=steps_per_update,
    build_system=build_system,
    members_in_one_program=True,
    with_members=lambda config, n: dataclasses.replace(config, num_seeds=n),
    sizes={"envs": "envs_per_actor", "rollout_len": "rollout_len"},
)


build = functools.partial(registry.build, LOOP)
"""``build(env_id, agent_config, config, *, total_timesteps, agent_spec, seed, devices, members,
periodic, env_options)``: :func:`podracer.loops.build` on Sebulba."""

train = functools.partial(registry.train, LOOP)
"""``train(env_id, agent_config, config, *, seed, total_timesteps, devices, progress, state,
start_update, hooks, env_options, ...)``: :func:`podracer.loops.train` on Sebulba."""
