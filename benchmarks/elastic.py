"""The elastic tournament on a local Ray, CPU: time to a target median score with 1, 2 and 4
pods of one population, one JSON line per configuration (docs/elastic.md).

    python benchmarks/elastic.py                               # CartPole, P=4, pods 1 2 4
    python benchmarks/elastic.py --env catch --target 0.8 --pods 1 2 --out /tmp/elastic.jsonl

Each configuration is one ``podracer train --pods N --cluster ray`` in a fresh process (a fresh
Ray). ``time_to_target_s`` counts from the first pod's start (Ray already up; compilation
included) to the first leaderboard row after which the median of every member's latest score is
at least ``--target`` (every member having reported once); None when the run ends first. The
line also has Ray's own costs from the run's summary: ``ray_start_s`` (ray.init), ``start_s``
(leaderboard and pods created), ``report_s`` (a pod's mean leaderboard round trip per round)
and ``round_s`` (a pod's mean seconds per round), and ``final_median_score`` and ``wall_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from podracer.experiments.elastic import read_jsonl  # noqa: E402


def time_to_target(run_dir: str, target: float, size: int) -> float | None:
    """Seconds from the first pod start to the row after which the median of every member's
    latest score reaches ``target`` (all ``size`` members reported)."""
    starts = [e["time"] for e in read_jsonl(os.path.join(run_dir, "pods.jsonl"))]
    rows = read_jsonl(os.path.join(run_dir, "leaderboard.jsonl"))
    if not starts:
        return None
    latest: dict[tuple[int, int], float] = {}
    for row in rows:
        for m in row["members"]:
            latest[(row["pod"], m["member"])] = np.nan if m["score"] is None else m["score"]
        if len(latest) >= size and np.nanmedian(list(latest.values())) >= target:
            return row["time"] - min(starts)
    return None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gymnax:CartPole-v1")
    parser.add_argument("--agent", default="ppo")
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--pods", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--target", type=float, default=400.0)
    parser.add_argument("--total-timesteps", type=int, default=300_000)
    parser.add_argument("--interval", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=None, help="the local Ray's cores (all)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per configuration")
    parser.add_argument("--out", default=None, help="also append the lines to this JSONL file")
    args, extra = parser.parse_known_args(argv)
    for pods in args.pods:
        with tempfile.TemporaryDirectory(prefix="el") as tmp:
            run_dir = os.path.join(tmp, "run")
            cmd = [
                sys.executable,
                "-m",
                "podracer.cli.main",
                "train",
                "--agent",
                args.agent,
                "--env",
                args.env,
                "--population",
                str(args.population),
                "--population.interval",
                str(args.interval),
                "--total-timesteps",
                str(args.total_timesteps),
                "--pods",
                str(pods),
                "--cluster",
                "ray",
                "--run-dir",
                run_dir,
                "--quiet",
                "--elastic.temp_dir",
                os.path.join(tmp, "ray"),
                *(["--elastic.num_cpus", str(args.cpus)] if args.cpus else []),
                # every pod at once: the cores shared out (a pod waiting for a core would
                # start when another ends, and time to target would count the wait)
                "--elastic.cpus_per_pod",
                str(min(1.0, (args.cpus or os.cpu_count()) / pods)),
                *extra,
            ]
            env = {**os.environ, "PYTHONPATH": REPO}
            t0 = time.perf_counter()
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=args.timeout_s, env=env
            )
            wall = time.perf_counter() - t0
            line = {
                "benchmark": "elastic",
                "env": args.env,
                "agent": args.agent,
                "population": args.population,
                "pods": pods,
                "members_per_pod": args.population // pods,
                "total_timesteps": args.total_timesteps,
                "interval": args.interval,
                "target": args.target,
                "rc": proc.returncode,
                "process_wall_s": wall,
            }
            if proc.returncode == 0:
                summary = json.loads(proc.stdout.strip().splitlines()[-1])
                line.update(
                    time_to_target_s=time_to_target(run_dir, args.target, args.population),
                    **{
                        k: summary.get(k)
                        for k in (
                            "final_median_score",
                            "final_best_score",
                            "ray_start_s",
                            "start_s",
                            "report_s",
                            "round_s",
                            "restarts",
                            "pods_dropped",
                            "wall_s",
                        )
                    },
                )
            else:
                line["error"] = proc.stderr.strip().splitlines()[-1:] or None
            print(json.dumps(line), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
