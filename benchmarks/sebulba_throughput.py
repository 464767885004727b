"""Sebulba throughput on 2 virtual CPU devices (actor device 0, learner device 1).

    python benchmarks/sebulba_throughput.py           # CartPole (MLP PPO), Breakout (IMPALA, PPO)
    python benchmarks/sebulba_throughput.py --configs cartpole,cartpole-async --total-steps 200000
    python benchmarks/sebulba_throughput.py --configs cartpole --inline-dispatch
    python benchmarks/sebulba_throughput.py --configs breakout-mlp,breakout-mlp-async --repeat 3

One JSON line per configuration: ``sps`` (training), the actor and learner time splits,
``env_only_sps`` (envpool alone, random actions, same ``num_envs`` / ``batch_size`` /
``num_threads``, in the same process) and ``actor_only_sps`` (acting and stepping with frozen
params, no learner: the actor's overhead over the environment); ``cpu_cores`` and
``cpu_us_per_step`` of training (``steady_sps``: after the first update), of the actor alone and
of envpool alone (process CPU time, every thread's), which say whether a mode left cores idle
and what a step costs in CPU.

``breakout-mlp`` / ``breakout-mlp-async`` compare sync and async mode where the environment is
the expensive part and its step times vary (Atari: a game over costs a reset and up to 30
no-op frames, about 14 steps' worth): envpool Breakout, 32 environments (async: acting on 16 at
a time), 2 envpool threads, IMPALA with a small MLP over the pixels so that the learner is
cheap. ``sleepy`` / ``sleepy-async`` compare them where the environment's steps wait rather than
compute (``sleepy_env.py``: each step sleeps a Pareto-distributed time, mean 3 ms, 99th
percentile 21.5 ms, on a thread of its own), 32 environments, PPO with CartPole's MLP.
``--repeat N`` runs the list N times in turn (pairs measured alternately, so that a
loaded machine's load hits both modes alike).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse
import dataclasses

import sleepy_env
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
    parser.add_argument(
        "--env-threads",
        type=int,
        help="envpool threads per actor for every configuration (default: each its own)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="run the list of configurations this many times"
    )
    args = parser.parse_args(argv)
    import jax

    if args.inline_dispatch:  # read when JAX starts its CPU backend, which it has not yet
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
    if "impala" in agents.AGENTS:  # sync against async where env steps are costly and vary
        small = agents.AGENTS["impala"].config_cls(hidden_sizes=(64,), shared_torso=True)
        atari = dict(envs_per_actor=32, rollout_len=32, env_threads=2, **devices)
        runs["breakout-mlp"] = (
            "envpool:Breakout-v5",
            small,
            SebulbaConfig(**atari),
            32 * 32 * 40,
        )
        runs["breakout-mlp-async"] = (
            "envpool:Breakout-v5",
            small,
            SebulbaConfig(async_batch_size=16, **atari),
            32 * 32 * 40,
        )
    # sync against async where env steps wait (on another process or machine) rather than
    # compute: sleepy_env.py's host environments, in a recipe built on CartPole's specs
    waiting = dict(envs_per_actor=32, rollout_len=32, **devices)
    runs["sleepy"] = (
        sleepy_env.SPECS_OF,
        PPOConfig(lr=1e-3),
        SebulbaConfig(**waiting),
        32 * 32 * 30,
    )
    runs["sleepy-async"] = (
        sleepy_env.SPECS_OF,
        PPOConfig(lr=1e-3),
        SebulbaConfig(async_batch_size=16, **waiting),
        32 * 32 * 30,
    )
    names = args.configs.split(",")
    for name in names:
        if name not in runs:
            raise SystemExit(f"--configs: unknown configuration {name!r}; known: {sorted(runs)}")
    for repeat in range(args.repeat):
        for name in names:
            env_id, agent_config, config, total = runs[name]
            if args.env_threads is not None:
                config = dataclasses.replace(config, env_threads=args.env_threads)
            host = {}
            if name.startswith("sleepy"):
                host = dict(
                    make_env=sleepy_env.make_factory(config),
                    env_label=sleepy_env.SleepyEnvironment(1).id,
                    env_only_steps=32 * 32 * 10,
                    actor_rollouts=10,
                )
            record = bench(name, env_id, agent_config, config, args.total_steps or total, **host)
            if args.repeat > 1:
                record["repeat"] = repeat
            record["jax"] = jax.__version__
            emit(record, args.out)


if __name__ == "__main__":
    main()
