"""MuZero's throughput: training with search, the search alone, the environment alone, the
learner alone.

    python benchmarks/muzero.py                       # catch and CartPole, Anakin
    python benchmarks/muzero.py --only catch --total-steps 20000
    python benchmarks/muzero.py --smoke               # tiny sizes, about a minute on CPU

One JSON line per configuration on stdout (``--out`` appends them to a file):

- ``sps``: Anakin training steps per second with the agent's defaults (16 envs x 8 steps, Gumbel
  search of ``num_simulations``), after compiling; ``compile_s``; ``final_return``;
- ``search_sps``: the search alone on the same batch (``num_envs`` observations of the
  environment, the initial params), as environment steps per second: ``num_envs`` times the
  searches per second, many searches in one compiled ``lax.scan``, best of 3;
- ``env_only_sps``: the environment alone with random actions, scanned as Anakin scans it
  (``anakin_throughput.env_only_sps``);
- ``learner_updates_per_s`` and ``gradient_steps_per_s``: ``learner.update`` alone (the one
  learner core, one device, no ``shard_map``) on trajectories of ``num_envs x rollout_len``
  random steps after its buffer holds ``learning_starts`` steps, best of 3; an update takes
  ``round(replay_ratio x steps)`` gradient steps of ``batch_size`` windows;
- ``learner_layout``: the layout the run's recipe chose;
- what ran: ``env``, ``num_simulations``, ``search``, sizes, ``backend``, ``device_kind``.

In Anakin the three parts run one after another in one program, so ``1 / sps`` is about
``1 / search_sps + 1 / env_only_sps + 1 / (learner_updates_per_s x steps per update)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
from anakin_throughput import env_only_sps, peak_memory
from jsonl import emit

from podracer import envs, loops
from podracer.agents import muzero, muzero_model
from podracer.agents.muzero import MuZeroConfig
from podracer.agents.optim import constant_adam
from podracer.core.learner.build import make_learner
from podracer.core.learner.replay import gradient_steps
from podracer.loops.anakin import AnakinConfig, build, run
from podracer.types import ActorOutput, Trajectory, zero_observation


def best_of_3(compiled, *args) -> float:
    jax.block_until_ready(compiled(*args))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - start)
    return best


def search_sps(env, config: MuZeroConfig, num_envs: int, searches: int) -> float:
    """Environment steps per second of the search alone on ``num_envs`` observations."""
    actions = env.action_spec.num_actions
    network = muzero_model.MuZeroNetwork(config, actions)
    search = muzero_model.make_search(config, muzero_model.model_of(network), actions)
    obs = zero_observation(env.observation_spec, (num_envs,), jnp)
    params = jax.jit(network.init)(jax.random.key(0), jax.tree.map(lambda x: x[:1], obs))

    def many(params, key):
        def one(total, key):
            out = search(params, obs, key)
            return total + jnp.sum(out.value), None

        return jax.lax.scan(one, jnp.zeros(()), jax.random.split(key, searches))[0]

    compiled = jax.jit(many).lower(params, jax.random.key(1)).compile()
    return num_envs * searches / best_of_3(compiled, params, jax.random.key(2))


def learner_rate(env, config: MuZeroConfig, num_envs: int, rollout_len: int, updates: int):
    """``(updates per second, gradient steps per update)`` of ``learner.update`` alone."""
    actions = env.action_spec.num_actions
    agent = muzero.make_agent(config, env.action_spec)
    learner = make_learner(agent, constant_adam(config, 1), envs_per_device=num_envs)
    example = zero_observation(env.observation_spec, (), jnp)
    state = learner.init(jax.random.key(0), example)

    def trajectory(key):
        obs_key, reward_key, end_key = jax.random.split(key, 3)
        obs = jax.tree.map(
            lambda x: jax.random.uniform(obs_key, x.shape, jnp.float32).astype(x.dtype),
            zero_observation(env.observation_spec, (rollout_len, num_envs), jnp),
        )
        shape = (rollout_len, num_envs)
        ends = jax.random.uniform(end_key, shape)
        return Trajectory(
            obs=obs,
            reward=jax.random.normal(reward_key, shape),
            terminated=ends < 0.05,
            truncated=(ends >= 0.05) & (ends < 0.06),
            bootstrap_obs=obs,
            behaviour=ActorOutput(
                action=jax.random.randint(key, shape, 0, actions),
                log_prob=jnp.zeros(shape),
                value=jnp.zeros(shape),
                extras={
                    "search_policy": jnp.full((*shape, actions), 1.0 / actions),
                    "search_value": jnp.zeros(shape),
                },
            ),
        )

    def many(state, key):
        def one(state, key):
            state, metrics = learner.update(state, trajectory(key))
            return state, metrics["loss"]

        return jax.lax.scan(one, state, jax.random.split(key, updates))

    compiled = jax.jit(many).lower(state, jax.random.key(1)).compile()
    fill = -(-config.learning_starts // (num_envs * rollout_len)) + 1
    for i in range(-(-fill // updates)):
        state, _ = compiled(state, jax.random.key(10 + i))
    seconds = best_of_3(compiled, state, jax.random.key(3))
    return updates / seconds, gradient_steps(config, num_envs * rollout_len)


def bench(
    name: str,
    env_id: str,
    config: MuZeroConfig,
    total_steps: int,
    smoke: bool,
    num_envs: int | None = None,
) -> dict:
    """One configuration's line: Anakin with the agent's loop defaults (``num_envs`` of them
    unless given)."""
    loop = loops.loop_defaults(muzero.SPEC, "anakin")
    arch = AnakinConfig(num_envs=num_envs or loop["num_envs"], rollout_len=loop["rollout_len"])
    env = envs.make(env_id)
    system = build(env_id, config, arch, total_timesteps=total_steps, devices=jax.devices()[:1])
    summary = run(system, seed=0, total_timesteps=total_steps).summary
    updates = 4 if smoke else 16
    updates_per_s, steps_per_update = learner_rate(
        env, config, arch.num_envs, arch.rollout_len, updates
    )
    return {
        "config": name,
        "env": env_id,
        "arch": "anakin",
        "search": config.search,
        "num_simulations": config.num_simulations,
        "num_envs": arch.num_envs,
        "rollout_len": arch.rollout_len,
        "total_steps": summary["total_steps"],
        "sps": summary["sps"],
        "compile_s": summary["compile_s"],
        "final_return": summary["final_return"],
        "search_sps": search_sps(env, config, arch.num_envs, 32 if smoke else 256),
        "env_only_sps": env_only_sps(env_id, arch.num_envs, arch.rollout_len, 64),
        "learner_updates_per_s": updates_per_s,
        "gradient_steps_per_update": steps_per_update,
        "gradient_steps_per_s": updates_per_s * steps_per_update,
        "learner_layout": system.recipe.layout._asdict(),
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        **peak_memory(),
    }


CONFIGS = {
    "catch": ("catch", MuZeroConfig(), 50_000),
    "catch-2-simulations": ("catch", MuZeroConfig(num_simulations=2), 50_000),
    "catch-puct": ("catch", MuZeroConfig(search="puct"), 50_000),
    "cartpole": ("gymnax:CartPole-v1", MuZeroConfig(), 200_000),
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated configurations: " + ", ".join(CONFIGS))
    parser.add_argument("--total-steps", type=int, help="environment steps per configuration")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(CONFIGS)
    for name in names:
        env_id, config, steps = CONFIGS[name]
        if args.smoke:
            config = dataclasses.replace(config, learning_starts=256, buffer_size=2048)
            steps = 2048
        emit(bench(name, env_id, config, args.total_steps or steps, args.smoke), args.out)


if __name__ == "__main__":
    sys.exit(main())
