"""PPO with Anakin on a gymnax environment (CartPole-v1 by default).

    python examples/anakin_ppo.py
    python examples/anakin_ppo.py --env gymnax:Acrobot-v1 --total-timesteps 1000000 --num-seeds 4

Every PPO field is a flag too (``--ppo.lr 1e-3``, ``--ppo.num-minibatches 8``); see ``--help``.
"""

from __future__ import annotations

import dataclasses
import json

import tyro

from podracer.agents import PPOConfig
from podracer.loops.anakin import AnakinConfig, train
from podracer.runs.logging import ConsoleProgress


@dataclasses.dataclass(frozen=True)
class Args:
    env: str = "gymnax:CartPole-v1"
    """Any discrete-action gymnax id (podracer.envs.KNOWN_IDS)."""
    total_timesteps: int = 500_000
    """Environment steps per seed."""
    seed: int = 0
    num_seeds: int = 1
    """Independent runs vmapped in one program."""
    num_envs: int = 4
    rollout_len: int = 128
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)


def main(args: Args) -> None:
    config = AnakinConfig(
        num_envs=args.num_envs, rollout_len=args.rollout_len, num_seeds=args.num_seeds
    )
    result = train(
        args.env,
        args.ppo,
        config,
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        progress=ConsoleProgress(args.total_timesteps),
    )
    print(json.dumps(result.summary))


if __name__ == "__main__":
    main(tyro.cli(Args))
