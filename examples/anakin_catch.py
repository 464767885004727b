"""The Podracer paper's Anakin demo: Q(lambda) on Catch.

Batch of 128 environments, rollouts of 16 steps, Adam with learning rate 1e-4, Peng's Q(lambda)
(lambda 0.9, discount 0.99) through rlax, epsilon-greedy acting. Hessel et al., 2021,
https://arxiv.org/abs/2104.06272.

    python examples/anakin_catch.py
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer.agents import QLambdaConfig
from podracer.loops.anakin import AnakinConfig, train
from podracer.runs.logging import ConsoleProgress


@dataclasses.dataclass(frozen=True)
class Args:
    total_timesteps: int = 4_000_000
    """Environment steps per seed (2,048 per update)."""
    seed: int = 0
    num_seeds: int = 1
    agent: QLambdaConfig = dataclasses.field(default_factory=lambda: QLambdaConfig(lr=1e-4))


def main(args: Args) -> None:
    config = AnakinConfig(num_envs=128, rollout_len=16, num_seeds=args.num_seeds)
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
