"""What the defaults reach: every agent on each loop, with and without memory, on its reference
task, with the documented defaults only, over seeds.

    python benchmarks/defaults.py                                  # the whole matrix, seeds 0-2
    python benchmarks/defaults.py --only 'sebulba-impala-*'        # rows by name (fnmatch)
    python benchmarks/defaults.py --seeds 0 --out defaults.jsonl   # one seed, lines kept
    python benchmarks/defaults.py --out defaults.jsonl --resume    # skip runs already in --out
    python benchmarks/defaults.py --list                           # the rows and their commands
    python benchmarks/defaults.py --summarize defaults.jsonl --docs docs/defaults.md

Each run is ``podracer train`` as a user types it (the row's command, ``--seed S``), in a
fresh process with a run directory that is deleted afterwards: the family's preset is applied
and printed as the command line applies it, and nothing else is set. The reference tasks:

- CartPole-v1 for the discrete agents (``gymnax:`` on Anakin, ``envpool:`` on Sebulba), also
  with a GRU for the actor-critic agents;
- Pendulum-v1 for continuous PPO and SAC;
- bsuite's MemoryChain with a memory of 10 (``gymnax:MemoryChain-bsuite``, stepped on the host
  on Sebulba) for every agent with memory, with a GRU;
- catch for Q(λ) and MuZero (on Sebulba, stepped on the host).

One JSON line per run on stdout (appended to ``--out``): ``row``, ``seed``, ``final_return``
(``podracer train``'s: the mean return of the episodes that ended in the last 5% of the steps,
with the acting policy), ``threshold`` and ``passed``, ``sps``, ``compile_s``, ``wall_s``,
``command``, ``preset`` (the line the command printed, or null), ``jax`` and ``cpu``. Then, per
row, one line with ``summary: true``: the IQM of the final returns over the seeds with its 95%
bootstrap interval (:func:`podracer.util.stats.summarize`), the lowest seed, whether every seed
passed, the mean steps/s and the summed wall time; and the table on stderr. ``--docs FILE``
writes the table, as Markdown, between the ``<!-- defaults:begin -->`` and
``<!-- defaults:end -->`` lines of FILE (``docs/defaults.md``).

The thresholds are the ones ``docs/defaults.md`` states: CartPole >= 475 (>= 450 on Sebulba),
Pendulum >= -250, MemoryChain >= 0.9, catch >= 0.9. Not part of the tests: the whole matrix
takes about 2 hours on 2 CPU cores (``--list`` shows each row's budget).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

from jsonl import emit

THRESHOLDS = {
    ("CartPole-v1", "anakin"): 475.0,
    ("CartPole-v1", "sebulba"): 450.0,
    ("Pendulum-v1", "anakin"): -250.0,
    ("Pendulum-v1", "sebulba"): -250.0,
    ("MemoryChain", "anakin"): 0.9,
    ("MemoryChain", "sebulba"): 0.9,
    ("catch", "anakin"): 0.9,
    ("catch", "sebulba"): 0.9,
}
"""The lowest final return a seed must reach, by task and loop."""

ENV_IDS = {
    ("CartPole-v1", "anakin"): "gymnax:CartPole-v1",
    ("CartPole-v1", "sebulba"): "envpool:CartPole-v1",
    ("Pendulum-v1", "anakin"): "gymnax:Pendulum-v1",
    ("Pendulum-v1", "sebulba"): "envpool:Pendulum-v1",
    ("MemoryChain", "anakin"): "gymnax:MemoryChain-bsuite",
    ("MemoryChain", "sebulba"): "gymnax:MemoryChain-bsuite",
    ("catch", "anakin"): "catch",
    ("catch", "sebulba"): "catch",
}
"""Each task's environment id on each loop."""

TASK_FLAGS = {"MemoryChain": ("--env-param", "memory_length=10")}
"""Flags a task needs beyond its id: the task's definition, not a tuning."""


class Row(NamedTuple):
    """One row of the matrix: an agent on a loop, with or without memory, on a task."""

    agent: str
    arch: str
    task: str
    memory: str = "none"

    @property
    def name(self) -> str:
        memory = "" if self.memory == "none" else f"-{self.memory}"
        return f"{self.arch}-{self.agent}{memory}-{self.task.lower().removesuffix('-v1')}"

    @property
    def threshold(self) -> float:
        return THRESHOLDS[(self.task, self.arch)]

    def command(self, seed: int) -> list[str]:
        """The ``podracer train`` arguments of this row with ``seed``."""
        args = ["train", "--arch", self.arch, "--agent", self.agent]
        args += ["--env", ENV_IDS[(self.task, self.arch)], *TASK_FLAGS.get(self.task, ())]
        if self.memory != "none":
            args += ["--agent.memory", self.memory]
        return [*args, "--seed", str(seed)]


