"""Accelerator suite: every benchmark at sizes that fill an accelerator, in one JSONL and PNG plots.

    python benchmarks/suite.py --out results/            # the full suite: about 8 min on one GPU
    python benchmarks/suite.py --smoke --out /tmp/suite  # tiny sizes: about 2.5 min on 2 CPU cores
    python benchmarks/suite.py --only catch,population --out results/ --append
    python benchmarks/suite.py --plot-only results/      # the plots again, from suite.jsonl

Configurations, in this order (the headline figures first, so that a run cut short by
``--budget-s`` or by a time limit loses the least):

- Anakin PPO on ``gymnax:CartPole-v1`` and on ``gymnax:Breakout-MinAtar``, 256 to 65,536
  environments x 128 steps (``anakin_throughput.bench``);
- the Podracer paper's Catch demo (Q(lambda), ``catch``): 128 envs x 16 steps, and 65,536 x 16;
- memory: recurrent PPO at PureJaxRL ``ppo_rnn.py``'s network (a 128-relu embedding, a GRU of
  128) on CartPole, 256 to 16,384 environments x 128 steps, and DQN with a GRU (sequence
  replay) on ``gymnax:MemoryChain-bsuite`` (``benchmarks/memory.py`` has the comparison with
  the feed-forward agents);
- Anakin PPO (preset ``trading``) on ``trading:synthetic`` (30 assets), 2,048 environments x 64
  steps;
- MuZero (Gumbel search of 16 simulations, the agent's defaults) on ``catch``, 16 and 256
  environments x 8 steps (``benchmarks/muzero.py``'s ``bench``: the line also has the search
  alone, ``search_sps``, and the learner alone, ``learner_updates_per_s``);
- Sebulba IMPALA and PPO (IMPALA ResNet) on ``envpool:Breakout-v5``, envpool threads = CPU
  cores, actor and learner on the same device, then (with several devices) on different ones
  (``sebulba_common.bench``);
- populations of 64 and 256 PPO members on CartPole, ``member_loop`` vmap and map
  (``population_throughput.bench``).

Each configuration runs a fixed small number of updates after compiling (more for small
batches, at least 4: about 2M environment steps where a batch allows). Before each one the suite
predicts its wall time (the last configuration of its family, or a first guess) and skips it,
recorded with the reason, when it would not fit the budget left.

Output, in ``--out`` (default: the current folder): ``suite.jsonl``, one JSON line per
configuration written and flushed as soon as it is measured (``kind`` ``benchmark``,
``skipped`` or ``failed``), after a first ``layout_check`` line; ``anakin.png`` (sps and
env-only sps against environments, log-log), ``population.png`` and ``sebulba.png``. Every line
names the backend, the device kind, the JAX version and the date; a benchmark line has ``sps``,
``env_only_sps`` (measured in the same process), ``compile_s``, ``peak_rss_mb`` and
``peak_device_bytes`` (JAX's ``memory_stats()``, null where the backend has none; both are the
process's peak so far), and ``learner_layout``, the layout the run's recipe chose.

The layout check: :func:`podracer.loops.learner_layout` chooses XLA:CPU-specific layouts (gradient
slices of 32 steps, unrolled loops) for image torsos on CPU only. On any other backend every
configuration must get loops and one slice per minibatch; the suite checks this before running
anything and again on every built system, and exits with status 3 and a message naming the
configuration if not. It also checks the rule on simulated ``gpu`` and ``tpu`` devices, so a CPU
run tests it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark modules

import anakin_throughput
import jax
import peers
import population_throughput

from podracer import agents, loops
from podracer.agents import DQNConfig, PPOConfig, QLambdaConfig
from podracer.agents.muzero import MuZeroConfig
from podracer.loops import LearnerLayout, learner_layout
from podracer.loops.anakin import AnakinConfig
from podracer.loops.presets import preset_for
from podracer.loops.sebulba import SebulbaConfig

JSONL = "suite.jsonl"
PLOTS = ("anakin.png", "population.png", "sebulba.png")
LAYOUT_EXIT = 3
ACCELERATOR_LAYOUT = {"unroll": 1, "microbatch_steps": 0}
SIMULATED_PLATFORMS = ("gpu", "tpu")


class Sizes(NamedTuple):
    """The suite's sizes: the full suite's, or the smoke run's."""

    anakin_envs: tuple[int, ...]
    minatar_envs: tuple[int, ...]
    ppo_rollout: int
    catch_envs: tuple[int, ...]
    memory_envs: tuple[int, ...]  # recurrent PPO on CartPole
    memory_dqn_envs: tuple[int, ...]  # DQN with a GRU on MemoryChain (x 8 steps)
    trading_envs: tuple[int, ...]  # PPO (trading preset) on trading:synthetic, 30 assets
    muzero_envs: tuple[int, ...]  # MuZero on catch (x 8 steps)
    muzero_steps: int  # environment steps of each MuZero configuration
    population: tuple[int, ...]
    population_loops: tuple[str, ...]
    population_rollout: int
    sebulba_envs: int
    sebulba_rollout: int
    sebulba_updates: int
    sebulba_agents: tuple[str, ...]
    target_steps: int  # environment steps per Anakin configuration where a batch allows
    min_updates: int
    max_updates: int
    first_guess_s: dict[str, float]  # wall time of a family's first configuration


