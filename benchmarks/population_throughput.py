"""Population throughput: the cost of the training pool (1, 8, 64 members) against the
environments alone.

    python benchmarks/population_throughput.py                  # 1, 8 and 64 members
    python benchmarks/population_throughput.py --sizes 16 --steps-per-member 100000
    python benchmarks/population_throughput.py --sizes 8 --member-loop map   # the exact mode

PPO on ``gymnax:CartPole-v1`` (4 environments x 128 steps per member, the configuration of
``anakin_throughput.py``), a leaderboard (8 greedy evaluation episodes per member) and a
tournament every 10 updates. One JSON line per population size on stdout: ``sps`` (steps of
every member together per second, after compiling, evaluation and tournaments included),
``sps_per_member``, ``compile_s``, ``env_only_sps`` (the same ``members x num_envs``
environments stepped with random actions in the same process, through the same scan structure),
``ratio`` and the peak memory. A population of 1 has no one to replace: it is evaluated only.
``--member-loop map`` measures ``AnakinConfig.member_loop="map"`` (members one after another,
each bitwise a separate run) against the default ``vmap``.
"""

from __future__ import annotations

import argparse
import sys

import jax
from anakin_throughput import env_only_sps, peak_memory
from jsonl import emit

from podracer import agents, loops
from podracer.agents import PPOConfig
from podracer.loops import anakin
from podracer.loops.anakin import AnakinConfig, choose_updates_per_call
from podracer.population.ensemble import PopulationConfig, build_system


def bench(
    size: int,
    steps_per_member: int,
    num_envs: int = 4,
    rollout_len: int = 128,
    member_loop: str = "vmap",
) -> dict:
    config = AnakinConfig(num_envs=num_envs, rollout_len=rollout_len, member_loop=member_loop)
    population = PopulationConfig(
        size=size, interval=10, tournament=size > 1, init=("lr=1e-5:1e-2",), eval_episodes=8
    )
    system = build_system(
        loops.get("anakin"),
        "gymnax:CartPole-v1",
        agents.get("ppo"),
        PPOConfig(),
        config,
        population,
        total_timesteps=steps_per_member,
    )
    result = anakin.run(system, seed=0, total_timesteps=steps_per_member)
    summary = result.summary
    num_updates = summary["num_updates"]
    chunk = choose_updates_per_call(num_updates)
    env_updates = max(chunk, min(num_updates, 2_000_000 // (size * config.steps_per_update)))
    env_sps = env_only_sps("gymnax:CartPole-v1", size * num_envs, rollout_len, env_updates)
    return {
        "config": f"population-{size}" + ("" if member_loop == "vmap" else f"-{member_loop}"),
        "population": size,
        "member_loop": member_loop,
        "num_envs": num_envs,
        "rollout_len": rollout_len,
        "devices": system.mesh.devices.size,
        "backend": jax.default_backend(),
        "total_steps": summary["total_steps"] * size,
        "sps": summary["sps"],
        "sps_per_member": summary["sps"] / size,
        "compile_s": summary["compile_s"],
        "env_only_sps": env_sps,
        "ratio": summary["sps"] / env_sps,
        "leaderboards": len(result.events),
        "final_median_score": result.events[-1]["median_score"] if result.events else None,
        "learner_layout": system.recipe.layout._asdict(),
        **peak_memory(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--steps-per-member", type=int, default=100_000)
    parser.add_argument(
        "--member-loop",
        choices=("vmap", "map"),
        default="vmap",
        help="how a device runs its members (AnakinConfig.member_loop)",
    )
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    for size in args.sizes:
        emit(bench(size, args.steps_per_member, member_loop=args.member_loop), args.out)


if __name__ == "__main__":
    sys.exit(main())
