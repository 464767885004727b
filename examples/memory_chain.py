"""Memory: PPO with a GRU against PPO without one, on bsuite's MemoryChain (Anakin).

    python examples/memory_chain.py                                # memory of 10 steps, 5e5 steps
    python examples/memory_chain.py --memory-length 20 --ppo.memory lstm
    python examples/memory_chain.py --ppo.memory none              # the feed-forward baseline

MemoryChain shows a context bit at the first step of an episode and asks for it at the last,
``memory_length`` steps later: +1 for the right action, -1 for the wrong one. A policy without
memory can do no better than chance (mean return 0); with a GRU, PPO reaches 1.0 (docs/memory.md).
The run ends with the greedy evaluation of the final params, carries and all.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import tyro

from podracer.agents import PPOConfig
from podracer.envs import EnvOptions
from podracer.loops.anakin import AnakinConfig, build
from podracer.runs.logging import ConsoleProgress


@dataclasses.dataclass(frozen=True)
class Args:
    memory_length: int = 10
    """Steps between the context and the question (gymnax's EnvParams.memory_length)."""
    total_timesteps: int = 500_000
    """Environment steps per seed."""
    seed: int = 0
    num_seeds: int = 1
    """Independent runs vmapped in one program."""
    num_envs: int = 4
    rollout_len: int = 128
    eval_episodes: int = 32
    """Episodes of the final greedy evaluation (per seed)."""
    ppo: PPOConfig = dataclasses.field(default_factory=lambda: PPOConfig(memory="gru"))


def main(args: Args) -> dict:
    system = build(
        "gymnax:MemoryChain-bsuite",
        args.ppo,
        AnakinConfig(
            num_envs=args.num_envs, rollout_len=args.rollout_len, num_seeds=args.num_seeds
        ),
        total_timesteps=args.total_timesteps,
        env_options=EnvOptions(params={"memory_length": args.memory_length}),
    )
    result = system.run(seed=args.seed, progress=ConsoleProgress(args.total_timesteps))
    evaluate = system.evaluator(seed=args.seed, episodes=args.eval_episodes, greedy=True)
    returns = np.asarray(evaluate(result.state, result.summary["num_updates"]))
    summary = {**result.summary, "memory": args.ppo.memory, "eval_return": float(returns.mean())}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
