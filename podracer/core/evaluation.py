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

from podracer.core.acting import (
    RolloutState,
    batched_env_step,
    greedy_agent,
    reset_and_act,
    step_and_record,
)
from podracer.core.rollout import reset_envs
from podracer.types import Agent
from podracer.util import seeding


def eval_key(seed: int, updates: int) -> jax.Array:
    """Evaluation's own keys: they never touch the training state's keys."""
    return jax.random.fold_in(jax.random.key(seed + seeding.EVAL_SEED_OFFSET), updates)


def evaluation_params(env) -> Any:
    """The params evaluations play with: ``env.evaluation_params(env.default_params)`` where
    the environment defines it (a held-out period of :mod:`podracer.trading.environment`), else its
    ``default_params``."""
    held_out = getattr(env, "evaluation_params", None)
    return env.default_params if held_out is None else held_out(env.default_params)


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

    Every step is :func:`~podracer.core.acting.step_and_record` (the actor state carried and
    reset where an episode starts, as when training), with the greedy agent when ``greedy``.
    Episodes that have not ended after ``max_steps`` steps count with the return so far.
    ``env_params`` default to :func:`evaluation_params`.
    """
    if num_episodes < 1:
        raise ValueError(f"make_evaluator: num_episodes={num_episodes} must be >= 1")
    env_params = evaluation_params(env) if env_params is None else env_params
    act = reset_and_act(greedy_agent(agent) if greedy else agent)
    env_step = batched_env_step(env, env_params, num_episodes)

    def evaluate(params, key):
        reset_key, key = jax.random.split(key)
        keys = jax.random.split(reset_key, num_episodes)
        state = reset_envs(env, keys, env_params, agent.initial_actor_state)

        def cond(carry):
            _, _, finished, _, t = carry
            return (t < max_steps) & ~jnp.all(finished)

        def body(carry):
            state, key, finished, returns, t = carry
            key, act_key, step_key = jax.random.split(key, 3)
            state, step, _ = step_and_record(act, env_step, params, state, act_key, step_key)
            returns = returns + jnp.where(finished, 0.0, step.reward)
            finished = finished | step.terminated | step.truncated
            return state, key, finished, returns, t + 1

        init = (
            state,
            key,
            jnp.zeros(num_episodes, bool),
            jnp.zeros(num_episodes, jnp.float32),
            jnp.zeros((), jnp.int32),
        )
        return jax.lax.while_loop(cond, body, init)[3]

    return jax.jit(evaluate)


def host_acting(env, agent: Agent, *, greedy: bool = True):
    """``(act, env_step)`` of :func:`~podracer.core.acting.step_and_record` for a host
    environment: ``act`` jitted, its key ``(key, t)`` (the step's index folded in: one dispatch
    per step), and ``env_step`` the environment's NumPy step (no state, no key)."""
    acting = reset_and_act(greedy_agent(agent) if greedy else agent)

    @jax.jit
    def act(params, actor_state, obs, done, key_and_step):
        key, t = key_and_step
        return acting(params, actor_state, obs, done, jax.random.fold_in(key, t))

    def env_step(env_state, action, env_key):
        del env_key
        return env_state, env.step(np.asarray(action))

    return act, env_step


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
    episode. ``env`` is reset first; its auto-reset episodes after the first are ignored. Every
    step is :func:`~podracer.core.acting.step_and_record`, ``act`` jitted with the step's key
    folded in (one dispatch per step)."""
    if env.is_async:
        raise ValueError(
            "evaluate_host: the host environment is in async mode "
            f"(batch_size={env.batch_size} < num_envs={env.num_envs}); use a sync one"
        )
    act, env_step = host_acting(env, agent, greedy=greedy)
    state = RolloutState((), env.reset(), agent.initial_actor_state(env.num_envs))
    finished = np.zeros(env.num_envs, bool)
    returns = np.zeros(env.num_envs, np.float64)
    for t in range(max_steps):
        state, step, _ = step_and_record(act, env_step, params, state, (key, t), None)
        returns += np.where(finished, 0.0, step.reward)
        finished |= np.asarray(step.terminated | step.truncated)
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
