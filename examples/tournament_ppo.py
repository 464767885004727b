"""Tournament-based ensemble training (ElegantRL-Podracer) of PPO on Acrobot-v1.

    python examples/tournament_ppo.py
    python examples/tournament_ppo.py --no-tournament          # the same members, independent
    python examples/tournament_ppo.py --run-dir runs/tournament && \
        podracer plot runs/tournament --population --out tournament.png

16 members start with learning rates spread geometrically over three orders of magnitude
(1e-5 .. 1e-2): the smallest barely move in this budget, the largest can be unstable. Every 10
updates each member plays 8 greedy episodes, the leaderboard is printed, and the bottom quarter
take over copies (params and optimizer state) of the top quarter, with the learning rate and
entropy coefficient multiplied by 0.8 or 1.25. The final JSON line holds the last leaderboard's
scores (``final_scores``, ``final_median_score``, ``final_best_score``). Every field of the
population, of PPO and of the loop is a flag (``--population.fraction 0.5``, ``--ppo.lr ...``).
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer import runs
from podracer.agents import PPOConfig
from podracer.loops.anakin import AnakinConfig
from podracer.population.ensemble import PopulationConfig


@dataclasses.dataclass(frozen=True)
class Args:
    env: str = "gymnax:Acrobot-v1"
    """Any discrete-action gymnax id (podracer.envs.KNOWN_IDS)."""
    total_timesteps: int = 300_000
    """Environment steps per member."""
    seed: int = 0
    """Member i uses seed + i."""
    tournament: bool = True
    """Replace the weakest members (off: 16 independent runs, ranked only)."""
    run_dir: str | None = None
    """Run directory (config.json, metrics.jsonl, leaderboard.jsonl, checkpoints)."""
    anakin: AnakinConfig = dataclasses.field(
        default_factory=lambda: AnakinConfig(num_envs=8, rollout_len=64)
    )
    population: PopulationConfig = dataclasses.field(
        default_factory=lambda: PopulationConfig(
            size=16, interval=10, init=("lr=1e-5:1e-2",), eval_episodes=8
        )
    )
    ppo: PPOConfig = dataclasses.field(default_factory=lambda: PPOConfig(anneal_lr=False))


def main(args: Args) -> None:
    population = dataclasses.replace(args.population, tournament=args.tournament)
    spec = runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env=args.env,
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        agent_config=args.ppo,
        arch_config=dataclasses.replace(args.anakin, num_seeds=population.size),
        options=runs.RunOptions(tensorboard=False),
        population=population,
    )
    summary = runs.train(spec, args.run_dir or runs.default_run_dir(spec))
    print(json.dumps(summary))


if __name__ == "__main__":
    main(tyro.cli(Args))
