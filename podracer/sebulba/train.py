"""Sebulba from ids and configs: the environment factory and :func:`train`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from podracer.config import ConfigValueError
from podracer.core.learner import choose_execution
from podracer.sebulba.config import SebulbaConfig
from podracer.sebulba.system import SebulbaResult, run


def env_factory(
    env_id: str, config: SebulbaConfig, seed: int, env_options: dict[str, Any] | None = None
) -> Callable[[int], Any]:
    """``make_env(actor_index)`` for an id: ``envpool:<task>`` builds envpool environments
    (``env_options``: envpool / Atari options, see :mod:`podracer.host_envs.envpool`);
    ``catch`` and ``gymnax:<name>`` run the JAX environment on the host CPU (for tests and
    comparisons with Anakin). Each actor gets its own seed."""
    from podracer import envs, host_envs
    from podracer.host_envs.jax_env import JaxHostEnvironment

    if env_id.startswith("envpool:"):
        batch_size = config.async_batch_size or None

        def make_env(actor: int):
            return host_envs.make(
                env_id,
                num_envs=config.envs_per_actor,
                batch_size=batch_size,
                seed=seed * 10_007 + actor + 1,
                num_threads=config.env_threads,
                **(env_options or {}),
            )
    else:
        envs.make(env_id)  # fail now, with the list of known ids
        if env_options:
            raise ConfigValueError(f"env_options {sorted(env_options)} apply to envpool ids only")
        if config.async_batch_size:
            raise ConfigValueError(
                f"SebulbaConfig.async_batch_size={config.async_batch_size} needs an envpool "
                f"environment, not {env_id!r}"
            )

        def make_env(actor: int):
            return JaxHostEnvironment(
                envs.make(env_id), config.envs_per_actor, seed=seed * 10_007 + actor + 1
            )

    return make_env


def train(
    env_id: str,
    agent_config: Any,
    config: SebulbaConfig,
    *,
    seed: int = 0,
    total_timesteps: int,
    devices: Sequence[jax.Device] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    env_options: dict[str, Any] | None = None,
    **run_options: Any,
) -> SebulbaResult:
    """Builds the environments, the agent and its optimizer, and runs Sebulba.

    ``run_options`` go to :func:`podracer.sebulba.system.run` (``state``, ``start_update``,
    ``hooks`` when resuming or checkpointing)."""
    from podracer import agents

    make_env = env_factory(env_id, config, seed, env_options)
    probe = make_env(-1)  # an unknown id or option fails here, in the caller's thread
    num_actions = probe.action_spec.num_actions
    probe.close()
    num_updates = max(1, total_timesteps // (config.steps_per_update * jax.process_count()))
    agent, optimizer = agents.build(agent_config, num_actions, num_updates)
    result = run(
        make_env,
        agent,
        optimizer,
        config,
        num_epochs=agent_config.num_epochs,
        num_minibatches=agent_config.num_minibatches,
        seed=seed,
        total_timesteps=total_timesteps,
        progress=progress,
        devices=devices,
        execution=choose_execution(agent_config, config, devices),
        **run_options,
    )
    result.summary.update(env=env_id, arch="sebulba", seed=seed)
    return result
