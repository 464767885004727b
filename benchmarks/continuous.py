"""Continuous control: PPO's throughput and learning curves with the environment-family presets.

    python benchmarks/continuous.py                       # the three configurations below
    python benchmarks/continuous.py --only pendulum --total-steps 300000 --plot benchmarks/figures
    python benchmarks/continuous.py --smoke               # tiny sizes, well under a minute on CPU
    python benchmarks/continuous.py --curve-from-run /tmp/hc --out hc.png   # a run directory

Configurations (``--only``, comma-separated):

- ``pendulum``: Anakin PPO on ``gymnax:Pendulum-v1`` (preset ``classic_continuous``), 3e5 steps;
- ``brax-halfcheetah``: Anakin PPO on ``brax:halfcheetah``, brax's default backend in podracer
  (preset ``brax``); brax steps at a few thousand steps/s on XLA:CPU, so on CPU the run is small
  (16 envs, 3.2e4 steps) and on an accelerator the preset's 128 envs, 1e6 steps;
- ``envpool-halfcheetah``: Sebulba PPO on ``envpool:HalfCheetah-v4`` (preset ``mujoco``), actor
  and learner on device 0, 1e5 steps;
- ``trading``: Anakin PPO on ``trading:synthetic`` (30 assets; preset ``trading``), the preset's
  32 envs and 3e5 steps on CPU, 2,048 envs and about 2e6 steps on an accelerator.

Agent and loop values are the family's preset (:func:`podracer.loops.presets.preset_for`, what
``podracer train`` applies); ``--num-envs`` and ``--total-steps`` override them.

One JSON line per configuration on stdout: ``sps`` (training steps per second, after compiling),
``compile_s``, ``env_only_sps`` (the same environment with uniformly random actions within the
action bounds, in the same process: the JAX environments vmapped over ``num_envs`` and scanned as
Anakin scans them, updates x time; envpool stepped on the host for a few seconds with
``envs_per_actor`` environments), ``ratio`` (``sps / env_only_sps``), ``peak_rss_mb`` (the
process's peak so far, so it only grows along the sweep; on an accelerator also
``peak_device_mb``), ``final_return`` (mean return of the episodes that ended in the last 5% of
the steps; null when none did), and what was run (``env``, ``agent``, ``arch``, sizes, ``jax``,
``backend``, ``device_kind``).

``--plot DIR`` writes one learning curve per configuration (``DIR/<config>.png``: the mean
episode return against environment steps, from the run's per-update history).
``--curve-from-run RUN_DIR --out PNG`` draws a run directory's curve (``metrics.jsonl``, the
``"train"`` records' ``step`` and ``episode_return``) and runs no benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from anakin_throughput import random_actions
from jsonl import emit

import podracer
from podracer import agents, envs
from podracer.core.rollout import reset_envs
from podracer.envs import host as host_envs
from podracer.loops.presets import preset_for
from podracer.types import BoundedActionSpec


class Bench(NamedTuple):
    """One configuration: the loop, the environment, its default sizes."""

    arch: str  # "anakin" or "sebulba"
    env_id: str
    total_steps: int  # on CPU
    accelerator_total_steps: int
    env_budget: float  # env_only: steps per timed call (JAX envs) or seconds (host envs)
    cpu_loop: dict[str, Any]  # loop values over the preset's on CPU
    smoke_loop: dict[str, Any]  # loop values over the preset's with --smoke
    smoke_total_steps: int
    accelerator_loop: dict[str, Any]  # loop values over the preset's on an accelerator


CONFIGS: dict[str, Bench] = {
    "pendulum": Bench(
        "anakin",
        "gymnax:Pendulum-v1",
        total_steps=300_000,
        accelerator_total_steps=300_000,
        env_budget=2_000_000,
        cpu_loop={},
        smoke_loop={"num_envs": 4},
        smoke_total_steps=4 * 128 * 4,  # 512 steps per env: episodes end in the last update
        accelerator_loop={},
    ),
    "brax-halfcheetah": Bench(
        "anakin",
        "brax:halfcheetah",
        total_steps=16 * 32 * 63,  # 2,016 steps per env: 2nd episodes end in the last update
        accelerator_total_steps=128 * 32 * 250,  # about 1e6: 8,000 steps per env
        env_budget=8_192,
        cpu_loop={"num_envs": 16},
        smoke_loop={"num_envs": 4},
        smoke_total_steps=4 * 32 * 2,
        accelerator_loop={},
    ),
    "envpool-halfcheetah": Bench(
        "sebulba",
        "envpool:HalfCheetah-v4",
        total_steps=100_000,
        accelerator_total_steps=100_000,
        env_budget=3.0,
        cpu_loop={},
        smoke_loop={"envs_per_actor": 2},
        smoke_total_steps=2 * 256 * 4,  # 1,024 steps per env: every env ends one episode
        accelerator_loop={},
    ),
    "trading": Bench(
        "anakin",
        "trading:synthetic",  # 30 assets, 2520 days
        total_steps=300_000,
        accelerator_total_steps=2048 * 64 * 16,
        env_budget=2_000_000,
        cpu_loop={},
        smoke_loop={"num_envs": 4, "rollout_len": 16},
        smoke_total_steps=4 * 16 * 2,
        accelerator_loop={"num_envs": 2048},
    ),
}

SMOKE_ENV_BUDGET = {"anakin": 0, "sebulba": 0.5}  # 0: one update's steps


def jax_env_only_sps(env, num_envs: int, rollout_len: int, num_updates: int) -> float:
    """Steps per second of ``num_envs`` JAX environments ``env`` (one, as ``envs.make`` builds
    it) with uniformly random actions within the bounds, scanned as Anakin scans them (updates x
    time), measured after compiling."""
    params = env.default_params
    spec = env.action_spec
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def steps(key):
        state = reset_envs(env, jax.random.split(key, num_envs), params)

        def one_step(env_state, key):
            action_key, step_key = jax.random.split(key)
            actions = random_actions(action_key, spec, num_envs)
            env_state, ts = batched_step(
                jax.random.split(step_key, num_envs), env_state, actions, params
            )
            return env_state, jnp.sum(ts.reward)

        def one_update(env_state, key):
            env_state, rewards = jax.lax.scan(
                one_step, env_state, jax.random.split(key, rollout_len)
            )
            return env_state, jnp.sum(rewards)

        _, rewards = jax.lax.scan(one_update, state.env_state, jax.random.split(key, num_updates))
        return jnp.sum(rewards)

    compiled = jax.jit(steps).lower(jax.random.key(0)).compile()
    compiled(jax.random.key(0)).block_until_ready()
    best = float("inf")
    for i in range(3):
        start = time.perf_counter()
        compiled(jax.random.key(i + 1)).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return num_envs * rollout_len * num_updates / best


def host_env_only_sps(env_id: str, num_envs: int, env_threads: int, seconds: float) -> float:
    """Steps per second of ``num_envs`` host environments (sync mode) with uniformly random
    actions within the bounds, stepped for about ``seconds``."""
    env = host_envs.make(env_id, num_envs=num_envs, num_threads=env_threads, seed=0)
    try:
        spec = env.action_spec
        rng = np.random.default_rng(0)
        if isinstance(spec, BoundedActionSpec):
            low = np.broadcast_to(np.asarray(spec.low, np.float32), spec.shape)
            high = np.broadcast_to(np.asarray(spec.high, np.float32), spec.shape)

            def actions():
                return rng.uniform(low, high, (num_envs, *spec.shape)).astype(np.float32)
        else:

            def actions():
                return rng.integers(0, spec.num_actions, num_envs)

        env.reset()
        for _ in range(10):  # warm up
            env.step(actions())
        steps = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or steps == 0:
            for _ in range(10):
                env.step(actions())
            steps += 10 * num_envs
        return steps / elapsed
    finally:
        env.close()


def peak_memory() -> dict[str, float]:
    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        out["peak_device_mb"] = stats["peak_bytes_in_use"] / 2**20
    return out


# --- learning curves -------------------------------------------------------------------------


class LearningCurve(NamedTuple):
    """Mean episode return ``returns [P]`` at environment steps (per member) ``steps [P]``."""

    label: str
    steps: np.ndarray
    returns: np.ndarray


def curve_from_history(
    history: dict[str, np.ndarray], steps_per_update: int, label: str, points: int = 100
) -> LearningCurve:
    """A run's curve from its per-update history (``RunResult.history``: ``episodes`` and
    ``return_sum`` ``[members, updates]``): the mean return of the episodes that ended in each of
    about ``points`` windows of updates, pooled over members, at the window's last step;
    windows where no episode ended are left out."""
    episodes = np.atleast_2d(np.asarray(history["episodes"], np.float64))
    returns = np.atleast_2d(np.asarray(history["return_sum"], np.float64))
    episodes, returns = episodes.sum(axis=0), returns.sum(axis=0)
    num_updates = episodes.shape[0]
    window = max(1, math.ceil(num_updates / points))
    steps, values = [], []
    for first in range(0, num_updates, window):
        last = min(first + window, num_updates)
        count = episodes[first:last].sum()
        if count > 0:
            steps.append(steps_per_update * last)
            values.append(returns[first:last].sum() / count)
    return LearningCurve(label, np.asarray(steps, np.int64), np.asarray(values, np.float64))


def curve_from_run(run_dir: str | Path, label: str | None = None) -> LearningCurve:
    """A run directory's curve: its ``metrics.jsonl`` ``"train"`` records' ``step`` and
    ``episode_return`` (records with no return yet are left out)."""
    from podracer.runs.plotting import read_config, read_metrics

    records = [
        r
        for r in read_metrics(run_dir)
        if r.get("kind") == "train" and r.get("episode_return") is not None
    ]
    if not records:
        raise ValueError(f"{run_dir}: no 'train' record with an episode_return")
    records.sort(key=lambda r: r["step"])
    if label is None:
        config = read_config(run_dir)
        parts = [config.get(k) for k in ("arch", "agent", "env")]
        label = " ".join(str(p) for p in parts if p) or str(run_dir)
    steps = np.asarray([r["step"] for r in records], np.int64)
    return LearningCurve(label, steps, np.asarray([r["episode_return"] for r in records], float))


def plot_learning_curves(
    curves: list[LearningCurve], out: str | Path, title: str = "", note: str = ""
) -> Path:
    """Episode return against environment steps, one line per curve; writes a PNG (matplotlib,
    Agg canvas, no pyplot) and returns its path."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), layout="constrained")
    ax = figure.add_subplot()
    for curve in curves:
        ax.plot(curve.steps, curve.returns, marker="." if len(curve.steps) < 60 else None)
        ax.lines[-1].set_label(curve.label)
    ax.set_xlabel("environment steps (per member)")
    ax.set_ylabel("episode return")
    ax.set_title(f"{title}\n{note}" if note else title)
    ax.grid(alpha=0.3)
    if any(c.label for c in curves):
        ax.legend(loc="best")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    return out


