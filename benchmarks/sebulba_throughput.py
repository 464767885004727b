"""Sebulba throughput on 2 virtual CPU devices (actor device 0, learner device 1).

    python benchmarks/sebulba_throughput.py           # CartPole (MLP PPO), Breakout (IMPALA, PPO)
    python benchmarks/sebulba_throughput.py --configs cartpole,cartpole-async --total-steps 200000
    python benchmarks/sebulba_throughput.py --configs cartpole --inline-dispatch

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

from jsonl import emit
from sebulba_common import actor_only_sps, bench, env_only_sps

from podracer import agents
from podracer.agents import PPOConfig
from podracer.sebulba import SebulbaConfig

__all__ = ["actor_only_sps", "bench", "env_only_sps", "main"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="cartpole,cartpole-async,breakout,breakout-ppo")
    parser.add_argument("--total-steps", type=int)
    parser.add_argument("--out", help="also append the JSON lines to this file")
    parser.add_argument(
        "--inline-dispatch",
        action="store_true",
        help="run XLA:CPU computations on the calling thread (jax_cpu_enable_async_dispatch "
        "off): saves the actor the hand-off to XLA's worker thread at every step",
    )
    args = parser.parse_args(argv)
    if args.inline_dispatch:  # read when JAX starts its CPU backend, which it has not yet
        import jax

        jax.config.update("jax_cpu_enable_async_dispatch", False)
    devices = dict(actor_device_ids=(0,), learner_device_ids=(1,))
    runs = {
        "cartpole": (
            "envpool:CartPole-v1",
            PPOConfig(lr=1e-3),
            SebulbaConfig(envs_per_actor=32, rollout_len=32, **devices),
            300_000,
        ),
        "cartpole-async": (  # envpool's async mode: 32 envs, acting on 16 at a time
            "envpool:CartPole-v1",
            PPOConfig(lr=1e-3),
            SebulbaConfig(envs_per_actor=32, rollout_len=32, async_batch_size=16, **devices),
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
        emit(bench(name, env_id, agent_config, config, args.total_steps or total), args.out)


if __name__ == "__main__":
    main()
