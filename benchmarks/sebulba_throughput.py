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

``--members 1,4,8`` measures members instead (``docs/population.md``): for each configuration
and each ``P``, ``P`` members in one program (``SebulbaConfig.num_seeds = P``: every actor steps
every member's environments and acts for all of them in one call, the learner updates all of
them in one call) against the same ``P`` members run in turn, one program each (what a sweep on
Sebulba did before, and what Cleanba or a Ray Tune trial does), in the same process. One JSON
line per ``(configuration, P)``: ``together_sps`` and ``in_turn_sps`` (every member's steps per
second of training, compiling left out), ``ratio``, both end to end with compiling
(``*_wall_s``), and ``env_only_sps`` of the ``P * envs_per_actor`` environments alone.

    python benchmarks/sebulba_throughput.py --members 1,4,8 --configs cartpole,breakout-mlp
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse
import dataclasses
import resource
import time

import sleepy_env
from jsonl import emit
from sebulba_common import actor_only_sps, bench, env_only_sps

from podracer import agents
from podracer.agents import PPOConfig
from podracer.loops.sebulba import SebulbaConfig

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
    parser.add_argument(
        "--members",
        help="comma-separated member counts: P members in one program against P runs in turn",
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
    if args.members:
        for repeat in range(args.repeat):
            for name in names:
                env_id, agent_config, config, total = runs[name]
                for count in (int(p) for p in args.members.split(",")):
                    steps = args.total_steps or MEMBER_STEPS.get(name, total)
                    record = members_record(name, env_id, agent_config, config, steps, count)
                    record.update(repeat=repeat, jax=jax.__version__)
                    emit(record, args.out)
        return
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


MEMBER_STEPS = {"cartpole": 65_536, "breakout-mlp": 32 * 32 * 12}
"""Steps per member of ``--members`` runs (the configurations' own are sized for one member)."""


def members_record(name, env_id, agent_config, config, steps: int, count: int) -> dict:
    """``count`` members of ``steps`` steps each in one Sebulba program against the same members
    (seeds ``0 .. count - 1``) run in turn, on JAX's first two devices."""
    import jax

    from podracer import loops

    devices = jax.devices()[:2]
    if len(devices) == 1:  # one accelerator: the actors and the learner share it
        config = dataclasses.replace(config, actor_device_ids=(0,), learner_device_ids=(0,))

    def train(config, seed):
        start = time.perf_counter()
        result = loops.train(
            "sebulba",
            env_id,
            agent_config,
            config,
            seed=seed,
            total_timesteps=steps,
            devices=devices,
        )
        return result.summary, time.perf_counter() - start

    together, together_wall = train(dataclasses.replace(config, num_seeds=count), 0)
    alone = [train(config, seed) for seed in range(count)]
    member_steps = together["total_steps"] * count
    in_turn_run_s = sum(summary["run_s"] for summary, _ in alone)
    envs = dataclasses.replace(config, envs_per_actor=config.envs_per_actor * count)
    return {
        "config": name,
        "env": env_id,
        "members": count,
        "envs_per_actor": config.envs_per_actor,
        "rollout_len": config.rollout_len,
        "steps_per_member": together["total_steps"],
        "together_sps": together["sps"],
        "in_turn_sps": member_steps / in_turn_run_s,
        "ratio": together["sps"] / (member_steps / in_turn_run_s),
        "together_wall_s": together_wall,
        "in_turn_wall_s": sum(wall for _, wall in alone),
        "together_compile_s": together["compile_s"],
        "in_turn_compile_s": sum(summary["compile_s"] for summary, _ in alone),
        "together_learner_s": together["learner_time_s"],
        "together_actor_s": together["actor_time_s"],
        "env_only_sps": env_only_sps(env_id, envs, min(member_steps, 100_000)),
        "final_return_per_seed": together["final_return_per_seed"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


if __name__ == "__main__":
    main()