# --- the benchmark ---------------------------------------------------------------------------


def configs_for(name: str, args) -> tuple[Bench, Any, Any, int, str]:
    """``(bench, agent_config, loop_config, total_steps, preset family)`` of one configuration."""
    bench = CONFIGS[name]
    spec = agents.get("ppo")
    preset = preset_for(spec, bench.env_id, bench.arch)
    agent_values = dict(preset.agent) if preset else {}
    loop_values = dict(preset.loop) if preset else {}
    on_cpu = jax.default_backend() == "cpu"
    loop_values.update(bench.cpu_loop if on_cpu else bench.accelerator_loop)
    if args.smoke:
        loop_values.update(bench.smoke_loop)
    if args.num_envs is not None:
        loop_values["num_envs" if bench.arch == "anakin" else "envs_per_actor"] = args.num_envs
    if bench.arch == "anakin":
        loop_config = podracer.AnakinConfig(**loop_values)
    else:
        loop_config = podracer.SebulbaConfig(**loop_values)
    if args.total_steps is not None:
        total = args.total_steps
    elif args.smoke:
        total = bench.smoke_total_steps
    else:
        total = bench.total_steps if on_cpu else bench.accelerator_total_steps
    family = preset.family if preset else None
    return bench, spec.config_cls(**agent_values), loop_config, total, family


