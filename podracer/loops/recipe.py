"""The recipe: a run assembled once, from an environment id and its options, an agent config,
the run's length and the loop's config.

The environment factory (:class:`EnvFactory`: the id *and* its
:class:`~podracer.envs.EnvOptions`) is made once; the environment is probed once through it
(its :class:`~podracer.types.EnvSpec`), the agent and its optimizer are built once, the update
counts computed once and the learner's layout chosen once for the backend; every loop, sweep and
population reads them from here. Every environment of a run comes from the recipe's factory: the
one JAX environment (:meth:`Recipe.make_env`, built once: the probe's, the rollout's, the
evaluator's, a population's tournament's), and host environments
(:meth:`EnvFactory.host`: Sebulba's probe, actors and evaluator, each its own envpool).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import optax

from podracer.agents.spec import AgentSpec
from podracer.envs.options import EnvOptions
from podracer.loops.layout import LearnerLayout, learner_layout
from podracer.types import Agent, Environment, EnvSpec, HostEnvironment, Learner


class EnvFactory:
    """THE environment factory of a run: its id and its :class:`~podracer.envs.EnvOptions`,
    fixed once.

    - :meth:`make` (also calling the factory): the run's JAX environment
      (:func:`podracer.envs.make_with_options`), built on the first call; every later call
      returns that same object (a JAX environment is pure: one serves the probe, the rollout,
      the evaluator and a population's tournament);
    - :meth:`host`: a new host environment of ``num_envs`` (:func:`podracer.envs.host.make`)
      with the same options, each call its own (an envpool holds threads and state: Sebulba's
      probe builds one and closes it, each actor builds its own).
    """

    def __init__(self, env_id: str, options: EnvOptions | None = None):
        self.env_id = env_id
        self.options = checked_options(options)
        self._env = None
        self._lock = threading.Lock()

    def make(self) -> Environment:
        """The run's JAX environment with its options, built once."""
        with self._lock:
            if self._env is None:
                from podracer.envs.factory import make_with_options

                self._env = make_with_options(self.env_id, self.options)
            return self._env

    __call__ = make

    def host(self, **kwargs: Any) -> HostEnvironment:
        """A new host environment with the options (``kwargs``: :func:`podracer.envs.host.make`'s
        ``num_envs``, ``batch_size``, ``seed``, ``num_threads``, ``evaluation``)."""
        from podracer.envs import host as host_envs

        return host_envs.make(self.env_id, env_options=self.options, **kwargs)

    def __repr__(self) -> str:
        return f"EnvFactory({self.env_id!r}, {self.options!r})"


def checked_options(options: EnvOptions | None) -> EnvOptions:
    """``options``, or no option for None; anything else than an
    :class:`~podracer.envs.EnvOptions` is refused (a mapping of parameters becomes one at the
    edge, with :func:`podracer.envs.options.as_options`)."""
    if options is None:
        return EnvOptions()
    if not isinstance(options, EnvOptions):
        raise TypeError(
            f"env_options={options!r} is not allowed: give an EnvOptions "
            "(podracer.envs.options.as_options turns a mapping of parameters into one)"
        )
    return options


def as_factory(env: str | EnvFactory, env_options: EnvOptions | None = None) -> EnvFactory:
    """``env`` as an :class:`EnvFactory`: a factory as it is (``env_options`` must then be
    None), an id with ``env_options``."""
    if isinstance(env, EnvFactory):
        if env_options is not None and checked_options(env_options) != env.options:
            raise ValueError(
                f"as_factory: env_options={env_options!r} differ from the factory's "
                f"{env.options!r}: give one or the other"
            )
        return env
    return EnvFactory(env, env_options)


class Recipe(NamedTuple):
    """What every loop builds a system from."""

    env_id: str
    env_spec: EnvSpec  # one observation's spec and the action spec, probed once
    agent_spec: AgentSpec
    agent_config: Any
    agent: Agent
    optimizer: optax.GradientTransformation
    total_timesteps: int  # steps per member, as asked
    steps_per_update: int  # environment steps per update, per member, every process together
    num_updates: int  # max(1, total_timesteps // steps_per_update)
    layout: LearnerLayout
    env_options: EnvOptions = EnvOptions()  # the environment's parameters and observation mask
    env_factory: EnvFactory | None = None  # of env_id and env_options, made once (make_recipe)

    @property
    def envs(self) -> EnvFactory:
        """The run's :class:`EnvFactory` (one of ``env_id`` and ``env_options`` for a recipe
        made without one)."""
        if self.env_factory is None:
            return EnvFactory(self.env_id, self.env_options)
        return self.env_factory

    def make_env(self) -> Environment:
        """The run's JAX environment, with its options, built once by the recipe's factory
        (:meth:`EnvFactory.make`): the probe's, Anakin's rollout and evaluator, a population's
        tournament. (Host environments: :meth:`EnvFactory.host`, as Sebulba's
        ``env_factory`` builds them.)"""
        return self.envs.make()

    def member(self, hparams: dict[str, Any]) -> tuple[Agent, optax.GradientTransformation]:
        """``(agent, optimizer)`` of a member whose hyper-parameters ``hparams`` (traced scalars
        in a sweep or a population) replace the config's."""
        config = dataclasses.replace(self.agent_config, **hparams)  # traced values skip checks
        return self.agent_spec.build(
            config, self.env_spec.action, self.num_updates, self.env_spec.observation
        )

    def learner(
        self,
        agent: Agent | None = None,
        optimizer: optax.GradientTransformation | None = None,
        *,
        axis_name: str | None = None,
        envs_per_device: int = 0,
        no_policy_lag: bool = False,
    ) -> Learner:
        """The agent's learner core (its spec's ``make_learner``) in this recipe's layout;
        ``agent`` and ``optimizer`` default to the recipe's (a member passes its own).
        ``envs_per_device``: the environments of one learner device's share of a trajectory
        (what a replay of windows keeps a stream for). ``no_policy_lag``: the loop acts with
        the params it learns (Anakin; :func:`podracer.core.learner.make_learner`).

        The spec's ``make_learner`` is called as ``make_learner(agent, optimizer, config, *,
        axis_name, unroll, microbatch_steps, envs_per_device, no_policy_lag)``, every keyword
        given (a ``**layout`` parameter takes them all, as
        :func:`podracer.agents.spec.epochs_learner` does)."""
        return self.agent_spec.make_learner(
            self.agent if agent is None else agent,
            self.optimizer if optimizer is None else optimizer,
            self.agent_config,
            axis_name=axis_name,
            envs_per_device=envs_per_device,
            no_policy_lag=no_policy_lag,
            **self.layout._asdict(),
        )

    def example_obs(self):
        """One zero observation of the environment's shape and dtype (NumPy; a dict of them
        for a dict observation)."""
        from podracer.types import zero_observation

        return zero_observation(self.env_spec.observation)


def make_recipe(
    loop,
    env_id: str | EnvFactory,
    agent_spec: AgentSpec,
    agent_config: Any,
    loop_config: Any,
    *,
    total_timesteps: int,
    seed: int = 0,
    devices: Sequence[jax.Device] | None = None,
    env_options: EnvOptions | None = None,
) -> Recipe:
    """The :class:`Recipe` of a run on ``loop`` (a :class:`~podracer.loops.Loop`): one
    :class:`EnvFactory` of ``env_id`` and ``env_options``, which
    the probe builds its environment with, as every environment of the run is built.

    Args:
      loop: the :class:`~podracer.loops.Loop` (its ``probe`` gives the specs, its
        ``steps_per_update`` the update count).
      env_id: the environment id, or its :class:`EnvFactory` (with the options).
      agent_spec: the agent's :class:`~podracer.agents.AgentSpec`.
      agent_config: that agent's config.
      loop_config: the loop's config.
      total_timesteps: environment steps per member; sets ``num_updates``, hence the length of
        learning-rate schedules.
      seed: the run seed (for environments whose probe depends on it).
      devices: the learner's devices, for its layout (default: every device).
      env_options: the environment's :class:`~podracer.envs.EnvOptions` (None: none).

    Returns:
      The :class:`Recipe`: the probed specs, the agent and optimizer, the update counts and
      the learner layout, built once for the run.
    """
    factory = as_factory(env_id, env_options)
    env_id, env_options = factory.env_id, factory.options
    env_spec = loop.probe(factory, loop_config, seed)
    steps_per_update = loop.steps_per_update(loop_config)
    num_updates = max(1, total_timesteps // steps_per_update)
    agent, optimizer = agent_spec.build(
        agent_config, env_spec.action, num_updates, env_spec.observation
    )
    return Recipe(
        env_id=env_id,
        env_spec=env_spec,
        agent_spec=agent_spec,
        agent_config=agent_config,
        agent=agent,
        optimizer=optimizer,
        total_timesteps=total_timesteps,
        steps_per_update=steps_per_update,
        num_updates=num_updates,
        layout=learner_layout(agent_config, loop_config, devices),
        env_options=env_options,
        env_factory=factory,
    )
