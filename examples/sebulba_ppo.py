"""PPO with Sebulba: envpool environments stepped by actor threads, a device learner.

    python examples/sebulba_ppo.py                                   # envpool CartPole-v1
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python examples/sebulba_ppo.py \\
        --sebulba.actor-device-ids 0 --sebulba.learner-device-ids 1

On one CPU device actors and learner share it; with two (or on GPUs) they are apart.
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer.agents import PPOConfig
from podracer.loops.sebulba import SebulbaConfig, train
from podracer.runs.logging import ConsoleProgress


@dataclasses.dataclass(frozen=True)
class Args:
    env: str = "envpool:CartPole-v1"
    """An envpool id (or catch / gymnax:<name>, run on the host)."""
    total_timesteps: int = 500_000
    seed: int = 0
    ppo: PPOConfig = dataclasses.field(default_factory=lambda: PPOConfig(lr=1e-3))
    sebulba: SebulbaConfig = dataclasses.field(
        default_factory=lambda: SebulbaConfig(envs_per_actor=32, rollout_len=32)
    )


def main(args: Args) -> None:
    result = train(
        args.env,
        args.ppo,
        args.sebulba,
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        progress=ConsoleProgress(args.total_timesteps),
    )
    print(json.dumps(result.summary))


if __name__ == "__main__":
    main(tyro.cli(Args))