LOOPS = ("anakin", "sebulba")
DISCRETE = ("ppo", "impala", "pqn", "dqn")
MEMORY = ("ppo", "impala", "pqn", "dqn", "qlambda")


def matrix() -> list[Row]:
    """Every row, in the order they run (cheap rows first, so a stopped matrix keeps them)."""
    rows: list[Row] = []
    for arch in LOOPS:
        rows += [Row(agent, arch, "CartPole-v1") for agent in DISCRETE]
        rows += [Row(agent, arch, "Pendulum-v1") for agent in ("ppo", "sac")]
        rows += [Row(agent, arch, "catch") for agent in ("qlambda", "muzero")]
        rows += [Row(agent, arch, "CartPole-v1", "gru") for agent in ("ppo", "impala")]
        rows += [Row(agent, arch, "MemoryChain", "gru") for agent in MEMORY]
    return rows


PODRACER = [sys.executable, "-c", "from podracer.cli.main import main; main()"]
"""``podracer`` in this interpreter."""


def run_once(row: Row, seed: int, timeout: float | None = None) -> dict:
    """One ``podracer train`` of ``row`` with ``seed`` (a fresh process, stopped after
    ``timeout`` seconds): its final JSON line and what it cost."""
    run_dir = tempfile.mkdtemp(prefix=f"defaults-{row.name}-{seed}-")
    args = [*row.command(seed), "--run-dir", run_dir]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the command's own devices
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [*PODRACER, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        done = subprocess.CompletedProcess(e.cmd, -9, "", f"stopped after {timeout} s")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    wall = time.perf_counter() - start
    result = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{") and '"final_return"' in line:
            result = json.loads(line)
            break
    preset = next((x for x in done.stderr.splitlines() if "preset " in x), None)
    record = {
        "row": row.name,
        "agent": row.agent,
        "arch": row.arch,
        "task": row.task,
        "memory": row.memory,
        "seed": seed,
        "command": "podracer " + " ".join(row.command(seed)),
        "threshold": row.threshold,
        "wall_s": round(wall, 1),
        "preset": preset.split("podracer: ", 1)[-1] if preset else None,
    }
    if done.returncode != 0 or result is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {**record, "final_return": None, "passed": False, "error": " | ".join(tail)}
    final = result["final_return"]
    return {
        **record,
        "final_return": final,
        "passed": final is not None and final >= row.threshold,
        "sps": round(result["sps"], 1),
        "compile_s": round(result["compile_s"], 2),
        "total_steps": result["total_steps"],
        "devices": result["devices"],
    }


def summarize(rows: list[Row], records: list[dict]) -> list[dict]:
    """One summary per row that has records: IQM and interval over the seeds, and costs."""
    from podracer.util.stats import summarize as stats

    out = []
    for row in rows:
        mine = [r for r in records if r.get("row") == row.name and not r.get("summary")]
        if not mine:
            continue
        finals = [r["final_return"] for r in mine if r.get("final_return") is not None]
        s = stats(finals) if finals else {"iqm": None, "iqm_ci_low": None, "iqm_ci_high": None}
        sps = [r["sps"] for r in mine if r.get("sps")]
        out.append(
            {
                "summary": True,
                "row": row.name,
                "command": "podracer " + " ".join(row.command(0)[:-2]),
                "seeds": sorted(r["seed"] for r in mine),
                "finals": [r.get("final_return") for r in sorted(mine, key=lambda r: r["seed"])],
                "iqm": s["iqm"],
                "ci_low": s["iqm_ci_low"],
                "ci_high": s["iqm_ci_high"],
                "lowest": min(finals) if len(finals) == len(mine) else None,
                "threshold": row.threshold,
                "passed": all(r.get("passed") for r in mine),
                "sps": sum(sps) / len(sps) if sps else None,
                "wall_s": round(sum(r["wall_s"] for r in mine), 1),
                "preset": next((r["preset"] for r in mine if r.get("preset")), None),
            }
        )
    return out


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}"


def markdown(summaries: list[dict], rows: list[Row]) -> str:
    """The summaries as a Markdown table, a line for each of ``rows`` (one without a summary
    says so), then each row's command."""
    lines = [
        "| row | final return per seed | IQM [95% CI] | aim | passed | steps/s | wall (s) |",
        "|---|---|---|---:|:---:|---:|---:|",
    ]
    measured = {s["row"] for s in summaries}
    for s in summaries:
        finals = ", ".join(_number(x) for x in s["finals"])
        iqm = f"**{_number(s['iqm'])}** [{_number(s['ci_low'])}, {_number(s['ci_high'])}]"
        sps = f"{s['sps']:,.0f}" if s["sps"] else "-"
        n = len(s["seeds"])
        mark = "**no**" if not s["passed"] else ("yes" if n >= 3 else f"{n} seed(s) so far")
        aim = f">= {_number(s['threshold'])}"
        lines.append(
            f"| `{s['row']}` | {finals} | {iqm} | {aim} | {mark} | {sps} | {s['wall_s']:,.0f} |"
        )
    for row in rows:
        if row.name not in measured:
            aim = f">= {_number(row.threshold)}"
            lines.append(f"| `{row.name}` | not measured yet | - | {aim} | - | - | - |")
    lines += ["", "The commands (add `--seed 0`, `1`, `2`):", "", "```bash"]
    lines += ["podracer " + " ".join(row.command(0)[:-2]) for row in rows]
    lines += ["```"]
    return "\n".join(lines)


def write_docs(path: str, table: str, header: str) -> None:
    """Replaces what lies between the markers of ``path`` with ``header`` and ``table``."""
    with open(path) as f:
        text = f.read()
    begin, end = "<!-- defaults:begin -->", "<!-- defaults:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"--docs {path}: the file has no {begin} ... {end} lines to fill")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{header}\n\n{table}\n{end}{tail}")


