"""MuZero on Catch with Anakin: search with mctx inside the compiled program.

16 environments, rollouts of 8 steps; each action is a Gumbel MuZero search of 16 simulations
(``--agent.search puct`` for MuZero's PUCT, ``--agent.num-simulations N`` for fewer or more);
the learner unrolls the model 5 steps on windows of the replay with 5-step value targets
(docs/muzero.md). About 0.8 mean return after 3e4 steps and 1.0 at 5e4 on 2 CPU cores.
Schrittwieser et al., 2020, https://arxiv.org/abs/1911.08265; Danihelka et al., 2022,
https://openreview.net/forum?id=bERaNdoegnO.

    python examples/muzero_catch.py
    python examples/muzero_catch.py --agent.num-simulations 2
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer.agents import MuZeroConfig
from podracer.loops.anakin import AnakinConfig, train
from podracer.runs.logging import ConsoleProgress


@dataclasses.dataclass(frozen=True)
class Args:
    total_timesteps: int = 50_000
    """Environment steps per seed (128 per update)."""
    seed: int = 0
    num_seeds: int = 1
    agent: MuZeroConfig = dataclasses.field(default_factory=MuZeroConfig)


def main(args: Args) -> None:
    config = AnakinConfig(num_envs=16, rollout_len=8, num_seeds=args.num_seeds)
    result = train(
        "catch",
        args.agent,
        config,
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        progress=ConsoleProgress(args.total_timesteps),
    )
    print(json.dumps(result.summary))


if __name__ == "__main__":
    main(tyro.cli(Args))
