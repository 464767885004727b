"""Tournament-based ensemble training (ElegantRL-Podracer) of PPO on a locomotion task.

    python examples/tournament_locomotion.py                         # brax:ant, 8 members
    python examples/tournament_locomotion.py --env gymnax:Pendulum-v1 --total-timesteps 300000
    python examples/tournament_locomotion.py --run-dir runs/ant && \
        podracer plot runs/ant --population --out ant.png

The members start from the environment family's preset (``podracer/loops/presets.py``: Brax's PPO
settings, observations and rewards normalised) and differ in two hyper-parameters: the learning
rate (3e-5 .. 1e-3, geometric) and the Gaussian policy's initial log standard deviation
(-1.5 .. 0.5, how widely each member explores at first). Every ``--population.interval``
updates each member plays greedy episodes (the policy's mean action), the leaderboard is
printed, and the bottom quarter take over copies (params, optimizer state and normaliser
statistics) of the top quarter, with perturbed hyper-parameters. (A copy keeps its parent's
learnt standard deviation: ``init_log_std`` acts at the start only, and the tournament selects
among the explorations it started.)

This is the seed paper's showcase; Brax on a CPU runs a few thousand steps per second, so on a
laptop use ``--env gymnax:Pendulum-v1`` or a short ``--total-timesteps``; the full Ant run is
part of the accelerator benchmark (``benchmarks/suite.py``).
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer import agents, runs
from podracer.agents import PPOConfig
from podracer.loops.anakin import AnakinConfig
from podracer.loops.presets import preset_for
from podracer.population.ensemble import PopulationConfig


@dataclasses.dataclass(frozen=True)
class Args:
    env: str = "brax:ant"
    """A continuous-action JAX environment id (brax:<name>, gymnax:Pendulum-v1, ...)."""
    total_timesteps: int = 5_000_000
    """Environment steps per member."""
    seed: int = 0
    """Member i uses seed + i."""
    tournament: bool = True
    """Replace the weakest members (off: independent runs, ranked only)."""
    run_dir: str | None = None
    """Run directory (config.json, metrics.jsonl, leaderboard.jsonl, checkpoints)."""
    population: PopulationConfig = dataclasses.field(
        default_factory=lambda: PopulationConfig(
            size=8,
            interval=20,
            hparams=("lr", "init_log_std"),
            init=("lr=3e-5:1e-3", "init_log_std=-1.5:0.5"),
            eval_episodes=4,
            eval_max_steps=1000,
        )
    )
    ppo: dict[str, float | int | bool] = dataclasses.field(default_factory=dict)
    """PPO fields over the preset's (``--ppo.anneal_lr False``)."""
    anakin: dict[str, int] = dataclasses.field(default_factory=dict)
    """Anakin fields over the preset's (``--anakin.num_envs 64``)."""


def configs(args: Args) -> tuple[PPOConfig, AnakinConfig]:
    """The preset of ``args.env``'s family, with ``args``' values over it."""
    preset = preset_for(agents.get("ppo"), args.env, "anakin")
    agent = {**(preset.agent if preset else {}), "anneal_lr": False, **args.ppo}
    loop = {**(preset.loop if preset else {}), **args.anakin, "num_seeds": args.population.size}
    return PPOConfig(**agent), AnakinConfig(**loop)


def main(args: Args) -> dict:
    ppo, anakin = configs(args)
    spec = runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env=args.env,
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        agent_config=ppo,
        arch_config=anakin,
        options=runs.RunOptions(tensorboard=False),
        population=dataclasses.replace(args.population, tournament=args.tournament),
    )
    summary = runs.train(spec, args.run_dir or runs.default_run_dir(spec))
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
