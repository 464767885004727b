"""Sebulba measurements shared by ``sebulba_throughput.py`` and ``suite.py``: envpool alone, one
actor alone, and a training run's JSON record.

Importing this module sets no device count: ``sebulba_throughput.py`` asks for two virtual CPU
devices itself, before JAX starts; ``suite.py`` uses the devices it finds.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Sequence

import jax
import numpy as np

from podracer import agents, host_envs, loops, ops, sebulba
from podracer.core import RolloutState
from podracer.sebulba import SebulbaConfig, env_factory, host_act, host_rollout, rollout_keys
from podracer.sebulba.system import AsyncCollector, Timers


def env_only_sps(env_id: str, config: SebulbaConfig, steps: int) -> float:
    """envpool alone with uniformly random actions."""
    env = host_envs.make(
        env_id,
        num_envs=config.envs_per_actor,
        num_threads=config.env_threads,
        batch_size=config.async_batch_size or None,
    )
    rng = np.random.default_rng(0)
    n = env.action_spec.num_actions
    if env.batch_size < env.num_envs:
        env.async_reset()
        start = time.perf_counter()
        for _ in range(steps // env.batch_size):
            _, ids = env.recv()
            env.send(rng.integers(0, n, len(ids)), ids)
        done = steps // env.batch_size * env.batch_size
    else:
        env.reset()
        start = time.perf_counter()
        for _ in range(steps // env.num_envs):
            env.step(rng.integers(0, n, env.num_envs))
        done = steps // env.num_envs * env.num_envs
    elapsed = time.perf_counter() - start
    env.close()
    return done / elapsed


def actor_only_sps(
    env_id: str, agent_config, config: SebulbaConfig, rollouts: int, device=None
) -> float:
    """One actor acting and stepping with frozen params on ``device`` (default: JAX's first),
    no learner; async mode (``config.async_batch_size``) through the training run's
    ``AsyncCollector``."""
    make_env = env_factory(env_id, config, seed=0)
    env = make_env(0)
    agent, _ = agents.build(agent_config, env.action_spec.num_actions, 1)
    device = device or jax.devices()[0]
    obs = np.zeros(env.observation_spec.shape, env.observation_spec.dtype)
    params = jax.device_put(agent.init(jax.random.key(0), obs), device)
    act = host_act(agent)
    if env.is_async:
        collector = AsyncCollector(env, config.rollout_len, agent.initial_actor_state(env.num_envs))
        key = jax.device_put(jax.random.key(1), device)

        def rollout():
            collector.rollout(act, params, key, Timers())

    else:
        initial = jax.device_put(agent.initial_actor_state(env.num_envs), device)
        carry = RolloutState((), env.reset(), initial)
        keys = jax.device_put(rollout_keys(jax.random.key(1), config.rollout_len), device)

        def rollout():
            nonlocal carry
            carry, _, _ = host_rollout(env, act, params, carry, keys)

    with ops.unrolled_threefry():  # compiles the step as the training run does
        rollout()
    start = time.perf_counter()
    for _ in range(rollouts):
        rollout()
    elapsed = time.perf_counter() - start
    env.close()
    return rollouts * config.rollout_len * config.envs_per_actor / elapsed


def bench(
    name: str,
    env_id: str,
    agent_config,
    config: SebulbaConfig,
    total_steps: int,
    devices: Sequence[jax.Device] | None = None,
    env_only_steps: int = 200_000,
    actor_rollouts: int = 20,
) -> dict:
    """Trains on ``devices`` (default: JAX's first two) and measures envpool alone and one actor
    alone in the same process; ``learner_layout`` is the layout the run's recipe chose."""
    devices = list(devices) if devices is not None else jax.devices()[:2]
    system = loops.build(
        sebulba.LOOP,
        env_id,
        agents.spec_of(agent_config),
        agent_config,
        config,
        total_timesteps=total_steps,
        devices=devices,
    )
    s = system.run(seed=0).summary
    actor_device = devices[config.actor_device_ids[0]]
    return {
        "config": name,
        "env": env_id,
        "envs_per_actor": config.envs_per_actor,
        "rollout_len": config.rollout_len,
        "async_batch_size": config.async_batch_size,
        "total_steps": s["total_steps"],
        "sps": s["sps"],
        "compile_s": s["compile_s"],
        "actor_time_s": s["actor_time_s"],
        "learner_time_s": s["learner_time_s"],
        "policy_lag_mean": s["policy_lag_mean"],
        "queue_size_mean": s["queue_size_mean"],
        "env_only_sps": env_only_sps(env_id, config, min(total_steps, env_only_steps)),
        "actor_only_sps": actor_only_sps(
            env_id, agent_config, config, rollouts=actor_rollouts, device=actor_device
        ),
        "final_return": s["final_return"],
        "learner_layout": system.recipe.layout._asdict(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
