"""Resident memory of long training runs: it must stay flat after warm-up (no leak).

    python benchmarks/memory_flat.py                     # 10 minutes each: Anakin, Sebulba async
    python benchmarks/memory_flat.py --minutes 1 --only sebulba-async

Each configuration runs ``podracer train`` as a subprocess with a run length it cannot reach,
samples the process's resident set size (``VmRSS`` in ``/proc/PID/status``; envpool's
workers are threads of the same process) every second, and stops it with SIGTERM (handled as
Ctrl-C: the state is saved) after ``--minutes``. The first 20% of the time is warm-up
(compilation, buffers, caches); ``growth`` is the median RSS of the last 10% of the samples
over the median of the 10% right after warm-up, minus one. Checkpoints every
``--checkpoint-interval`` updates (50: about one a second for Anakin CartPole on 2 cores, the
worst case), evaluation off, TensorBoard on.

One JSON line per configuration: ``config``, ``minutes``, ``samples``, ``rss_warm_mb``,
``rss_end_mb``, ``rss_max_mb``, ``growth`` (a fraction), ``exit`` (143: stopped by SIGTERM as
meant), ``steps`` (from the last progress line, when one was read).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = {
    "anakin": ["--arch", "anakin", "--agent", "ppo", "--env", "gymnax:CartPole-v1"],
    "sebulba-async": [
        "--arch",
        "sebulba",
        "--agent",
        "ppo",
        "--env",
        "envpool:CartPole-v1",
        "--arch.envs-per-actor",
        "16",
        "--arch.async-batch-size",
        "8",
    ],
}


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def measure(name: str, minutes: float, work: Path, checkpoint_interval: int = 50) -> dict:
    run_dir = work / name
    argv = [sys.executable, "-m", "podracer.cli.main", "train", "--run-dir", str(run_dir)]
    argv += [*CONFIGS[name], "--total-timesteps", str(10**10), "--checkpoint-interval"]
    argv += [str(checkpoint_interval)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    log = open(work / f"{name}.err", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    samples: list[float] = []
    end = time.monotonic() + 60 * minutes
    try:
        while time.monotonic() < end and proc.poll() is None:
            value = rss_mb(proc.pid)
            if value is not None:
                samples.append(value)
            time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    text = (work / f"{name}.err").read_text()
    progress = [line for line in text.splitlines() if line.lstrip().startswith("steps")]
    steps = progress[-1].split()[1] if progress else None
    n = len(samples)
    warm = samples[n // 5 : n // 5 + max(1, n // 10)]
    last = samples[-max(1, n // 10) :]
    return {
        "config": name,
        "minutes": minutes,
        "checkpoint_interval": checkpoint_interval,
        "samples": n,
        "rss_warm_mb": round(median(warm), 1) if warm else None,
        "rss_end_mb": round(median(last), 1) if last else None,
        "rss_max_mb": round(max(samples), 1) if samples else None,
        "growth": round(median(last) / median(warm) - 1, 4) if warm and last else None,
        "exit": code,
        "steps": steps,
        "error": None if code in (0, 143) else text[-2000:],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--only", help=f"comma-separated: {', '.join(CONFIGS)}")
    parser.add_argument("--checkpoint-interval", type=int, default=50, help="updates")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"--only: unknown {unknown}; known: {', '.join(CONFIGS)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            result = measure(name, args.minutes, Path(tmp), args.checkpoint_interval)
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
