"""Evaluation: the return of N whole episodes played by a policy, without learning.

- :func:`make_evaluator` — JAX environments, on device: N environments each play their first
  episode to its end inside one ``lax.while_loop``; jitted, and ``vmap``-able over members.
- :func:`evaluate_host` — host environments (envpool): N environments stepped until each has
  finished one episode.

The policy is greedy (``agent.greedy``: the action of the largest logit, i.e. of the largest
q-value for Q(λ)) or stochastic (sampled as when acting). The agent's actor state is carried
and reset where an episode starts, as when training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer import seeding
from podracer.core.rollout import reset_actor_state
from podracer.types import Agent


def eval_key(seed: int, updates: int) -> jax.Array:
    """Evaluation's own keys: they never touch the training state's keys."""
    return jax.random.fold_in(jax.random.key(seed + seeding.EVAL_SEED_OFFSET), updates)


def _policy(agent: Agent, greedy: bool):
    """``policy(params, actor_state, obs, key) -> (actor_state, action)``."""

    def policy(params, actor_state, obs, key):
        actor_state, out = agent.act(params, actor_state, obs, key)
        return actor_state, agent.greedy(out) if greedy else out.action

    return policy


def make_evaluator(
    env,
    agent: Agent,
    *,
    num_episodes: int,
    greedy: bool = True,
    max_steps: int = 100_000,
    env_params: Any = None,
) -> Callable[[Any, jax.Array], jax.Array]:
    """``evaluate(params, key) -> returns [num_episodes]`` for a JAX environment, jitted.

    Episodes that have not ended after ``max_steps`` steps count with the return so far.
    """
    if num_episodes < 1:
        raise ValueError(f"make_evaluator: num_episodes={num_episodes} must be >= 1")
    env_params = env.default_params if env_params is None else env_params
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    policy = _policy(agent, greedy)
    initial = agent.initial_actor_state(num_episodes)

    def evaluate(params, key):
        reset_key, key = jax.random.split(key)
        env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_episodes), env_params
        )

        def cond(carry):
            _, _, _, _, finished, _, t = carry
            return (t < max_steps) & ~jnp.all(finished)

        def body(carry):
            env_state, obs, actor_state, key, finished, returns, t = carry
            key, act_key, step_key = jax.random.split(key, 3)
            actor_state, action = policy(params, actor_state, obs, act_key)
            env_state, ts = step(
                jax.random.split(step_key, num_episodes), env_state, action, env_params
            )
            returns = returns + jnp.where(finished, 0.0, ts.reward)
            finished = finished | ts.done
            actor_state = reset_actor_state(initial, actor_state, ts.done)
            return env_state, ts.obs, actor_state, key, finished, returns, t + 1

        init = (
            env_state,
            ts.obs,
            initial,
            key,
            jnp.zeros(num_episodes, bool),
            jnp.zeros(num_episodes, jnp.float32),
            jnp.zeros((), jnp.int32),
        )
        return jax.lax.while_loop(cond, body, init)[5]

    return jax.jit(evaluate)


def evaluate_host(
    env,
    agent: Agent,
    params,
    key: jax.Array,
    *,
    greedy: bool = True,
    max_steps: int = 1_000_000,
) -> np.ndarray:
    """Returns ``[env.num_envs]``: each environment of a (sync) host environment plays one
    episode. ``env`` is reset first; its auto-reset episodes after the first are ignored."""
    if env.is_async:
        raise ValueError(
            "evaluate_host: the host environment is in async mode "
            f"(batch_size={env.batch_size} < num_envs={env.num_envs}); use a sync one"
        )

    act = _policy(agent, greedy)

    @jax.jit  # the step's key folded in the same dispatch (op by op, it cost as much as acting)
    def policy(params, actor_state, obs, key, t):
        return act(params, actor_state, obs, jax.random.fold_in(key, t))

    initial = agent.initial_actor_state(env.num_envs)
    actor_state = initial
    timestep = env.reset()
    finished = np.zeros(env.num_envs, bool)
    returns = np.zeros(env.num_envs, np.float64)
    for t in range(max_steps):
        actor_state, action = policy(params, actor_state, timestep.obs, key, t)
        timestep = env.step(np.asarray(action))
        actor_state = reset_actor_state(initial, actor_state, np.asarray(timestep.done))
        returns += np.where(finished, 0.0, timestep.reward)
        finished |= np.asarray(timestep.terminated | timestep.truncated)
        if finished.all():
            break
    return returns


def summarize_returns(returns) -> dict[str, float]:
    """``mean``, ``std``, ``min``, ``max`` and ``episodes`` of a flat array of returns."""
    returns = np.asarray(returns, np.float64).reshape(-1)
    return {
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "min": float(returns.min()),
        "max": float(returns.max()),
        "episodes": int(returns.size),
    }
