"""The rollout: ``lax.scan`` of act + environment step, emitting a :class:`Trajectory`.

Pure and device-agnostic; Anakin calls it inside ``shard_map`` on each device's slice of the
environment batch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.ops import vary_like
from podracer.types import Agent, EpisodeInfo, TimeStep, Trajectory, no_actor_state


class RolloutState(NamedTuple):
    """The acting side's carry, batched over environments ``[B]``."""

    env_state: Any  # environment state [B, ...]
    timestep: TimeStep  # the last TimeStep [B, ...]; its obs is the next one to act in
    actor_state: Any = ()  # [B, ...]: the agent's actor state after the last act


def reset_actor_state(initial: Any, carried: Any, episode_start: jax.Array) -> Any:
    """``initial`` where ``episode_start [B]`` (the observation to act in starts an episode),
    else ``carried``; leaves ``[B, ...]``."""

    def one(init, carry):
        start = episode_start.reshape(-1, *([1] * (carry.ndim - 1)))
        return jnp.where(start, init, carry)

    return jax.tree.map(one, initial, carried)


def make_rollout(env, agent: Agent, rollout_len: int, *, unroll: int | bool = 1):
    """Builds ``rollout(params, state, env_params, key) -> (state, Trajectory, EpisodeInfo)``.

    ``env`` steps one environment (it is vmapped here, over the leading axis of ``state``);
    ``agent.act`` takes a batch of observations and the actor state, which is reset to
    ``agent.initial_actor_state`` where an episode starts (after a step that ended one) and
    recorded in ``Trajectory.actor_state`` as ``act`` received it. The returned
    ``Trajectory`` and ``EpisodeInfo`` are ``[rollout_len, B]``; ``EpisodeInfo`` is all zeros
    unless ``env`` is wrapped in :class:`~podracer.envs.EpisodeStatistics`. ``unroll`` is passed
    to ``lax.scan``.
    """
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(params, state: RolloutState, env_params, key):
        num_envs = state.timestep.reward.shape[0]
        initial = agent.initial_actor_state(num_envs)

        def one_step(state: RolloutState, step_key):
            act_key, env_key = jax.random.split(step_key)
            obs = state.timestep.obs
            actor_state = reset_actor_state(initial, state.actor_state, state.timestep.done)
            next_actor_state, out = agent.act(params, actor_state, obs, act_key)
            env_state, ts = batched_step(
                jax.random.split(env_key, num_envs), state.env_state, out.action, env_params
            )
            transition = Trajectory(
                obs=obs,
                reward=ts.reward,
                terminated=ts.terminated,
                truncated=ts.truncated,
                bootstrap_obs=ts.final_obs,
                behaviour=out,
                actor_state=actor_state,
            )
            info = ts.info
            if info is None:
                zeros = jnp.zeros_like(ts.reward)
                info = EpisodeInfo(ts.terminated & False, zeros, zeros.astype(jnp.int32))
            new_state = vary_like(RolloutState(env_state, ts, next_actor_state), state)
            return new_state, (transition, info)

        state, (traj, info) = jax.lax.scan(
            one_step, state, jax.random.split(key, rollout_len), unroll=unroll
        )
        return state, traj, info

    return rollout


def reset_envs(env, keys, env_params, initial_actor_state=no_actor_state) -> RolloutState:
    """Resets one environment per key (``keys [B]``) into a batched :class:`RolloutState`, with
    the actor state ``initial_actor_state(B)`` (an agent's ``initial_actor_state``)."""
    env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
    return RolloutState(env_state, ts, initial_actor_state(keys.shape[0]))