FULL = Sizes(
    anakin_envs=(256, 1024, 4096, 16384, 65536),
    minatar_envs=(256, 1024, 4096, 16384, 65536),
    ppo_rollout=128,
    catch_envs=(128, 65536),
    memory_envs=(256, 4096, 16384),
    memory_dqn_envs=(256,),
    trading_envs=(2048,),
    muzero_envs=(16, 256),
    muzero_steps=20_000,  # 156 and 9 updates: the searches are sequential, the budget short
    population=(64, 256),
    population_loops=("vmap", "map"),
    population_rollout=128,
    sebulba_envs=128,
    sebulba_rollout=32,
    sebulba_updates=12,
    sebulba_agents=("impala", "ppo"),
    target_steps=2**21,
    min_updates=4,
    max_updates=1024,
    first_guess_s={
        "anakin": 30,
        "catch": 20,
        "memory": 60,
        "population": 60,
        "sebulba": 60,
        "muzero": 120,
        "peers": 600,
    },
)
SMOKE = Sizes(
    anakin_envs=(8,),
    minatar_envs=(),  # CI's budget: the same code as CartPole's with another environment
    ppo_rollout=16,
    catch_envs=(8,),
    memory_envs=(),  # CI's budget: tests/test_memory*.py compile and train it
    memory_dqn_envs=(),
    trading_envs=(),  # CI's budget: tests/test_trading*.py train it
    muzero_envs=(16,),
    muzero_steps=768,  # 6 updates of 16 x 8 steps, learning from the third on
    population=(4,),  # the tournament replaces a quarter: 4 is the smallest
    population_loops=("vmap",),  # CI's budget; "map" is the same code with another config
    population_rollout=16,
    sebulba_envs=2,
    sebulba_rollout=8,
    sebulba_updates=2,
    sebulba_agents=("impala",),  # CI's budget: the IMPALA ResNet compiles in 10-20 s here
    target_steps=0,
    min_updates=2,
    max_updates=2,
    first_guess_s={
        "anakin": 10,
        "catch": 5,
        "memory": 15,
        "population": 15,
        "sebulba": 20,
        "muzero": 60,
        "peers": 120,
    },
)


class Bench(NamedTuple):
    """One configuration: what it measures and the configs whose learner layout it uses."""

    name: str
    group: str  # the plot it goes to: anakin, population, sebulba
    family: str  # configurations whose wall times predict each other's
    steps: int  # environment steps it trains for (every member together)
    agent_config: Any
    loop_config: Any
    measure: Callable[[], dict[str, Any]]
    skip: str | None = None  # a reason known before running


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def updates_for(sizes: Sizes, steps_per_update: int) -> int:
    """A fixed small number of updates: about ``target_steps`` steps, within the bounds."""
    wanted = sizes.target_steps // steps_per_update
    return min(sizes.max_updates, max(sizes.min_updates, wanted))


