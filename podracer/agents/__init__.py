"""Agents, one file each: a frozen config, ``make_agent(config, num_actions)`` and
``make_optimizer(config, num_updates)``. :data:`AGENTS` maps the command-line names to them."""

from __future__ import annotations

from types import ModuleType
from typing import Any, NamedTuple

from podracer.agents import impala, ppo, qlambda
from podracer.agents.impala import IMPALAConfig
from podracer.agents.ppo import PPOConfig
from podracer.agents.qlambda import QLambdaConfig
from podracer.config import ConfigValueError


class AgentEntry(NamedTuple):
    config_cls: type
    module: ModuleType
    default_env: str  # the environment the command line uses when --env is not given
    arch_defaults: dict[str, Any]  # loop sizes that suit the agent (command-line defaults)


AGENTS: dict[str, AgentEntry] = {
    "ppo": AgentEntry(PPOConfig, ppo, "gymnax:CartPole-v1", {}),
    # The Podracer paper's Catch demo: 128 environments, rollouts of 16 steps.
    "qlambda": AgentEntry(QLambdaConfig, qlambda, "catch", {"num_envs": 128, "rollout_len": 16}),
    "impala": AgentEntry(
        IMPALAConfig, impala, "gymnax:CartPole-v1", {"num_envs": 16, "rollout_len": 32}
    ),
}


def get(name: str) -> AgentEntry:
    if name not in AGENTS:
        raise ConfigValueError(f"unknown agent {name!r}: choose one of {', '.join(AGENTS)}")
    return AGENTS[name]


def build(config: Any, num_actions: int, num_updates: int):
    """``(agent, optimizer)`` for a config of one of :data:`AGENTS`."""
    for entry in AGENTS.values():
        if isinstance(config, entry.config_cls):
            module = entry.module
            agent = module.make_agent(config, num_actions)
            return agent, module.make_optimizer(config, num_updates)
    raise TypeError(f"no agent takes a config of type {type(config).__name__}")


__all__ = [
    "AGENTS",
    "IMPALAConfig",
    "PPOConfig",
    "QLambdaConfig",
    "build",
    "get",
    "impala",
    "ppo",
    "qlambda",
]
