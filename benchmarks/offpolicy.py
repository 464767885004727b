"""Off-policy agents: PQN, DQN and SAC throughput and learning curves, and the replay buffer's cost.

    python benchmarks/offpolicy.py                          # every configuration below
    python benchmarks/offpolicy.py --only dqn-cartpole,buffer --plot benchmarks/figures
    python benchmarks/offpolicy.py --smoke                  # tiny sizes, under a minute on CPU

Configurations (``--only``, comma-separated):

- ``pqn-minatar``: Anakin PQN on ``gymnax:Breakout-MinAtar`` (PQN's defaults: an MLP Q-network,
  32 envs x 64 steps), 1e6 steps (5e6 on an accelerator);
- ``pqn-minatar-cnn``: the same with the PQN paper's MinAtar network and settings (the MinAtar
  CNN with LayerNorm, ``torso="minatar_cnn"``; 128 envs x 32 steps, 2 epochs x 32 minibatches,
  lr 5e-4, epsilon decayed over the first 10% of the run: ``pqn_minatar.yaml`` of the authors'
  code), 5e6 steps (1e7, the paper's length, on an accelerator);
- ``dqn-minatar`` and ``qlambda-minatar``: Anakin DQN (16 envs x 8 steps) and Q(λ) (128 x 16)
  on the same environment with their defaults, about 1e6 steps, for the comparison with PQN;
  ``dqn-minatar-cnn``: DQN's defaults with the MinAtar CNN;
- ``dqn-cartpole``: Anakin DQN on ``gymnax:CartPole-v1`` (16 envs x 8 steps), 1e5 steps (5e5 on
  an accelerator);
- ``sac-pendulum``: Anakin SAC on ``gymnax:Pendulum-v1`` (4 envs x 4 steps, one gradient step per
  environment step), 5e4 steps on an accelerator; on CPU SAC runs at about 250 steps/s, so the
  run is cut to 2.56e4 steps (about 100 s) to keep the sweep within a few minutes;
- ``pqn-breakout-sebulba`` and ``dqn-breakout-sebulba``: Sebulba PQN and DQN on
  ``envpool:Breakout-v5`` (4x84x84 uint8 frames), actor and learner on device 0. On an
  accelerator their Q-networks take the Nature CNN (``torso="nature_cnn"``); on CPU, where a
  Nature CNN learner runs at a few hundred steps per second, they are throughput smokes with an
  MLP over the 28,224 raw pixel values: a single hidden layer of 64 units (LayerNorm for PQN),
  8 envs per actor, about 6e3 steps, and for DQN a 10,000-item buffer (every item holds two frame
  stacks, 56 KB: 540 MiB) and batches of 32. Their returns mean nothing (an untrained DQN may
  never end an episode: ``final_return`` null). PQN runs 8 envs x 32 steps even with
  ``--smoke``: with 4 x 16 (minibatches of 4 transitions) its Sebulba update took about 8 s on
  2 CPU cores against 0.2 s for the same ``learner.update`` jitted without ``shard_map``
  (measured apart; the slow calls were erratic, some as fast as 0.5 s);
- ``buffer``: the replay buffer alone (:func:`podracer.core.replay.make_buffer`, what the replay
  learner uses), one JSON line per case: uniform (flashbax's item buffer) and prioritised
  (:class:`~podracer.core.replay.PrioritisedBuffer`), for a CartPole-sized item and a
  4x84x84 uint8 one (DQN's n-step items: ``obs``, action, return, discount, ``next_obs``),
  buffer sizes 1e4 and 1e5. ``add_us``: one add of one update's items (DQN's Anakin loop
  defaults: 16 envs x 8 steps = 128 items); ``sample_us``: one sample of ``batch_size`` = 128
  items; ``set_priorities_us`` (prioritised only): one priority update of a sampled batch; each
  measured as the mean over many calls inside one compiled ``lax.scan`` (as the learner runs
  them, so no dispatch and no copy of the buffer: the buffer is donated), best of 3, after
  compiling and after filling the buffer. A case whose buffer would take more than 40% of the
  available memory is reported with ``skipped`` and no timings.

The training configurations' agent values are the config's defaults with the overrides given
under ``agent_overrides`` in the JSON line; the loop sizes start from the agent spec's
``loop_defaults`` (``podracer.agents.get(name).loop_defaults[loop]``); ``--num-envs`` and
``--total-steps`` override them.

One JSON line per configuration on stdout, as ``continuous.py``: ``sps`` (training steps per
second, after compiling), ``compile_s``, ``env_only_sps`` (the same environment with uniformly
random actions, in the same process: the JAX environments vmapped over ``num_envs`` and scanned
as Anakin scans them, updates x time; envpool stepped on the host for a few seconds with
``envs_per_actor`` environments), ``ratio`` (``sps / env_only_sps``), ``peak_rss_mb`` (the
process's peak so far, so it only grows along the sweep; on an accelerator also
``peak_device_mb``), ``final_return`` (mean return of the episodes that ended in the last 5% of
the steps, acting as in training: epsilon-greedy for the value-based agents; null when none
did), ``eval_return`` (Anakin: the final params acting greedily on 32 fresh environments, one
episode each; null for Sebulba), and what was run (``env``, ``agent``, ``arch``, sizes, ``jax``,
``backend``, ``device_kind``). ``buffer`` lines carry ``add_us``, ``sample_us``,
``set_priorities_us``, ``compile_s``, ``item_bytes``, ``buffer_mb`` instead.

``--plot DIR`` writes one learning curve per training configuration (``DIR/<config>.png``: the
mean episode return against environment steps, from the run's per-update history).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import podracer
from podracer import agents, envs, loops
from podracer.loops import anakin

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a sibling script, run or imported
from continuous import (
    LearningCurve,
    _fmt,
    curve_from_history,
    host_env_only_sps,
    jax_env_only_sps,
    peak_memory,
)

from podracer.core.learner.buffers import make_buffer
from podracer.core.learner.replay import NStepItem


class Bench(NamedTuple):
    """One training configuration: the agent, the loop, the environment, its sizes."""

    agent: str  # a registered agent's name
    arch: str  # "anakin" or "sebulba"
    env_id: str
    total_steps: int  # on CPU
    accelerator_total_steps: int
    env_budget: float  # env_only: steps per timed call (JAX envs) or seconds (host envs)
    agent_values: dict[str, Any]  # over the agent config's defaults
    cpu_loop: dict[str, Any]  # loop values over the spec's loop_defaults on CPU
    smoke_loop: dict[str, Any]  # loop values over those with --smoke
    smoke_agent: dict[str, Any]  # agent values over agent_values with --smoke
    smoke_total_steps: int
    accelerator_agent: tuple[tuple[str, Any], ...] = ()  # agent values over those off the CPU


ATARI_MLP = {"hidden_sizes": (64,)}
ATARI_CNN = {"torso": "nature_cnn"}
MINATAR_CNN = {"torso": "minatar_cnn", "channels_first": False}
PQN_MINATAR_PAPER = {  # pqn_minatar.yaml of the PQN authors' code (purejaxql)
    "lr": 5e-4,
    "num_epochs": 2,
    "num_minibatches": 32,
    "epsilon_decay": 0.1,
}

CONFIGS: dict[str, Bench] = {
    "pqn-minatar": Bench(
        "pqn",
        "anakin",
        "gymnax:Breakout-MinAtar",
        total_steps=32 * 64 * 488,  # about 1e6
        accelerator_total_steps=32 * 64 * 2441,  # about 5e6
        env_budget=2_000_000,
        agent_values={},
        cpu_loop={},
        smoke_loop={"num_envs": 8, "rollout_len": 16},
        smoke_agent={},
        smoke_total_steps=8 * 16 * 4,
    ),
    "pqn-minatar-cnn": Bench(
        "pqn",
        "anakin",
        "gymnax:Breakout-MinAtar",
        total_steps=128 * 32 * 1221,  # about 5e6
        accelerator_total_steps=128 * 32 * 2441,  # about 1e7, the paper's length
        env_budget=2_000_000,
        agent_values={**MINATAR_CNN, **PQN_MINATAR_PAPER},
        cpu_loop={"num_envs": 128, "rollout_len": 32},
        smoke_loop={"num_envs": 8, "rollout_len": 16},
        smoke_agent={"num_minibatches": 4},
        smoke_total_steps=8 * 16 * 4,
    ),
    "dqn-minatar": Bench(
        "dqn",
        "anakin",
        "gymnax:Breakout-MinAtar",
        total_steps=16 * 8 * 7813,  # about 1e6
        accelerator_total_steps=16 * 8 * 39063,  # about 5e6
        env_budget=2_000_000,
        agent_values={},
        cpu_loop={},
        smoke_loop={},
        smoke_agent={"learning_starts": 256},
        smoke_total_steps=16 * 8 * 4,
    ),
    "dqn-minatar-cnn": Bench(
        "dqn",
        "anakin",
        "gymnax:Breakout-MinAtar",
        total_steps=16 * 8 * 7813,  # about 1e6
        accelerator_total_steps=16 * 8 * 39063,  # about 5e6
        env_budget=2_000_000,
        agent_values=dict(MINATAR_CNN),
        cpu_loop={},
        smoke_loop={},
        smoke_agent={"learning_starts": 256},
        smoke_total_steps=16 * 8 * 4,
    ),
    "qlambda-minatar": Bench(
        "qlambda",
        "anakin",
        "gymnax:Breakout-MinAtar",
        total_steps=128 * 16 * 488,  # about 1e6
        accelerator_total_steps=128 * 16 * 2441,  # about 5e6
        env_budget=2_000_000,
        agent_values={},
        cpu_loop={},
        smoke_loop={"num_envs": 8, "rollout_len": 16},
        smoke_agent={},
        smoke_total_steps=8 * 16 * 4,
    ),
    "dqn-cartpole": Bench(
        "dqn",
        "anakin",
        "gymnax:CartPole-v1",
        total_steps=16 * 8 * 782,  # about 1e5
        accelerator_total_steps=16 * 8 * 3907,  # about 5e5
        env_budget=2_000_000,
        agent_values={},
        cpu_loop={},
        smoke_loop={},
        smoke_agent={"learning_starts": 256},
        smoke_total_steps=16 * 8 * 8,
    ),
    "sac-pendulum": Bench(
        "sac",
        "anakin",
        "gymnax:Pendulum-v1",
        total_steps=4 * 4 * 1600,  # 25,600: 6,400 steps per env, 32 episodes each
        accelerator_total_steps=4 * 4 * 3125,  # 50,000
        env_budget=200_000,
        agent_values={},
        cpu_loop={},
        smoke_loop={},
        smoke_agent={"learning_starts": 64, "replay_ratio": 0.25},
        smoke_total_steps=4 * 4 * 52,  # 208 steps per env: the first episodes end at 200
    ),
    "pqn-breakout-sebulba": Bench(
        "pqn",
        "sebulba",
        "envpool:Breakout-v5",
        total_steps=8 * 32 * 24,
        accelerator_total_steps=32 * 64 * 50,
        env_budget=3.0,
        agent_values=dict(ATARI_MLP),
        cpu_loop={"envs_per_actor": 8, "rollout_len": 32},
        smoke_loop={},  # smaller minibatches (4 items) ran far slower: see the docstring
        smoke_agent={},
        smoke_total_steps=8 * 32 * 2,
        accelerator_agent=tuple(ATARI_CNN.items()),
    ),
    "dqn-breakout-sebulba": Bench(
        "dqn",
        "sebulba",
        "envpool:Breakout-v5",
        total_steps=8 * 8 * 96,
        accelerator_total_steps=16 * 8 * 400,
        env_budget=3.0,
        agent_values={
            **ATARI_MLP,
            "buffer_size": 10_000,
            "batch_size": 32,
            "learning_starts": 1_000,
        },
        cpu_loop={"envs_per_actor": 8},
        smoke_loop={"envs_per_actor": 4},
        smoke_agent={"buffer_size": 1_000, "learning_starts": 64},
        smoke_total_steps=4 * 8 * 4,
        accelerator_agent=tuple(ATARI_CNN.items()),
    ),
}

BUFFER = "buffer"
EVAL_EPISODES = 32
SMOKE_ENV_BUDGET = {"anakin": 0, "sebulba": 0.5}  # 0: one update's steps


def platform() -> dict[str, Any]:
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
    }


# --- learning curves -------------------------------------------------------------------------


def plot_learning_curve(curve: LearningCurve, out: str | Path, title: str, note: str) -> Path:
    """Episode return against environment steps; writes a PNG (matplotlib's Agg canvas, no
    pyplot) and returns its path."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), layout="constrained")
    ax = figure.add_subplot()
    ax.plot(curve.steps, curve.returns, marker="." if len(curve.steps) < 60 else None)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(f"{title}\n{note}" if note else title)
    ax.grid(alpha=0.3)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    return out


