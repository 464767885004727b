"""The rollout: ``lax.scan`` of act + environment step, emitting a :class:`Trajectory`.

Pure and device-agnostic; Anakin calls it inside ``shard_map`` on each device's slice of the
environment batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from podracer.types import ActorOutput, EpisodeInfo, TimeStep, Trajectory


class RolloutState(NamedTuple):
    """The acting side's carry, batched over environments ``[B]``."""

    env_state: Any  # environment state [B, ...]
    timestep: TimeStep  # the last TimeStep [B, ...]; its obs is the next one to act in


def make_rollout(
    env,
    act: Callable[[Any, jax.Array, jax.Array], ActorOutput],
    rollout_len: int,
    *,
    unroll: int | bool = 1,
):
    """Builds ``rollout(params, state, env_params, key) -> (state, Trajectory, EpisodeInfo)``.

    ``env`` steps one environment (it is vmapped here, over the leading axis of ``state``);
    ``act`` takes a batch of observations. The returned ``Trajectory`` and ``EpisodeInfo`` are
    ``[rollout_len, B]``; ``EpisodeInfo`` is all zeros unless ``env`` is wrapped in
    :class:`~podracer.envs.EpisodeStatistics`. ``unroll`` is passed to ``lax.scan``.
    """
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(params, state: RolloutState, env_params, key):
        num_envs = state.timestep.reward.shape[0]

        def one_step(state: RolloutState, step_key):
            act_key, env_key = jax.random.split(step_key)
            obs = state.timestep.obs
            out = act(params, obs, act_key)
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
            )
            info = ts.info
            if info is None:
                zeros = jax.numpy.zeros_like(ts.reward)
                info = EpisodeInfo(ts.terminated & False, zeros, zeros.astype(jax.numpy.int32))
            return RolloutState(env_state, ts), (transition, info)

        state, (traj, info) = jax.lax.scan(
            one_step, state, jax.random.split(key, rollout_len), unroll=unroll
        )
        return state, traj, info

    return rollout


def reset_envs(env, keys, env_params) -> RolloutState:
    """Resets one environment per key (``keys [B]``) into a batched :class:`RolloutState`."""
    env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
    return RolloutState(env_state, ts)