def run_one(name: str, args) -> dict[str, Any]:
    bench, agent_config, loop_config, total, family = configs_for(name, args)
    result = podracer.train(bench.env_id, agent_config, loop_config, seed=0, total_timesteps=total)
    s = result.summary
    steps_per_update = s["total_steps"] // s["num_updates"]
    if bench.arch == "anakin":
        num_envs, rollout_len = loop_config.num_envs, loop_config.rollout_len
        budget = SMOKE_ENV_BUDGET["anakin"] if args.smoke else bench.env_budget
        if not args.smoke and jax.default_backend() != "cpu":
            budget = max(budget, 2_000_000)
        env_updates = max(1, min(s["num_updates"], int(budget) // steps_per_update))
        env = envs.make(bench.env_id)
        env_sps = jax_env_only_sps(env, num_envs, rollout_len, env_updates)
        env_backend = getattr(env, "backend", None)  # brax's physics pipeline
    else:
        num_envs, rollout_len = loop_config.envs_per_actor, loop_config.rollout_len
        seconds = SMOKE_ENV_BUDGET["sebulba"] if args.smoke else bench.env_budget
        env_sps = host_env_only_sps(bench.env_id, num_envs, loop_config.env_threads, seconds)
        env_backend = None
    line = {
        "config": name,
        "env": bench.env_id,
        "agent": "ppo",
        "arch": bench.arch,
        "preset": family,
        **({"env_backend": env_backend} if env_backend else {}),
        "num_envs": num_envs,
        "rollout_len": rollout_len,
        "total_steps": s["total_steps"],
        "num_updates": s["num_updates"],
        "sps": s["sps"],
        "compile_s": s["compile_s"],
        "env_only_sps": env_sps,
        "ratio": s["sps"] / env_sps,
        "final_return": s["final_return"],
    }
    if bench.arch == "sebulba":
        line.update(
            actor_sps=s["actor_sps"],
            policy_lag_mean=s["policy_lag_mean"],
            actor_time_s=s["actor_time_s"],
            learner_time_s=s["learner_time_s"],
        )
    line.update(
        jax=jax.__version__,
        backend=jax.default_backend(),
        device_kind=jax.devices()[0].device_kind,
        devices=s.get("devices", jax.device_count()),
        **peak_memory(),
    )
    if args.plot:
        curve = curve_from_history(result.history, steps_per_update, label="")
        title = f"{bench.arch} ppo on {bench.env_id}"
        note = (
            f"{num_envs} envs x {rollout_len} steps per update, preset {family!r}, seed 0; "
            f"final return {_fmt(s['final_return'])}"
        )
        line["plot"] = str(
            plot_learning_curves([curve], Path(args.plot) / f"{name}.png", title, note)
        )
    return line


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"configurations, comma-separated: {', '.join(CONFIGS)}")
    parser.add_argument("--total-steps", type=int, help="environment steps per configuration")
    parser.add_argument("--num-envs", type=int, help="environments (Sebulba: per actor)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a quick check)")
    parser.add_argument("--plot", metavar="DIR", help="write a learning-curve PNG per config here")
    parser.add_argument(
        "--curve-from-run", metavar="RUN_DIR", help="only draw this run directory's curve (--out)"
    )
    parser.add_argument("--title", help="with --curve-from-run: the figure's title")
    parser.add_argument(
        "--out", help="the PNG (with --curve-from-run); else a file to append the JSON lines to"
    )
    args = parser.parse_args(argv)

    if args.curve_from_run:
        curve = curve_from_run(args.curve_from_run)
        out = args.out or str(Path(args.curve_from_run) / "learning_curve.png")
        last = curve.returns[-1]
        note = (
            f"{args.curve_from_run}: final episode return {last:.1f} at {curve.steps[-1]:,} steps"
        )
        path = plot_learning_curves([curve], out, args.title or curve.label, note)
        print(
            json.dumps(
                {
                    "curve_from_run": args.curve_from_run,
                    "out": str(path),
                    "points": len(curve.steps),
                    "last_step": int(curve.steps[-1]),
                    "last_return": float(last),
                }
            )
        )
        return 0

    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"--only: unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    for name in names:
        emit(run_one(name, args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