def machine() -> str:
    """The CPU's model name and its core count."""
    model = platform.processor() or "CPU"
    try:
        with open("/proc/cpuinfo") as f:
            names = re.findall(r"model name\s*:\s*(.*)", f.read())
        model = names[0].strip() if names else model
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="*", help="rows whose name matches (fnmatch, comma list)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--out", default=None, help="append each JSON line to this file")
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--list", action="store_true", help="print the rows and their commands")
    parser.add_argument("--summarize", default=None, help="only summarize this JSONL file")
    parser.add_argument("--docs", default=None, help="write the table into this Markdown file")
    args = parser.parse_args(argv)

    patterns = [p.strip() for p in args.only.split(",") if p.strip()]
    rows = [r for r in matrix() if any(fnmatch.fnmatch(r.name, p) for p in patterns)]
    if not rows:
        names = ", ".join(r.name for r in matrix())
        raise SystemExit(f"--only {args.only!r} matches no row; the rows: {names}")
    if args.list:
        for row in rows:
            print(
                f"{row.name:40s} >= {_number(row.threshold):>5s}  podracer "
                + " ".join(row.command(0)[:-2])
            )
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]

    records: list[dict] = []
    source = args.summarize or (args.out if args.resume else None)
    if source and os.path.exists(source):
        with open(source) as f:
            records = [json.loads(line) for line in f if line.strip()]
        records = [r for r in records if not r.get("summary")]
    if not args.summarize:
        done = {(r["row"], r["seed"]) for r in records}
        for row in rows:
            for seed in seeds:
                if (row.name, seed) in done:
                    continue
                record = run_once(row, seed)
                record.update(jax=_jax_version(), cpu=machine(), date=time.strftime("%Y-%m-%d"))
                records.append(record)
                emit(record, args.out)

    summaries = summarize(rows, records)
    for s in summaries:
        emit(s, args.out if not args.summarize else None)
    table = markdown(summaries, rows)
    print(table, file=sys.stderr)
    if args.docs:
        when = max((r.get("date", "") for r in records), default="")
        header = (
            f"Measured {when or time.strftime('%Y-%m-%d')} on {machine()}, JAX {_jax_version()}, "
            f"CPU only, with `python benchmarks/defaults.py`."
        )
        write_docs(args.docs, table, header)
    return 0 if all(s["passed"] for s in summaries) else 1


def _jax_version() -> str:
    from importlib.metadata import version

    return version("jax")


if __name__ == "__main__":
    sys.exit(main())
