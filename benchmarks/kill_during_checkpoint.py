"""SIGKILL a training run at random moments while it checkpoints every update, resume it each
time, and check that it finishes where a run that was never killed finishes.

    python benchmarks/kill_during_checkpoint.py               # 20 kills, Anakin PPO on CartPole
    python benchmarks/kill_during_checkpoint.py --kills 5 --arch sebulba

Each round starts ``podracer train`` (the first fresh, then ``--resume``), waits until the run
has saved a checkpoint of its own, waits a random 0-300 ms more (the run saves after every
update, so most kills land inside a save) and sends SIGKILL. After each kill it records which
steps orbax sees as complete and whether a half-written step was left behind. A resumed run
that exits by itself before it is killed is a failure (its error is printed). The last resume
runs to the end; its ``params_checksum`` must equal that of the same run never interrupted
(resume is bitwise exact), and it must have started from the newest complete checkpoint.

The processes share a persistent compilation cache (in ``--work``), so a round costs the
interpreter's start and a cache read rather than a compile. Prints one JSON line: ``kills``,
``killed_in_save`` (kills that left a half-written step), ``resumes_failed``, ``final_ok``,
``start_update`` and ``latest_complete``, ``checksum_equal``, ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUND_TIMEOUT_S = 120.0

LOOPS = {
    "anakin": ["--arch", "anakin", "--arch.num-envs", "8", "--agent.num-minibatches", "2"],
    "sebulba": ["--arch", "sebulba", "--env", "gymnax:CartPole-v1", "--arch.envs-per-actor", "8"],
}


def command(run_dir: Path, arch: str, updates: int, resume: bool) -> list[str]:
    total = str(8 * 16 * updates)
    base = [sys.executable, "-m", "podracer.cli.main", "train"]
    if resume:
        return [*base, "--resume", str(run_dir), "--total-timesteps", total, "--quiet"]
    return [
        *base,
        "--run-dir",
        str(run_dir),
        *LOOPS[arch],
        "--arch.rollout-len",
        "16",
        "--checkpoint-interval",
        "1",
        "--keep-checkpoints",
        "2",
        "--no-tensorboard",
        "--total-timesteps",
        total,
        "--quiet",
    ]


def environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
    )
    return env


def step_names(run_dir: Path) -> list[str]:
    directory = run_dir / "checkpoints"
    return sorted(os.listdir(directory)) if directory.is_dir() else []


def complete_steps(run_dir: Path) -> list[int]:
    """The steps orbax lists as complete (what a resume chooses from)."""
    from podracer.runs.checkpoint import Checkpointer

    with Checkpointer(str(run_dir)) as checkpointer:
        return checkpointer.steps()


def final_line(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def run_kills(kills: int, arch: str, work: Path, seed: int = 0, compare: bool = True) -> dict:
    rng = random.Random(seed)
    updates = 10 * kills + 20  # a round runs a few updates (one save, then up to 0.3 s)
    run_dir, cache = work / "run", work / "cache"
    env = environment(cache)
    start = time.monotonic()
    killed_in_save = resumes_failed = 0
    errors: list[str] = []
    for k in range(kills):
        before = set(step_names(run_dir))
        proc = subprocess.Popen(
            command(run_dir, arch, updates, resume=k > 0),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while proc.poll() is None and not any(
            name.isdigit() and name not in before for name in step_names(run_dir)
        ):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if proc.poll() is not None:  # ended by itself: a failed resume (or the run ended)
            resumes_failed += 1
            errors.append(proc.stderr.read()[-2000:])
            continue
        time.sleep(rng.uniform(0.0, 0.3))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stderr.close()
        if any(not name.isdigit() for name in step_names(run_dir)):
            killed_in_save += 1
    latest = max(complete_steps(run_dir), default=None)
    last = subprocess.run(
        command(run_dir, arch, updates, resume=True),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = {
        "config": f"kill-during-checkpoint-{arch}",
        "kills": kills,
        "killed_in_save": killed_in_save,
        "resumes_failed": resumes_failed,
        "final_ok": last.returncode == 0,
        "latest_complete": latest,
    }
    if last.returncode != 0:
        errors.append(last.stderr[-2000:])
    elif compare:
        resumed = final_line(last.stdout)
        straight = subprocess.run(
            command(work / "straight", arch, updates, resume=False),
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        want = final_line(straight.stdout)["params_checksum"] if straight.returncode == 0 else None
        result.update(checksum_equal=resumed["params_checksum"] == want)
    if last.returncode == 0:
        result.update(start_update=final_line(last.stdout)["start_update"])
    result.update(seconds=round(time.monotonic() - start, 1), errors=errors)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--arch", choices=sorted(LOOPS), default="anakin")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill times")
    parser.add_argument("--work", help="working directory (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error(f"--kills={args.kills} is not allowed: it must be >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = run_kills(args.kills, args.arch, work, seed=args.seed)
    print(json.dumps(result), flush=True)
    ok = (
        result["final_ok"]
        and not result["resumes_failed"]
        and result.get("checksum_equal")
        and result.get("start_update") == result["latest_complete"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
