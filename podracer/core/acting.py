"""Acting, written once: every loop and every evaluation steps its environments through
:func:`step_and_record`, and the actor state is reset in :func:`reset_and_act` alone.

One step, for a batch of ``B`` environments::

    carry = RolloutState(env_state, timestep, actor_state)
        |  act = reset_and_act(agent): actor_state reset to agent.initial_actor_state where
        |        timestep.done (the observation to act in starts an episode), then agent.act
        v
    Acted(actor_state given to act, its next actor state, ActorOutput)
        |  env_step(env_state, action, key) -> (env_state, TimeStep)
        v
    RolloutState(env_state, next timestep, next actor state), Trajectory of the step [B]

The Anakin rollout scans it (:func:`podracer.core.rollout.make_rollout`), Sebulba's sync actor
calls it in a Python loop with a host environment's ``step`` (``env_state`` is then ``()``: the
host environment keeps its own) and the actor's jitted ``act``, and evaluation runs it with a
greedy agent (:func:`greedy_agent`) on device or on the host. Sebulba's async collector acts
through the same ``act`` (the reset rule) and records the two halves of a step as their results
arrive (:class:`podracer.loops.sebulba.AsyncCollector`). Brax's ``training/acting.py``
(``actor_step`` / ``generate_unroll``) has the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.types import ActorOutput, Agent, EpisodeInfo, TimeStep, Trajectory, step_batch


class RolloutState(NamedTuple):
    """The acting side's carry, batched over environments ``[B]``."""

    env_state: Any  # environment state [B, ...]; () for a host environment
    timestep: TimeStep  # the last TimeStep [B, ...]; its obs is the next one to act in
    actor_state: Any = ()  # [B, ...]: the agent's actor state after the last act


class Acted(NamedTuple):
    """What one act did, batched ``[B]``."""

    actor_state: Any  # the actor state act was given: reset where an episode starts
    next_actor_state: Any  # the actor state act returned (carried to the next step)
    out: ActorOutput


def reset_actor_state(initial: Any, carried: Any, episode_start: jax.Array) -> Any:
    """``initial`` where ``episode_start [B]`` (the observation to act in starts an episode),
    else ``carried``; leaves ``[B, ...]``. The one reset rule of acting, and of a learner that
    re-runs a recurrent policy over a sequence (:mod:`podracer.core.memory`)."""

    def one(init, carry):
        start = episode_start.reshape(-1, *([1] * (carry.ndim - 1)))
        return jnp.where(start, init, carry)

    return jax.tree.map(one, initial, carried)


def reset_and_act(agent: Agent) -> Callable[..., Acted]:
    """``act(params, actor_state, obs, done, key) -> Acted``: ``agent.act`` on ``obs [B, ...]``
    with the actor state reset to ``agent.initial_actor_state`` where ``done [B]`` (the
    observation starts an episode: the step before it ended one). Pure; loops jit it where they
    need (Sebulba's actors), or trace it inside their rollout (Anakin)."""

    def act(params, actor_state, obs, done, key) -> Acted:
        initial = agent.initial_actor_state(jax.tree.leaves(obs)[0].shape[0])
        actor_state = reset_actor_state(initial, actor_state, done)
        next_actor_state, out = agent.act(params, actor_state, obs, key)
        return Acted(actor_state, next_actor_state, out)

    return act


def record(obs, acted: Acted, ts: TimeStep) -> Trajectory:
    """The :class:`Trajectory` entry of one step ``[B]``: the observation acted in, what the
    agent did (with the actor state it was given) and what the environment answered; the
    observation that followed, before any auto-reset, is the step's ``bootstrap_obs``."""
    return Trajectory(
        obs=obs,
        reward=ts.reward,
        terminated=ts.terminated,
        truncated=ts.truncated,
        bootstrap_obs=ts.final_obs,
        behaviour=acted.out,
        actor_state=acted.actor_state,
    )


def step_and_record(
    act: Callable[..., Acted],
    env_step: Callable[[Any, Any, Any], tuple[Any, TimeStep]],
    params,
    carry: RolloutState,
    act_key,
    env_key,
) -> tuple[RolloutState, Trajectory, EpisodeInfo | None]:
    """One step of acting: ``act`` (from :func:`reset_and_act`) in the carry's observation, then
    ``env_step(env_state, action, env_key) -> (env_state, TimeStep)``; returns the next carry,
    the step's :class:`Trajectory` entry ``[B]`` and the environment's episode statistics
    (``None`` from an environment that keeps none).

    The keys are passed through untouched: a JAX environment's rollout gives each a key, a host
    actor gives ``act`` whatever its jitted ``act`` takes (the rollout's key array and the step
    index, one dispatch per step) and its environment none."""
    obs = carry.timestep.obs
    acted = act(params, carry.actor_state, obs, carry.timestep.done, act_key)
    env_state, ts = env_step(carry.env_state, acted.out.action, env_key)
    next_carry = RolloutState(env_state, ts, acted.next_actor_state)
    return next_carry, record(obs, acted, ts), ts.info


def batched_env_step(env, env_params, num_envs: int):
    """``env_step(env_state, action, key)`` of :func:`step_and_record` for ``num_envs`` copies
    of a JAX environment (:func:`~podracer.types.step_batch`: ``env.step`` vmapped, or the
    environment's own batch step; ``key`` split into one per environment)."""
    step = step_batch(env)

    def env_step(env_state, action, key):
        return step(jax.random.split(key, num_envs), env_state, action, env_params)

    return env_step


def greedy_agent(agent: Agent) -> Agent:
    """``agent`` acting with ``agent.greedy(out)`` instead of its sampled action: what greedy
    evaluation steps its environments with."""

    def act(params, actor_state, obs, key):
        actor_state, out = agent.act(params, actor_state, obs, key)
        return actor_state, out._replace(action=agent.greedy(out))

    return agent._replace(act=act)


__all__ = [
    "Acted",
    "RolloutState",
    "batched_env_step",
    "greedy_agent",
    "record",
    "reset_actor_state",
    "reset_and_act",
    "step_and_record",
]
