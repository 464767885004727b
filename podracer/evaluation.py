"""Evaluation: the return of N whole episodes played by a policy, without learning.

- :func:`make_evaluator` — JAX environments, on device: N environments each play their first
  episode to its end inside one ``lax.while_loop``; jitted, and ``vmap``-able over members.
- :func:`evaluate_host` — host environments (envpool): N environments stepped until each has
  finished one episode.

The policy is greedy (the action of the largest logit, i.e. of the largest q-value for Q(λ)) or
stochastic (sampled as when acting).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.types import Agent


def _choose(out, greedy: bool):
    return jnp.argmax(out.logits, axis=-1).astype(out.action.dtype) if greedy else out.action


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

    def evaluate(params, key):
        reset_key, key = jax.random.split(key)
        env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_episodes), env_params
        )

        def cond(carry):
            _, _, _, finished, _, t = carry
            return (t < max_steps) & ~jnp.all(finished)

        def body(carry):
            env_state, obs, key, finished, returns, t = carry
            key, act_key, step_key = jax.random.split(key, 3)
            action = _choose(agent.act(params, obs, act_key), greedy)
            env_state, ts = step(
                jax.random.split(step_key, num_episodes), env_state, action, env_params
            )
            returns = returns + jnp.where(finished, 0.0, ts.reward)
            finished = finished | ts.done
            return env_state, ts.obs, key, finished, returns, t + 1

        init = (
            env_state,
            ts.obs,
            key,
            jnp.zeros(num_episodes, bool),
            jnp.zeros(num_episodes, jnp.float32),
            jnp.zeros((), jnp.int32),
        )
        return jax.lax.while_loop(cond, body, init)[4]

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
    if env.batch_size < env.num_envs:
        raise ValueError(
            "evaluate_host: the host environment is in async mode "
            f"(batch_size={env.batch_size} < num_envs={env.num_envs}); use a sync one"
        )

    @jax.jit
    def policy(params, obs, key):
        return _choose(agent.act(params, obs, key), greedy)

    timestep = env.reset()
    finished = np.zeros(env.num_envs, bool)
    returns = np.zeros(env.num_envs, np.float64)
    for t in range(max_steps):
        action = np.asarray(policy(params, timestep.obs, jax.random.fold_in(key, t)))
        timestep = env.step(action)
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