def configurations(sizes: Sizes) -> list[Bench]:
    """Every configuration of the suite, in the order they run."""
    benches = []
    ppo = PPOConfig()
    for env_id, family, env_counts in (
        ("gymnax:CartPole-v1", "ppo-cartpole", sizes.anakin_envs),
        ("gymnax:Breakout-MinAtar", "ppo-minatar", sizes.minatar_envs),
    ):
        for n in env_counts:
            config = AnakinConfig(num_envs=n, rollout_len=sizes.ppo_rollout)
            steps = updates_for(sizes, config.steps_per_update) * config.steps_per_update
            benches.append(anakin_bench(f"{family}-{n}", family, env_id, ppo, config, steps))
    qlambda = QLambdaConfig()
    for n in sizes.catch_envs:
        config = AnakinConfig(num_envs=n, rollout_len=16)
        steps = updates_for(sizes, config.steps_per_update) * config.steps_per_update
        benches.append(anakin_bench(f"catch-{n}", "catch", "catch", qlambda, config, steps))
    recurrent = PPOConfig(memory="gru", memory_size=128, hidden_sizes=(128,), activation="relu")
    for n in sizes.memory_envs:
        config = AnakinConfig(num_envs=n, rollout_len=sizes.ppo_rollout)
        steps = updates_for(sizes, config.steps_per_update) * config.steps_per_update
        benches.append(
            anakin_bench(
                f"ppo-gru-cartpole-{n}", "memory", "gymnax:CartPole-v1", recurrent, config, steps
            )
        )
    for n in sizes.memory_dqn_envs:
        config = AnakinConfig(num_envs=n, rollout_len=8)
        steps = updates_for(sizes, config.steps_per_update) * config.steps_per_update
        name = f"dqn-gru-memorychain-{n}"
        benches.append(
            anakin_bench(
                name,
                "memory-dqn",
                "gymnax:MemoryChain-bsuite",
                DQNConfig(memory="gru"),
                config,
                steps,
            )
        )
    trading = preset_for(agents.get("ppo"), "trading:synthetic", "anakin")
    for n in sizes.trading_envs:
        config = AnakinConfig(num_envs=n, rollout_len=trading.loop["rollout_len"])
        steps = updates_for(sizes, config.steps_per_update) * config.steps_per_update
        benches.append(
            anakin_bench(
                f"ppo-trading-{n}",
                "ppo-trading",
                "trading:synthetic",
                PPOConfig(**trading.agent),
                config,
                steps,
            )
        )
    for n in sizes.muzero_envs:
        benches.append(muzero_bench(sizes, n))
    benches.extend(sebulba_benches(sizes))
    for loop in sizes.population_loops:
        for size in sizes.population:
            benches.append(population_bench(sizes, size, loop))
    return benches


def peer_benches(args, smoke: bool) -> list[Bench]:
    """The peers' lines (``peers.py``): Anakin PPO beside PureJaxRL at 4, 64 and 1,024 envs
    (3 alternated pairs; the smoke run: 4 envs, one pair of 4 updates) and Sebulba beside
    Cleanba on Breakout (one pair: Cleanba's learner runs its convolutions' gradients in loops,
    minutes an update on a CPU); skipped, saying why, without the peer's path."""
    benches = []
    pairs = 1 if smoke else 3
    for n in (4,) if smoke else (4, 64, 1024):
        steps = 4 * n * 128 if smoke else peers.ANAKIN_STEPS[n]
        skip = None if args.purejaxrl else "no --purejaxrl DIR given (benchmarks/README.md, Peers)"

        def measure(n=n, steps=steps):
            return peers.purejaxrl_pairs(str(args.purejaxrl), "ppo", n, steps, pairs, 1800)

        config = AnakinConfig(num_envs=n, rollout_len=128)
        name = f"peer-purejaxrl-ppo-{n}"
        benches.append(Bench(name, "peers", name, steps, PPOConfig(), config, measure, skip))
    for name in peers.CLEANBA_SCALED:
        steps = peers.CLEANBA_STEPS[name] // (4 if smoke else 1)
        skip = None if args.cleanba else "no --cleanba DIR given (benchmarks/README.md, Peers)"

        def measure(name=name, steps=steps):
            return peers.cleanba_pairs(str(args.cleanba), name, steps, 1, timeout=3600)

        config = SebulbaConfig(envs_per_actor=8, rollout_len=32)
        resnet = PPOConfig(torso="impala_resnet", shared_torso=True)  # podracer's side's layout
        benches.append(Bench(f"peer-{name}", "peers", f"peer-{name}", steps, resnet, config,
                             measure, skip))  # fmt: skip
    return benches


