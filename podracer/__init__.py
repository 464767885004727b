"""podracer: scalable reinforcement learning in JAX on the two Podracer architectures.

The names a researcher imports::

    import podracer
    result = podracer.train("gymnax:CartPole-v1", podracer.PPOConfig(), podracer.AnakinConfig(),
                            total_timesteps=500_000)

- training: :func:`train` (either loop, by the type of its config), :class:`AnakinConfig`,
  :class:`SebulbaConfig`, :class:`RunResult`;
- agents: :class:`PPOConfig`, :class:`IMPALAConfig`, :class:`QLambdaConfig`, the registry
  (:data:`AGENTS`, :func:`register_agent`, :func:`get_agent`) and :class:`AgentSpec`;
- environments: :func:`make_env`, :func:`register_env`, :class:`EnvOptions` (a run's
  environment parameters and observation mask: ``train(..., env_options=EnvOptions(
  params={"memory_length": 10}, observe=(0, 2)))``);
- loops: :mod:`podracer.loops` (``Recipe``, ``Loop``, the registry);
- the core: :func:`make_learner`, :func:`gae`, :func:`vtrace` and the contracts of
  :mod:`podracer.types`.
"""

from __future__ import annotations

from typing import Any

from podracer import loops
from podracer.agents import AGENTS, AgentSpec, IMPALAConfig, PPOConfig, QLambdaConfig, Space
from podracer.agents import get as get_agent
from podracer.agents import register as register_agent
from podracer.core import gae, make_learner, make_rollout
from podracer.core.returns import vtrace
from podracer.envs import EnvOptions
from podracer.envs import make as make_env
from podracer.envs import register as register_env
from podracer.envs.options import as_options
from podracer.loops import Recipe, RunResult
from podracer.loops.anakin import AnakinConfig
from podracer.loops.sebulba import SebulbaConfig
from podracer.types import (
    ActorOutput,
    Agent,
    BoundedActionSpec,
    DiscreteActionSpec,
    Environment,
    EnvSpec,
    HostEnvironment,
    Learner,
    LearnerState,
    ObservationSpec,
    TimeStep,
    Trajectory,
)


def train(env_id: str, agent_config: Any, loop_config: Any, **kwargs: Any) -> RunResult:
    """Trains a registered agent's config on the loop whose config ``loop_config`` is (an
    :class:`AnakinConfig` or a :class:`SebulbaConfig`): :func:`podracer.loops.train`, whose
    keywords (``seed``, ``total_timesteps``, ``devices``, ``progress``, ...) it takes.

    ``env_options``: the environment's options on either loop, an :class:`EnvOptions`
    (``EnvOptions(params={"memory_length": 10}, observe=(0, 2))``: EnvParams fields of a JAX
    environment or ``make`` keywords of a host one, and the observation entries kept) or a
    mapping of its ``params`` (``env_options={"episodic_life": True}``).

    Args:
      env_id: the environment (``"gymnax:CartPole-v1"``, ``"envpool:Breakout-v5"``, ...;
        :func:`podracer.envs.make`, :func:`podracer.envs.host.make`).
      agent_config: the config of a registered agent (:class:`PPOConfig`, ...); it chooses the
        agent (:func:`podracer.agents.spec_of`).
      loop_config: an :class:`AnakinConfig` or a :class:`SebulbaConfig`; it chooses the loop.
      **kwargs: :func:`podracer.loops.train`'s keywords: ``total_timesteps`` (required; steps
        per member), ``seed``, ``devices``, ``progress``, ``env_options``, ...

    Returns:
      The :class:`RunResult`: ``summary`` (the command line's final JSON line), the final
      ``state``, ``history`` (the per-update metrics) and ``events``; ``result.params`` are
      the final params as NumPy.
    """
    kwargs["env_options"] = as_options(kwargs.get("env_options"))  # a mapping: its params
    return loops.train(loops.for_config(loop_config), env_id, agent_config, loop_config, **kwargs)


__all__ = [
    "AGENTS",
    "ActorOutput",
    "Agent",
    "AgentSpec",
    "AnakinConfig",
    "BoundedActionSpec",
    "DiscreteActionSpec",
    "EnvOptions",
    "EnvSpec",
    "Environment",
    "HostEnvironment",
    "IMPALAConfig",
    "Learner",
    "LearnerState",
    "ObservationSpec",
    "PPOConfig",
    "QLambdaConfig",
    "Recipe",
    "RunResult",
    "SebulbaConfig",
    "Space",
    "TimeStep",
    "Trajectory",
    "gae",
    "get_agent",
    "loops",
    "make_env",
    "make_learner",
    "make_rollout",
    "register_agent",
    "register_env",
    "train",
    "vtrace",
]
