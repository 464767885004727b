"""Memory: recurrent agents against the feed-forward ones and the environment alone.

    python benchmarks/memory.py     # every configuration (about 10 min on 2 cores)
    python benchmarks/memory.py --configs ppo-gru-4,ppo-ff-4 --total-steps 262144

One JSON line per configuration on stdout (and appended to ``--out``): ``sps`` (training steps
per second after compiling), ``compile_s``, ``env_only_sps`` (the same environments stepped with
random actions in the same process), ``ratio`` (``sps / env_only_sps``), ``peak_rss_mb``, and
for the recurrent PPO at 4 and 64 environments ``ff_sps`` and ``ratio_to_ff``: the
feed-forward PPO at the same sizes, measured in the same run just before it.

Configurations:

- ``ppo-gru-4`` / ``ppo-ff-4``: PureJaxRL's ``ppo_rnn.py`` on ``gymnax:CartPole-v1``: a shared
  128-relu embedding, a GRU of 128, 4 envs x 128 steps, 4 epochs x 4 minibatches of whole
  environments; the feed-forward PPO at the same sizes (its 64-64 tanh actor and critic);
- ``ppo-gru-64`` / ``ppo-ff-64``: the same with 64 environments;
- ``ppo-gru-memorychain``: the defaults of ``docs/memory.md`` on ``gymnax:MemoryChain-bsuite``
  with a memory of 10 steps;
- ``dqn-gru-memorychain``: DQN with a GRU (R2D2-style sequence replay, the defaults) there;
- ``sebulba-impala-gru-cartpole``: Sebulba IMPALA with a GRU on ``envpool:CartPole-v1``
  (32 envs x 32 steps, actor on device 0, learner on device 1 of 2 virtual CPU devices).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
from anakin_throughput import env_only_sps, peak_memory
from jsonl import emit

from podracer.agents import DQNConfig, IMPALAConfig, PPOConfig
from podracer.envs import EnvOptions
from podracer.loops.anakin import AnakinConfig, build, choose_updates_per_call, run
from podracer.loops.sebulba import SebulbaConfig

MEMORY_CHAIN = ("gymnax:MemoryChain-bsuite", EnvOptions(params={"memory_length": 10}))
CARTPOLE = ("gymnax:CartPole-v1", EnvOptions())
PUREJAXRL_RNN = PPOConfig(memory="gru", memory_size=128, hidden_sizes=(128,), activation="relu")

ANAKIN = {
    "ppo-ff-4": (CARTPOLE, PPOConfig(), 4, 128),
    "ppo-gru-4": (CARTPOLE, PUREJAXRL_RNN, 4, 128),
    "ppo-ff-64": (CARTPOLE, PPOConfig(), 64, 128),
    "ppo-gru-64": (CARTPOLE, PUREJAXRL_RNN, 64, 128),
    "ppo-gru-memorychain": (MEMORY_CHAIN, PPOConfig(memory="gru"), 4, 128),
    "dqn-gru-memorychain": (MEMORY_CHAIN, DQNConfig(memory="gru"), 16, 8),
}
SEBULBA = {"sebulba-impala-gru-cartpole": IMPALAConfig(memory="gru")}
ORDER = (*ANAKIN, *SEBULBA)


def anakin_bench(name: str, total_steps: int) -> dict:
    (env_id, options), agent_config, num_envs, rollout_len = ANAKIN[name]
    config = AnakinConfig(num_envs=num_envs, rollout_len=rollout_len)
    system = build(
        env_id,
        agent_config,
        config,
        total_timesteps=total_steps,
        devices=jax.devices()[:1],
        env_options=options,
    )
    summary = run(system, seed=0, total_timesteps=total_steps).summary
    chunk = choose_updates_per_call(summary["num_updates"])
    updates = max(chunk, min(summary["num_updates"], 2_000_000 // config.steps_per_update))
    env_sps = env_only_sps(env_id, num_envs, rollout_len, updates, options)
    return {
        "config": name,
        "env": env_id,
        "env_options": options.to_dict(),
        "memory": getattr(agent_config, "memory", "none"),
        "num_envs": num_envs,
        "rollout_len": rollout_len,
        "backend": jax.default_backend(),
        "total_steps": summary["total_steps"],
        "sps": summary["sps"],
        "compile_s": summary["compile_s"],
        "env_only_sps": env_sps,
        "ratio": summary["sps"] / env_sps,
        "final_return": summary["final_return"],
        **peak_memory(),
    }


def sebulba_bench(name: str, total_steps: int) -> dict:
    import sebulba_common

    config = SebulbaConfig(
        actor_device_ids=(0,), learner_device_ids=(1,), envs_per_actor=32, rollout_len=32
    )
    record = sebulba_common.bench(
        name, "envpool:CartPole-v1", SEBULBA[name], config, total_steps, actor_rollouts=10
    )
    return {"memory": "gru", **record, **peak_memory()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(ORDER))
    parser.add_argument("--total-steps", type=int, help="environment steps per configuration")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        parser.error(f"unknown configs {unknown}: choose from {', '.join(ORDER)}")
    ff: dict[int, float] = {}
    for name in names:
        if name in SEBULBA:
            record = sebulba_bench(name, args.total_steps or 200_000)
        else:
            default = 32_768 if name.startswith("dqn") else 262_144  # DQN: ~350 steps/s on CPU
            record = anakin_bench(name, args.total_steps or default)
            if name.startswith("ppo-ff-"):
                ff[record["num_envs"]] = record["sps"]
            elif name in ("ppo-gru-4", "ppo-gru-64") and record["num_envs"] in ff:
                record["ff_sps"] = ff[record["num_envs"]]
                record["ratio_to_ff"] = record["sps"] / ff[record["num_envs"]]
        emit(record, args.out)


if __name__ == "__main__":
    sys.exit(main())