def anakin_bench(name, family, env_id, agent_config, config, steps) -> Bench:
    def measure():
        return anakin_throughput.bench(name, env_id, agent_config, config, steps)

    return Bench(name, "anakin", family, steps, agent_config, config, measure)


def muzero_bench(sizes: Sizes, num_envs: int) -> Bench:
    """MuZero on catch with the agent's defaults, through ``muzero.py``'s ``bench`` (the smoke
    run: a buffer of 2,048 steps that learns from 256, 2 unroll steps and 2-step returns, which
    halves what XLA compiles)."""
    import muzero as muzero_benchmark  # benchmarks/muzero.py

    config = MuZeroConfig()
    if sizes is SMOKE:
        config = dataclasses.replace(
            config, learning_starts=256, buffer_size=2048, num_unroll_steps=2, n_step=2
        )
    rollout_len = loops.loop_defaults(agents.get("muzero"), "anakin")["rollout_len"]
    loop = AnakinConfig(num_envs=num_envs, rollout_len=rollout_len)
    name = f"muzero-catch-{num_envs}"

    def measure():
        return muzero_benchmark.bench(
            name, "catch", config, sizes.muzero_steps, sizes is SMOKE, num_envs=num_envs
        )

    return Bench(name, "muzero", "muzero-catch", sizes.muzero_steps, config, loop, measure)


def population_bench(sizes: Sizes, size: int, member_loop: str) -> Bench:
    num_envs, rollout_len = 4, sizes.population_rollout  # population_throughput's member
    config = AnakinConfig(num_envs=num_envs, rollout_len=rollout_len, member_loop=member_loop)
    # The tournament runs every 10 updates (population_throughput.bench): one at the end.
    updates = 10 if sizes is FULL else sizes.min_updates
    steps_per_member = updates * config.steps_per_update

    def measure():
        record = population_throughput.bench(
            size, steps_per_member, num_envs, rollout_len, member_loop=member_loop
        )
        return {"env": "gymnax:CartPole-v1", **record}

    return Bench(
        f"population-{size}-{member_loop}",
        "population",
        f"population-{member_loop}",
        steps_per_member * size,
        PPOConfig(),
        config,
        measure,
    )


