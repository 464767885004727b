"""Sebulba throughput on 2 virtual CPU devices (actor device 0, learner device 1).

    python benchmarks/sebulba_throughput.py           # CartPole (MLP PPO), Breakout (IMPALA, PPO)
    python benchmarks/sebulba_throughput.py --configs cartpole --total-steps 200000

One JSON line per configuration: ``sps`` (training), the actor and learner time splits,
``env_only_sps`` (envpool alone, random actions, same ``num_envs`` / ``batch_size`` /
``num_threads``, in the same process) and ``actor_only_sps`` (acting and stepping with frozen
params, no learner: the actor's overhead over the environment).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse
import json
import resource
import time

import jax
import numpy as np

from podracer import agents, host_envs
from podracer.agents import PPOConfig
from podracer.sebulba import (
    HostCarry,
    SebulbaConfig,
    env_factory,
    host_rollout,
    rollout_keys,
    train,
)
from podracer.sebulba.system import make_act


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


def actor_only_sps(env_id: str, agent_config, config: SebulbaConfig, rollouts: int) -> float:
    """One actor acting and stepping with frozen params on device 0 (sync mode), no learner."""
    make_env = env_factory(env_id, config, seed=0)
    env = make_env(0)
    agent, _ = agents.build(agent_config, env.action_spec.num_actions, 1)
    device = jax.devices()[0]
    obs = np.zeros(env.observation_spec.shape, env.observation_spec.dtype)
    params = jax.device_put(agent.init(jax.random.key(0), obs), device)
    act = make_act(agent)
    carry = HostCarry(env.reset(), ())
    keys = jax.device_put(rollout_keys(jax.random.key(1), config.rollout_len), device)
    host_rollout(env, act, params, carry, keys)  # compile
    start = time.perf_counter()
    for _ in range(rollouts):
        carry, _, _ = host_rollout(env, act, params, carry, keys)
    elapsed = time.perf_counter() - start
    env.close()
    return rollouts * config.rollout_len * config.envs_per_actor / elapsed


def bench(name, env_id, agent_config, config, total_steps) -> dict:
    result = train(
        env_id, agent_config, config, seed=0, total_timesteps=total_steps, devices=jax.devices()[:2]
    )
    s = result.summary
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
        "env_only_sps": env_only_sps(env_id, config, min(total_steps, 200_000)),
        "actor_only_sps": actor_only_sps(env_id, agent_config, config, rollouts=20),
        "final_return": s["final_return"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="cartpole,breakout,breakout-ppo")
    parser.add_argument("--total-steps", type=int)
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    devices = dict(actor_device_ids=(0,), learner_device_ids=(1,))
    runs = {
        "cartpole": (
            "envpool:CartPole-v1",
            PPOConfig(lr=1e-3),
            SebulbaConfig(envs_per_actor=32, rollout_len=32, **devices),
            300_000,
        ),
    }
    if "impala" in agents.AGENTS:
        impala = agents.AGENTS["impala"].config_cls(torso="impala_resnet", shared_torso=True)
        runs["breakout"] = (
            "envpool:Breakout-v5",
            impala,
            SebulbaConfig(envs_per_actor=16, rollout_len=32, **devices),
            16 * 32 * 6,
        )
    runs["breakout-ppo"] = (
        "envpool:Breakout-v5",
        PPOConfig(torso="impala_resnet", shared_torso=True),
        SebulbaConfig(envs_per_actor=16, rollout_len=32, **devices),
        16 * 32 * 4,
    )
    for name in args.configs.split(","):
        if name not in runs:
            raise SystemExit(f"--configs: unknown configuration {name!r}; known: {sorted(runs)}")
        env_id, agent_config, config, total = runs[name]
        line = json.dumps(bench(name, env_id, agent_config, config, args.total_steps or total))
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