# --- training configurations -----------------------------------------------------------------


def configs_for(name: str, args) -> tuple[Bench, dict[str, Any], Any, Any, int]:
    """``(bench, agent overrides, agent_config, loop_config, total_steps)`` of one
    configuration."""
    bench = CONFIGS[name]
    spec = agents.get(bench.agent)
    loop_values = loops.loop_defaults(spec, bench.arch)
    on_cpu = jax.default_backend() == "cpu"
    if on_cpu:
        loop_values.update(bench.cpu_loop)
    agent_values = dict(bench.agent_values)
    if not on_cpu:
        agent_values.update(bench.accelerator_agent)
    if args.smoke:
        loop_values.update(bench.smoke_loop)
        agent_values.update(bench.smoke_agent)
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
    return bench, agent_values, spec.config_cls(**agent_values), loop_config, total


def run_one(name: str, args) -> dict[str, Any]:
    bench, overrides, agent_config, loop_config, total = configs_for(name, args)
    result = podracer.train(bench.env_id, agent_config, loop_config, seed=0, total_timesteps=total)
    s = result.summary
    steps_per_update = s["total_steps"] // s["num_updates"]
    if bench.arch == "anakin":
        num_envs, rollout_len = loop_config.num_envs, loop_config.rollout_len
        budget = SMOKE_ENV_BUDGET["anakin"] if args.smoke else bench.env_budget
        env_updates = max(1, min(s["num_updates"], int(budget) // steps_per_update))
        env_sps = jax_env_only_sps(envs.make(bench.env_id), num_envs, rollout_len, env_updates)
    else:
        num_envs, rollout_len = loop_config.envs_per_actor, loop_config.rollout_len
        seconds = SMOKE_ENV_BUDGET["sebulba"] if args.smoke else bench.env_budget
        env_sps = host_env_only_sps(bench.env_id, num_envs, loop_config.env_threads, seconds)
    eval_return = None
    if bench.arch == "anakin":  # the final params, greedy, on fresh environments
        system = anakin.build(bench.env_id, agent_config, loop_config, total_timesteps=total)
        evaluate = system.evaluator(seed=0, episodes=EVAL_EPISODES, greedy=True)
        eval_return = float(evaluate(result.state, s["num_updates"]).mean())
    line = {
        "config": name,
        "env": bench.env_id,
        "agent": bench.agent,
        "arch": bench.arch,
        "agent_overrides": overrides,  # tuples print as lists
        "num_envs": num_envs,
        "rollout_len": rollout_len,
        "total_steps": s["total_steps"],
        "num_updates": s["num_updates"],
        "sps": s["sps"],
        "compile_s": s["compile_s"],
        "env_only_sps": env_sps,
        "ratio": s["sps"] / env_sps,
        "final_return": s["final_return"],
        "eval_return": eval_return,
    }
    if bench.arch == "sebulba":
        line.update(
            actor_sps=s["actor_sps"],
            policy_lag_mean=s["policy_lag_mean"],
            actor_time_s=s["actor_time_s"],
            learner_time_s=s["learner_time_s"],
        )
    line.update(**platform(), devices=s.get("devices", jax.device_count()), **peak_memory())
    if args.plot:
        curve = curve_from_history(result.history, steps_per_update, label="")
        title = f"{bench.arch} {bench.agent} on {bench.env_id}"
        note = (
            f"{num_envs} envs x {rollout_len} steps per update, seed 0; "
            f"final return {_fmt(s['final_return'])}"
        )
        path = plot_learning_curve(curve, Path(args.plot) / f"{name}.png", title, note)
        line["plot"] = str(path)
    return line


# --- the replay buffer alone -----------------------------------------------------------------

BUFFER_ITEMS = {"cartpole": ((4,), jnp.float32), "atari": ((4, 84, 84), jnp.uint8)}
BUFFER_SIZES = (10_000, 100_000)
SMOKE_BUFFER_SIZES = (1_000,)


def n_step_item(obs_shape, dtype) -> NStepItem:
    """One of DQN's stored items (zeros) for observations ``obs_shape`` of ``dtype``."""
    obs = jnp.zeros(obs_shape, dtype)
    zero = jnp.zeros((), jnp.float32)
    return NStepItem(obs, jnp.zeros((), jnp.int32), zero, zero, obs)


def random_items(item, count: int, key) -> Any:
    """``count`` random items shaped like ``item`` (a leading axis)."""
    leaves, treedef = jax.tree.flatten(item)
    keys = jax.random.split(key, len(leaves))
    out = []
    for k, leaf in zip(keys, leaves, strict=True):
        shape = (count, *leaf.shape)
        if jnp.issubdtype(leaf.dtype, jnp.integer):
            out.append(jax.random.randint(k, shape, 0, 4).astype(leaf.dtype))
        else:
            out.append(jax.random.normal(k, shape, leaf.dtype))
    return jax.tree.unflatten(treedef, out)


def nbytes(tree) -> int:
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def available_bytes() -> int | None:
    """The memory available to new allocations (Linux's MemAvailable), or None."""
    try:
        for row in Path("/proc/meminfo").read_text().splitlines():
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    except OSError:
        pass
    return None


def best_time(fn, repeats: int = 3) -> float:
    """The shortest of ``repeats`` timings of ``fn()`` (which blocks), in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def buffer_case(
    prioritised: bool, item_name: str, size: int, add_batch: int, sample_batch: int, calls: int
) -> dict[str, Any]:
    """One buffer case: microseconds per add of ``add_batch`` items, per sample of
    ``sample_batch`` items and (prioritised) per priority update of a sample, each the mean over
    ``calls`` (at least) calls inside one compiled ``lax.scan``, best of 3."""
    obs_shape, dtype = BUFFER_ITEMS[item_name]
    item = n_step_item(obs_shape, dtype)
    config = agents.DQNConfig(
        buffer_size=size, batch_size=sample_batch, learning_starts=1, prioritised=prioritised
    )
    line: dict[str, Any] = {
        "config": BUFFER,
        "case": f"{'prioritised' if prioritised else 'uniform'}-{item_name}-{size}",
        "prioritised": prioritised,
        "item": item_name,
        "obs_shape": list(obs_shape),
        "obs_dtype": jnp.dtype(dtype).name,
        "item_bytes": nbytes(item),
        "buffer_size": size,
        "buffer_mb": nbytes(item) * size / 2**20,
        "add_batch": add_batch,
        "sample_batch": sample_batch,
    }
    available = available_bytes()
    if available is not None and nbytes(item) * size > 0.4 * available:
        line.update(
            skipped=f"the buffer ({line['buffer_mb']:.0f} MB) is over 40% of the available "
            f"memory ({available / 2**20:.0f} MB)",
            add_us=None,
            sample_us=None,
            set_priorities_us=None,
            **platform(),
            **peak_memory(),
        )
        return line

    buffer = make_buffer(config, sample_batch)
    batch = random_items(item, add_batch, jax.random.key(0))
    num_adds = max(calls, math.ceil(size / add_batch))  # the timed adds fill the buffer

    def adds(state, batch):
        def body(state, _):
            return buffer.add(state, batch), None

        return jax.lax.scan(body, state, None, length=num_adds)[0]

    def samples(state, key):
        keys = jax.random.split(key, calls)
        first = buffer.sample(state, keys[0])
        return jax.lax.scan(lambda _, k: (buffer.sample(state, k), None), first, keys[1:])[0]

    def priority_updates(state, indices, priorities):
        def body(state, xs):
            return buffer.set_priorities(state, *xs), None

        return jax.lax.scan(body, state, (indices, priorities))[0]

    state = jax.jit(buffer.init)(item)
    start = time.perf_counter()
    add_fn = jax.jit(adds, donate_argnums=0).lower(state, batch).compile()
    sample_fn = jax.jit(samples).lower(state, jax.random.key(0)).compile()
    if prioritised:
        indices = jax.random.randint(jax.random.key(1), (calls, sample_batch), 0, size)
        priorities = jax.random.uniform(jax.random.key(2), (calls, sample_batch)) + 0.1
        priority_fn = (
            jax.jit(priority_updates, donate_argnums=0).lower(state, indices, priorities).compile()
        )
    compile_s = time.perf_counter() - start

    state = add_fn(state, batch)  # the first call fills the buffer
    jax.block_until_ready(state)

    def time_adds():
        nonlocal state
        state = add_fn(state, batch)
        jax.block_until_ready(state)

    add_s = best_time(time_adds) / num_adds
    keys = iter(jax.random.split(jax.random.key(3), 4))
    sample_s = best_time(lambda: jax.block_until_ready(sample_fn(state, next(keys)))) / calls
    priority_s = None
    if prioritised:

        def time_priorities():
            nonlocal state
            state = priority_fn(state, indices, priorities)
            jax.block_until_ready(state)

        time_priorities()
        priority_s = best_time(time_priorities) / calls
    line.update(
        add_us=add_s * 1e6,
        sample_us=sample_s * 1e6,
        set_priorities_us=None if priority_s is None else priority_s * 1e6,
        adds_timed=num_adds,
        samples_timed=calls,
        compile_s=compile_s,
        **platform(),
        **peak_memory(),
    )
    return line


def buffer_lines(args) -> Iterator[dict[str, Any]]:
    """Every buffer case (one JSON line each), one after another."""
    loop = loops.loop_defaults(agents.get("dqn"), "anakin")
    add_batch = loop["num_envs"] * loop["rollout_len"]  # one Anakin update's items
    sample_batch = agents.DQNConfig().batch_size
    sizes = SMOKE_BUFFER_SIZES if args.smoke else BUFFER_SIZES
    calls = 10 if args.smoke else 100
    for item_name in BUFFER_ITEMS:
        for size in sizes:
            for prioritised in (False, True):
                yield buffer_case(prioritised, item_name, size, add_batch, sample_batch, calls)


# --- the command line ------------------------------------------------------------------------


def main(argv=None) -> int:
    known = [*CONFIGS, BUFFER]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"configurations, comma-separated: {', '.join(known)}")
    parser.add_argument("--total-steps", type=int, help="environment steps per configuration")
    parser.add_argument("--num-envs", type=int, help="environments (Sebulba: per actor)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a quick check)")
    parser.add_argument("--plot", metavar="DIR", help="write a learning-curve PNG per config here")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)

    names = args.only.split(",") if args.only else known
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"--only: unknown configuration(s) {unknown}; known: {', '.join(known)}")
    for name in names:
        lines = buffer_lines(args) if name == BUFFER else [run_one(name, args)]
        for line in lines:
            text = json.dumps(line)
            print(text, flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