def sebulba_benches(sizes: Sizes) -> list[Bench]:
    import sebulba_common

    env_id = "envpool:Breakout-v5"
    missing = None if importlib.util.find_spec("envpool") else "envpool is not installed"
    impala = (
        agents.AGENTS["impala"].config_cls(torso="impala_resnet", shared_torso=True)
        if "impala" in agents.AGENTS
        else None
    )
    ppo = PPOConfig(torso="impala_resnet", shared_torso=True)
    num_devices = len(jax.devices())
    learners = tuple(range(1, num_devices))
    if learners and sizes.sebulba_envs % len(learners):
        learners = (1,)
    placements = {"same": ((0,), (0,)), "split": ((0,), learners)}
    benches = []
    for placement, (actor_ids, learner_ids) in placements.items():
        for agent_name, agent_config in (("impala", impala), ("ppo", ppo)):
            if agent_name not in sizes.sebulba_agents:
                continue
            name = f"sebulba-{agent_name}-breakout-{placement}"
            skip = missing
            if agent_config is None:
                skip, agent_config = "no IMPALA agent is registered", ppo
            if placement == "split" and num_devices < 2:
                skip = (
                    skip or f"actor and learner on different devices needs 2, found {num_devices}"
                )
            config = SebulbaConfig(
                envs_per_actor=sizes.sebulba_envs,
                rollout_len=sizes.sebulba_rollout,
                env_threads=min(cpu_count(), sizes.sebulba_envs),
                actor_device_ids=actor_ids,
                learner_device_ids=learner_ids or (0,),
            )
            steps = sizes.sebulba_updates * config.steps_per_update

            def measure(
                name=name,
                agent_config=agent_config,
                config=config,
                steps=steps,
                placement=placement,
            ):
                record = sebulba_common.bench(
                    name,
                    env_id,
                    agent_config,
                    config,
                    steps,
                    devices=jax.devices(),
                    env_only_steps=max(steps, 20_000) if sizes is FULL else steps,
                    actor_rollouts=10 if sizes is FULL else 1,
                )
                return {
                    "placement": placement,
                    "env_threads": config.env_threads,
                    "actor_devices": len(config.actor_device_ids),
                    "learner_devices": len(config.learner_device_ids),
                    **record,
                }

            benches.append(
                Bench(
                    name,
                    "sebulba",
                    f"sebulba-{agent_name}",
                    steps,
                    agent_config,
                    config,
                    measure,
                    skip,
                )
            )
    return benches


# --- the learner-layout check -------------------------------------------------------------


class LayoutError(RuntimeError):
    """A CPU-only learner layout on a backend that is not a CPU."""


def layout_dict(layout: LearnerLayout) -> dict[str, Any]:
    return {"unroll": layout.unroll, "microbatch_steps": layout.microbatch_steps}


def is_accelerator_layout(layout: dict[str, Any]) -> bool:
    """Loops (``unroll`` exactly 1, not ``True``) and one gradient slice per minibatch."""
    unroll = layout["unroll"]
    return (
        type(unroll) is int and unroll == 1 and layout["microbatch_steps"] in (0, None)
    )  # True == 1 in Python: the type is checked


def require_layout(name: str, layout: dict[str, Any], platform: str) -> None:
    if platform != "cpu" and not is_accelerator_layout(layout):
        raise LayoutError(
            f"{name}: learner_layout chose {layout} on a {platform!r} device; off XLA:CPU it must "
            f"be {ACCELERATOR_LAYOUT} (loops, one gradient slice per minibatch): the CPU-only "
            "layouts (gradient slices, unrolled loops) leak onto accelerators "
            "(podracer/loops/layout.py)"
        )


def check_layouts(benches: list[Bench], platform: str) -> dict[str, Any]:
    """The layout check before anything runs: every configuration on the real devices and on
    simulated GPU and TPU devices. Raises :class:`LayoutError`; returns what it found."""
    real, simulated, cpu_specific = {}, {}, []
    for bench in benches:
        layout = layout_dict(learner_layout(bench.agent_config, bench.loop_config))
        real[bench.name] = layout
        require_layout(bench.name, layout, platform)
        for fake in SIMULATED_PLATFORMS:
            device = types.SimpleNamespace(platform=fake)
            layout = learner_layout(bench.agent_config, bench.loop_config, [device])
            simulated.setdefault(fake, {})[bench.name] = layout_dict(layout)
            require_layout(f"{bench.name} (simulated {fake})", layout_dict(layout), fake)
        cpu = types.SimpleNamespace(platform="cpu")
        cpu_layout = layout_dict(learner_layout(bench.agent_config, bench.loop_config, [cpu]))
        if not is_accelerator_layout(cpu_layout):
            cpu_specific.append(bench.name)  # shows that the check can tell the two apart
    return {"layouts": real, "simulated": simulated, "cpu_specific_on_cpu": cpu_specific}


# --- running --------------------------------------------------------------------------------


