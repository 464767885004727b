"""The cost of ``--video-interval`` in a training run's steps per second.

    python benchmarks/video_overhead.py                      # PPO, CartPole, 5M steps, 4 videos
    python benchmarks/video_overhead.py --total-timesteps 500000 --interval 200   # 4 in 4 s
    python benchmarks/video_overhead.py --env gymnax:Breakout-MinAtar --total-timesteps 1000000

Each round trains the same run twice, in a fresh process each, alternating which goes first:
once as it is and once with ``--video-interval N`` (a greedy episode recorded, drawn and
written as MP4 on the video thread every N updates). One JSON line per run (``sps`` of the
training calls, ``wall_s`` of the whole command with its wait for the last video,
``compile_s``, ``videos``, the process's ``peak_rss_mb``), then one line with the medians and
``ratio = sps_with / sps_without`` (the issue's bar: >= 0.95), beside the environment alone's
steps per second in the same run (``env_only_sps``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, resource, sys
from podracer.cli import main as cli
code = cli.main(sys.argv[1:])
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
sys.exit(code)
"""


def one_run(args, interval: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        argv = ["train", "--arch", args.arch, "--agent", args.agent, "--env", args.env]
        argv += ["--total-timesteps", str(args.total_timesteps), "--run-dir", run_dir]
        argv += ["--quiet", "--no-tensorboard"]
        if interval:
            argv += ["--video-interval", str(interval)]
        start = time.perf_counter()
        out = (
            subprocess.run(
                [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()
        )
        wall = time.perf_counter() - start
        summary, rss = json.loads(out[-2]), json.loads(out[-1])
        videos = os.path.join(run_dir, "videos")
        count = len(os.listdir(videos)) if os.path.isdir(videos) else 0
    return {
        "config": f"{args.arch}-{args.agent}-{args.env}",
        "video_interval": interval,
        "sps": summary["sps"],
        "wall_s": wall,
        "compile_s": summary["compile_s"],
        "num_updates": summary["num_updates"],
        "videos": count,
        "params_checksum": summary["params_checksum"],
        **rss,
    }


def env_only(env_id: str, num_envs: int = 4, rollout_len: int = 128) -> float:
    """Steps per second of the environment alone (random actions, scanned as Anakin does)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from continuous import jax_env_only_sps

    from podracer import envs

    return jax_env_only_sps(envs.make(env_id), num_envs, rollout_len, 20)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="anakin")
    parser.add_argument("--agent", default="ppo")
    parser.add_argument("--env", default="gymnax:CartPole-v1")
    parser.add_argument("--total-timesteps", type=int, default=5_000_000)
    parser.add_argument("--interval", type=int, default=2000, help="--video-interval N")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows = {0: [], args.interval: []}
    for i in range(args.rounds):
        for interval in (0, args.interval) if i % 2 == 0 else (args.interval, 0):
            row = one_run(args, interval)
            rows[interval].append(row)
            print(json.dumps({**row, "round": i}), flush=True)
    without, with_ = (statistics.median(r["sps"] for r in rows[k]) for k in (0, args.interval))
    checksums = {r["params_checksum"] for k in rows for r in rows[k]}
    env_sps = env_only(args.env) if args.arch == "anakin" and ":" in args.env else None
    print(
        json.dumps(
            {
                "config": f"{args.arch}-{args.agent}-{args.env}",
                "summary": True,
                "rounds": args.rounds,
                "video_interval": args.interval,
                "videos_per_run": rows[args.interval][0]["videos"],
                "sps_without": without,
                "sps_with": with_,
                "ratio": with_ / without,
                "wall_s_without": statistics.median(r["wall_s"] for r in rows[0]),
                "wall_s_with": statistics.median(r["wall_s"] for r in rows[args.interval]),
                "same_params": len(checksums) == 1,
                "env_only_sps": env_sps,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
