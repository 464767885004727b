"""Agents, one file each, each exporting one :class:`~podracer.agents.spec.AgentSpec` as
``SPEC``; :data:`AGENTS` is the registry (:func:`register` adds one, :func:`get` finds one by
name or by ``module:attribute``)."""

from __future__ import annotations

from typing import Any

from podracer.agents import dqn, impala, muzero, ppo, pqn, qlambda, sac
from podracer.agents.dqn import DQNConfig
from podracer.agents.impala import IMPALAConfig
from podracer.agents.muzero import MuZeroConfig
from podracer.agents.policy import ActorCriticFields, learning_rate
from podracer.agents.ppo import PPOConfig
from podracer.agents.pqn import PQNConfig
from podracer.agents.qlambda import QLambdaConfig
from podracer.agents.sac import SACConfig
from podracer.agents.spec import (
    AGENTS,
    AgentSpec,
    Space,
    epochs_learner,
    get,
    register,
    spec_of,
)
from podracer.types import ActionSpec, ObservationSpec
from podracer.util.imports import load_attribute

for _spec in (ppo.SPEC, qlambda.SPEC, impala.SPEC, pqn.SPEC, dqn.SPEC, sac.SPEC, muzero.SPEC):
    register(_spec)


def build(
    config: Any,
    action_spec: ActionSpec | int,
    num_updates: int,
    observation_spec: ObservationSpec | None = None,
):
    """``(agent, optimizer)`` for a config of a registered agent (:func:`spec_of`).

    Args:
      config: the config of a registered agent.
      action_spec: the environment's action spec (an int: that many discrete actions).
      num_updates: the run's updates, the length of learning-rate schedules.
      observation_spec: one observation's spec (observation normalisation needs it).

    Returns:
      ``(agent, optimizer)``: the :class:`~podracer.types.Agent` (wrapped for normalisation
      when the config asks for it) and its optax transformation.
    """
    return spec_of(config).build(config, action_spec, num_updates, observation_spec)


__all__ = [
    "AGENTS",
    "ActorCriticFields",
    "AgentSpec",
    "DQNConfig",
    "IMPALAConfig",
    "MuZeroConfig",
    "PPOConfig",
    "PQNConfig",
    "QLambdaConfig",
    "SACConfig",
    "Space",
    "build",
    "dqn",
    "epochs_learner",
    "get",
    "impala",
    "learning_rate",
    "load_attribute",
    "muzero",
    "ppo",
    "pqn",
    "qlambda",
    "register",
    "sac",
    "spec_of",
]