def platform_fields() -> dict[str, Any]:
    device = jax.devices()[0]
    return {
        "backend": jax.default_backend(),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "cpu_cores": cpu_count(),
        "jax": jax.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def peak_device_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


class Predictor:
    """Predicts a configuration's wall time from the last measured one of its family: the same
    fixed cost (compiling, the environment alone), and its steps at that one's speed."""

    def __init__(self, first_guess_s: dict[str, float]):
        self.first_guess_s = first_guess_s
        self.last: dict[str, tuple[float, float]] = {}  # family -> (fixed_s, sps)

    def predict(self, bench: Bench) -> float:
        if bench.family not in self.last:
            return self.first_guess_s[bench.group if bench.group != "anakin" else _kind(bench)]
        fixed, sps = self.last[bench.family]
        return fixed + bench.steps / sps

    def observe(self, bench: Bench, wall_s: float, sps: float) -> None:
        run_s = bench.steps / sps
        self.last[bench.family] = (max(0.0, wall_s - run_s), sps)


def _kind(bench: Bench) -> str:
    if bench.family == "catch":
        return "catch"
    return "memory" if bench.family.startswith("memory") else "anakin"


def finite_positive(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def run_suite(args, sizes: Sizes, out: Path, start: float) -> int:
    benches = configurations(sizes) + peer_benches(args, args.smoke)
    if args.only:
        wanted = set(args.only.split(","))
        benches = [b for b in benches if wanted & {b.name, b.group, b.family}]
        if not benches:
            raise SystemExit(f"--only {args.only!r} matches no configuration")
    common = {"suite": "smoke" if args.smoke else "full", **platform_fields()}
    platform = common["platform"]
    path = out / JSONL
    with open(path, "a" if args.append else "w") as f:

        def write(record: dict[str, Any]) -> None:
            f.write(json.dumps(record) + "\n")
            f.flush()
            print(json.dumps(record), flush=True)

        try:
            found = check_layouts(benches, platform)
        except LayoutError as error:
            write({"kind": "layout_check", **common, "ok": False, "error": str(error)})
            print(f"suite.py: LAYOUT CHECK FAILED: {error}", file=sys.stderr, flush=True)
            return LAYOUT_EXIT
        write({"kind": "layout_check", **common, "ok": True, **found})

        predictor = Predictor(sizes.first_guess_s)
        failed = 0
        for bench in benches:
            base = {"config": bench.name, "group": bench.group, "family": bench.family, **common}
            left = args.budget_s - (time.perf_counter() - start)
            predicted = predictor.predict(bench)
            if bench.skip:
                write({"kind": "skipped", **base, "reason": bench.skip})
                continue
            if predicted > left:
                reason = f"predicted {predicted:.0f} s, {max(left, 0):.0f} s of the budget left"
                write({"kind": "skipped", **base, "reason": reason})
                continue
            t0 = time.perf_counter()
            try:
                record = bench.measure()
            except Exception as error:  # one configuration's failure (memory, say) is recorded
                failed += 1
                write({"kind": "failed", **base, "error": f"{type(error).__name__}: {error}"})
                traceback.print_exc()
                continue
            wall_s = time.perf_counter() - t0
            if bench.group == "peers":  # both programs' figures, no layout of podracer's own
                write({"kind": "peer", **record, **base, "wall_s": wall_s})
                continue
            record = {
                "kind": "benchmark",
                **record,
                **base,  # the suite's configuration name over the benchmark's own
                "ratio": record["sps"] / record["env_only_sps"],
                "wall_s": wall_s,
                "predicted_s": predicted,
                "peak_device_bytes": peak_device_bytes(),
            }
            write(record)
            try:
                require_layout(bench.name, record["learner_layout"], platform)
            except LayoutError as error:
                print(f"suite.py: LAYOUT CHECK FAILED: {error}", file=sys.stderr, flush=True)
                return LAYOUT_EXIT
            if finite_positive(record["sps"]):
                predictor.observe(bench, wall_s, record["sps"])
    return 1 if failed else 0


# --- plots ----------------------------------------------------------------------------------


def read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    return records


def _figure(title: str):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), layout="constrained")
    ax = figure.add_subplot()
    ax.set_title(title)
    return figure, ax


