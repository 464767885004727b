"""IMPALA with Sebulba on Atari (Breakout-v5 by default): envpool actors, an IMPALA ResNet learner.

    python examples/sebulba_impala_atari.py --total-timesteps 10000000
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python examples/sebulba_impala_atari.py \\
        --sebulba.actor-device-ids 0 --sebulba.learner-device-ids 1

Observations are envpool's uint8 frame stacks ``[4, 84, 84]``, scaled on device. Rewards are
clipped by envpool (``reward_clip``) and a lost life ends the learner's episode
(``episodic_life``); the reported return is the game score.
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer.agents.impala import IMPALAConfig
from podracer.envs import EnvOptions
from podracer.loops.sebulba import SebulbaConfig, train
from podracer.runs.logging import ConsoleProgress


@dataclasses.dataclass(frozen=True)
class Args:
    env: str = "envpool:Breakout-v5"
    total_timesteps: int = 10_000_000
    seed: int = 0
    impala: IMPALAConfig = dataclasses.field(
        default_factory=lambda: IMPALAConfig(
            torso="impala_resnet", shared_torso=True, lr=6e-4, optimizer="rmsprop"
        )
    )
    sebulba: SebulbaConfig = dataclasses.field(
        default_factory=lambda: SebulbaConfig(
            envs_per_actor=16, rollout_len=32, actors_per_device=2
        )
    )


def main(args: Args) -> None:
    result = train(
        args.env,
        args.impala,
        args.sebulba,
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        progress=ConsoleProgress(args.total_timesteps),
        env_options=EnvOptions(params={"episodic_life": True, "reward_clip": True}),
    )
    print(json.dumps(result.summary))


if __name__ == "__main__":
    main(tyro.cli(Args))
