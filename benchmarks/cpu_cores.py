"""Members on a CPU's cores: N vmapped seeds on one XLA:CPU device against the same N seeds
placed one group per core (what ``podracer train --arch.num-seeds N`` does on a CPU).

    python benchmarks/cpu_cores.py                       # 2 seeds and 2 x cores seeds
    python benchmarks/cpu_cores.py --seeds 8 --repeats 3 --steps-per-seed 300000

The script gives XLA:CPU one device per core before JAX starts
(:func:`podracer.parallel.use_cpu_cores`), then measures, alternately and ``--repeats`` times,
the same run on ``devices[:1]`` and on :func:`podracer.parallel.member_placement`'s devices. One
JSON line per seed count: the best ``sps`` of each placement (steps of every seed together per
second, after compiling), ``speedup`` (spread / one device), ``env_only_sps`` (the
``seeds x num_envs`` environments alone on one device, in the same process) and whether the
spread run's params equal the one-device run's bit for bit with ``member_loop="map"``
(``bitwise_map``). PPO on ``gymnax:CartPole-v1``, 4 environments x 128 steps per seed
(``anakin_throughput.py``'s configuration).
"""

from __future__ import annotations

import argparse
import os
import sys

from jsonl import emit

from podracer import parallel

CORES = parallel.use_cpu_cores()  # before JAX starts its backends

import jax  # noqa: E402
from anakin_throughput import env_only_sps, peak_memory  # noqa: E402

from podracer.agents import PPOConfig  # noqa: E402
from podracer.loops.anakin import AnakinConfig, build, choose_updates_per_call, run  # noqa: E402


def one_run(seeds: int, spread: bool, total: int, member_loop: str = "vmap") -> dict:
    if spread:
        devices, shards = parallel.member_placement(seeds)
    else:
        devices, shards = jax.devices()[:1], 1
    config = AnakinConfig(
        num_envs=4, rollout_len=128, num_seeds=seeds, member_shards=shards, member_loop=member_loop
    )
    system = build(
        "gymnax:CartPole-v1", PPOConfig(), config, total_timesteps=total, devices=devices
    )
    return run(system, seed=0, total_timesteps=total).summary


def bench(seeds: int, steps_per_seed: int, repeats: int) -> dict:
    best = {False: None, True: None}
    for _ in range(repeats):
        for spread in (False, True):
            summary = one_run(seeds, spread, steps_per_seed)
            if best[spread] is None or summary["sps"] > best[spread]["sps"]:
                best[spread] = summary
    short = 4 * 128 * 4  # a few updates: the bitwise check needs no long run
    exact = [one_run(seeds, spread, short, "map")["params_checksum"] for spread in (False, True)]
    num_updates = best[False]["num_updates"]
    env_updates = max(choose_updates_per_call(num_updates), min(num_updates, 2_000_000 // 512))
    env_sps = env_only_sps("gymnax:CartPole-v1", 4 * seeds, 128, env_updates)
    one, spread = best[False], best[True]
    return {
        "config": f"cpu-cores-{seeds}-seeds",
        "seeds": seeds,
        "cores": parallel.usable_cores(),
        "devices_spread": parallel.member_placement(seeds)[1],
        "steps_per_seed": one["total_steps"],
        "sps_one_device": one["sps"],
        "sps_spread": spread["sps"],
        "speedup": spread["sps"] / one["sps"],
        "compile_s_one_device": one["compile_s"],
        "compile_s_spread": spread["compile_s"],
        "env_only_sps": env_sps,
        "ratio_one_device": one["sps"] / env_sps,
        "bitwise_map": exact[0] == exact[1],
        **peak_memory(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cores = parallel.usable_cores()
    parser.add_argument("--seeds", type=int, nargs="+", default=sorted({2, 2 * cores}))
    parser.add_argument("--steps-per-seed", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    if jax.local_device_count() < 2:
        raise SystemExit(
            f"one CPU device only (XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}, "
            f"{cores} cores): nothing to spread the seeds over"
        )
    for seeds in args.seeds:
        emit(bench(seeds, args.steps_per_seed, args.repeats), args.out)


if __name__ == "__main__":
    sys.exit(main())
