"""Anakin throughput: PPO on CartPole-v1 (and the paper's Catch demo) against the environment alone.

    python benchmarks/anakin_throughput.py         # the sweep: 4, 64, 1024 envs + Catch
    python benchmarks/anakin_throughput.py --num-envs 4 --total-steps 500000

One JSON line per configuration on stdout: ``sps`` (training steps per second, after compiling),
``compile_s``, ``env_only_sps`` (the same environments stepped with random actions, in the same
process, through the same scan structure), ``ratio`` (``sps / env_only_sps``) and ``peak_rss_mb``
(the process's peak resident memory so far; on an accelerator also ``peak_device_mb``).

The PPO configuration is that of the PPO implementation-details study on CartPole: 128 steps per
rollout, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.2, entropy
0.01, value 0.5, grad-norm 0.5, separate 64-64 tanh MLPs for actor and critic.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import jax
import jax.numpy as jnp
from jsonl import emit

from podracer import envs
from podracer.agents import PPOConfig, QLambdaConfig
from podracer.core.rollout import reset_envs
from podracer.loops.anakin import AnakinConfig, build, choose_updates_per_call, run
from podracer.types import BoundedActionSpec


def random_actions(key, spec, num_envs: int):
    """Uniformly random actions for ``num_envs`` environments of action spec ``spec``: within
    the bounds of a ``BoundedActionSpec``, any of a ``DiscreteActionSpec``'s."""
    if isinstance(spec, BoundedActionSpec):
        low = jnp.broadcast_to(jnp.asarray(spec.low, jnp.float32), spec.shape)
        high = jnp.broadcast_to(jnp.asarray(spec.high, jnp.float32), spec.shape)
        return jax.random.uniform(key, (num_envs, *spec.shape), minval=low, maxval=high)
    return jax.random.randint(key, (num_envs,), 0, spec.num_actions)


def env_only_sps(
    env_id: str, num_envs: int, rollout_len: int, num_updates: int, env_options=None
) -> float:
    """Steps per second of ``num_envs`` environments with uniformly random actions
    (:func:`random_actions`), scanned as
    Anakin scans them (updates x time), measured after compiling."""
    env = envs.make_with_options(env_id, env_options) if env_options else envs.make(env_id)
    params = env.default_params
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def steps(key):
        state = reset_envs(env, jax.random.split(key, num_envs), params)

        def one_step(env_state, key):
            action_key, step_key = jax.random.split(key)
            actions = random_actions(action_key, env.action_spec, num_envs)
            env_state, ts = batched_step(
                jax.random.split(step_key, num_envs), env_state, actions, params
            )
            return env_state, jnp.sum(ts.reward)

        def one_update(env_state, key):
            env_state, rewards = jax.lax.scan(
                one_step, env_state, jax.random.split(key, rollout_len)
            )
            return env_state, jnp.sum(rewards)

        _, rewards = jax.lax.scan(one_update, state.env_state, jax.random.split(key, num_updates))
        return jnp.sum(rewards)

    compiled = jax.jit(steps).lower(jax.random.key(0)).compile()
    compiled(jax.random.key(0)).block_until_ready()
    best = float("inf")
    for i in range(3):
        start = time.perf_counter()
        compiled(jax.random.key(i + 1)).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return num_envs * rollout_len * num_updates / best


def peak_memory() -> dict[str, float]:
    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        out["peak_device_mb"] = stats["peak_bytes_in_use"] / 2**20
    return out


def bench(name: str, env_id: str, agent_config, config: AnakinConfig, total_steps: int) -> dict:
    system = build(env_id, agent_config, config, total_timesteps=total_steps)
    result = run(system, seed=0, total_timesteps=total_steps)
    summary = result.summary
    num_updates = summary["num_updates"]
    chunk = config.updates_per_call or choose_updates_per_call(num_updates)
    env_updates = max(chunk, min(num_updates, 2_000_000 // config.steps_per_update))
    env_sps = env_only_sps(env_id, config.num_envs, config.rollout_len, env_updates)
    return {
        "config": name,
        "env": env_id,
        "num_envs": config.num_envs,
        "rollout_len": config.rollout_len,
        "devices": system.mesh.devices.size,
        "backend": jax.default_backend(),
        "total_steps": summary["total_steps"],
        "sps": summary["sps"],
        "compile_s": summary["compile_s"],
        "env_only_sps": env_sps,
        "ratio": summary["sps"] / env_sps,
        "final_return": summary["final_return"],
        "learner_layout": system.recipe.layout._asdict(),
        **peak_memory(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, help="one configuration: PPO with this many envs")
    parser.add_argument("--total-steps", type=int, help="environment steps per configuration")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)

    ppo = PPOConfig()
    if args.num_envs is not None:
        runs = [(f"ppo-{args.num_envs}", "gymnax:CartPole-v1", ppo, args.num_envs, 128)]
    else:
        runs = [(f"ppo-{n}", "gymnax:CartPole-v1", ppo, n, 128) for n in (4, 64, 1024)]
        runs.append(("catch-demo", "catch", QLambdaConfig(), 128, 16))
    for name, env_id, agent_config, num_envs, rollout_len in runs:
        config = AnakinConfig(num_envs=num_envs, rollout_len=rollout_len)
        total = args.total_steps or max(500_000, 8 * config.steps_per_update)
        emit(bench(name, env_id, agent_config, config, total), args.out)


if __name__ == "__main__":
    sys.exit(main())