def _subtitle(records: list[dict[str, Any]]) -> str:
    if not records:
        return ""
    r = records[-1]
    return f"{r['device_kind']} x{r['device_count']}, JAX {r['jax']}, {r['date'][:10]}"


def _empty(ax, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def plot_anakin(records, out: Path) -> Path:
    figure, ax = _figure(f"Anakin: steps per second\n{_subtitle(records)}")
    rows = [r for r in records if r["group"] == "anakin"]
    if not rows:
        _empty(ax, "no Anakin configuration measured")
    for family in dict.fromkeys(r["family"] for r in rows):
        points = sorted(
            (r["num_envs"], r["sps"], r["env_only_sps"]) for r in rows if r["family"] == family
        )
        xs = [p[0] for p in points]
        (line,) = ax.plot(xs, [p[1] for p in points], marker="o", label=f"{family}: training")
        ax.plot(
            xs,
            [p[2] for p in points],
            marker="s",
            linestyle="--",
            color=line.get_color(),
            label=f"{family}: environment alone",
        )
    if rows:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("environments (log scale)")
        ax.set_ylabel("environment steps per second (log scale)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="best", fontsize=8)
    figure.savefig(out, dpi=120)
    return out


def _bars(ax, labels, series: dict[str, list[float]]) -> None:
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [v or 0 for v in values], width, label=name)
    ax.set_xticks(range(len(labels)), labels, rotation=15, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("environment steps per second (log scale)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="best", fontsize=8)


def _bar_plot(records, out: Path, group: str, title: str, missing: str, label, series) -> Path:
    """One bar chart of the ``group``'s records: a bar group per record (``label(record)``),
    one bar per ``series`` entry (``{legend: record key}``)."""
    figure, ax = _figure(f"{title}: steps per second\n{_subtitle(records)}")
    rows = [r for r in records if r["group"] == group]
    if not rows:
        _empty(ax, missing)
    else:
        _bars(
            ax, [label(r) for r in rows], {k: [r[key] for r in rows] for k, key in series.items()}
        )
    figure.savefig(out, dpi=120)
    return out


def plot_population(records, out: Path) -> Path:
    return _bar_plot(
        records,
        out,
        "population",
        "Population (PPO, CartPole)",
        "no population measured",
        lambda r: f"{r['population']} members, {r['member_loop']}",
        {
            "training, all members": "sps",
            "training, per member": "sps_per_member",
            "environments alone": "env_only_sps",
        },
    )


def plot_sebulba(records, out: Path) -> Path:
    return _bar_plot(
        records,
        out,
        "sebulba",
        "Sebulba, envpool Breakout-v5",
        "no Sebulba configuration measured (envpool missing?)",
        lambda r: r["config"].removeprefix("sebulba-"),
        {"training": "sps", "actor alone": "actor_only_sps", "envpool alone": "env_only_sps"},
    )


def write_plots(out: Path) -> list[Path]:
    path = out / JSONL
    records = read_records(path) if path.exists() else []
    measured = [r for r in records if r.get("kind") == "benchmark"]
    plots = (plot_anakin, plot_population, plot_sebulba)
    return [plot(measured, out / name) for plot, name in zip(plots, PLOTS, strict=True)]


def main(argv=None) -> int:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for suite.jsonl and the plots")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU test run)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=480.0,
        help="skip configurations predicted not to fit in what is left of this",
    )
    parser.add_argument("--only", help="comma-separated configuration, family or group names")
    parser.add_argument("--purejaxrl", help="a PureJaxRL clone: its lines beside podracer's")
    parser.add_argument("--cleanba", help="a Cleanba clone: its lines beside podracer's")
    parser.add_argument("--append", action="store_true", help="append to suite.jsonl")
    parser.add_argument("--plot-only", action="store_true", help="only redraw the plots")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    status = 0 if args.plot_only else run_suite(args, SMOKE if args.smoke else FULL, out, start)
    for plot in write_plots(out):
        print(f"wrote {plot}", file=sys.stderr)
    print(f"suite.py: {time.perf_counter() - start:.1f} s, status {status}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
