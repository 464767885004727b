"""The rollout: ``lax.scan`` of :func:`~podracer.core.acting.step_and_record`, emitting a
:class:`Trajectory`.

Pure and device-agnostic; Anakin calls it inside ``shard_map`` on each device's slice of the
environment batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from podracer.core.acting import (
    RolloutState,
    batched_env_step,
    reset_actor_state,
    reset_and_act,
    step_and_record,
)
from podracer.types import (
    Agent,
    EnvSpec,
    EpisodeInfo,
    ObservationSpec,
    TimeStep,
    no_actor_state,
    zero_observation,
)
from podracer.util.ops import vary_like


def make_rollout(env, agent: Agent, rollout_len: int, *, unroll: int | bool = 1):
    """Builds ``rollout(params, state, env_params, key) -> (state, Trajectory, EpisodeInfo)``.

    ``env`` steps one environment (it is vmapped here, over the leading axis of ``state``);
    every step is :func:`~podracer.core.acting.step_and_record`: ``agent.act`` on the batch of
    observations with the actor state reset to ``agent.initial_actor_state`` where an episode
    starts (after a step that ended one), recorded in ``Trajectory.actor_state`` as ``act``
    received it. Each step's key is split in two, the first half to ``act``, the second to the
    environments. The returned ``Trajectory`` and ``EpisodeInfo`` are ``[rollout_len, B]``;
    ``EpisodeInfo`` is all zeros unless ``env`` is wrapped in
    :class:`~podracer.envs.EpisodeStatistics`.

    Args:
      env: one (unbatched) :class:`~podracer.types.Environment`.
      agent: the :class:`~podracer.types.Agent` that acts.
      rollout_len: ``T``, the steps of one rollout.
      unroll: passed to the time ``lax.scan``.

    Returns:
      ``rollout(params, state, env_params, key) -> (state, Trajectory [T, B], EpisodeInfo
      [T, B])``, a pure function of a batched :class:`RolloutState` (:func:`reset_envs`).
    """
    act = reset_and_act(agent)

    def rollout(params, state: RolloutState, env_params, key):
        env_step = batched_env_step(env, env_params, state.timestep.reward.shape[0])

        def one_step(state: RolloutState, step_key):
            act_key, env_key = jax.random.split(step_key)
            new_state, transition, info = step_and_record(
                act, env_step, params, state, act_key, env_key
            )
            if info is None:
                zeros = jnp.zeros_like(transition.reward)
                info = EpisodeInfo(transition.terminated & False, zeros, zeros.astype(jnp.int32))
            return vary_like(new_state, state), (transition, info)

        state, (traj, info) = jax.lax.scan(
            one_step, state, jax.random.split(key, rollout_len), unroll=unroll
        )
        return state, traj, info

    return rollout


def reset_envs(env, keys, env_params, initial_actor_state=no_actor_state) -> RolloutState:
    """Resets one environment per key (``keys [B]``) into a batched :class:`RolloutState`, with
    the actor state ``initial_actor_state(B)`` (an agent's ``initial_actor_state``).

    Args:
      env: one (unbatched) :class:`~podracer.types.Environment`.
      keys: ``[B]`` PRNG keys, one per environment.
      env_params: the environment's params (shared by the batch).
      initial_actor_state: ``initial_actor_state(B)``, the agent's carry at an episode's start.

    Returns:
      The :class:`RolloutState` of ``B`` environments, what :func:`make_rollout`'s rollout
      starts from.
    """
    env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
    return RolloutState(env_state, ts, initial_actor_state(keys.shape[0]))


class SpecEnvironment:
    """An environment of the given :class:`EnvSpec` whose every observation is zeros: what
    :func:`trajectory_shape` traces the rollout with, for an environment that is not JAX (a
    host environment) but has the same specs."""

    def __init__(self, spec: EnvSpec):
        self.id = "spec"
        self.observation_spec: ObservationSpec = spec.observation
        self.action_spec = spec.action
        self.default_params = ()

    def _timestep(self):
        return TimeStep.first(zero_observation(self.observation_spec, xp=jnp))

    def reset(self, key, params):
        del key, params
        return (), self._timestep()

    def step(self, key, state, action, params):
        del key, action, params
        return state, self._timestep()


def trajectory_shape(agent: Agent, params, spec: EnvSpec, num_envs: int, rollout_len: int):
    """The ``jax.ShapeDtypeStruct`` s of the :class:`Trajectory` ``[rollout_len, num_envs]``
    that :func:`make_rollout` emits for ``agent`` acting with ``params`` in an environment of
    ``spec``: ``jax.eval_shape`` of the rollout itself, so a loop that assembles trajectories
    another way (Sebulba's host actors) compiles its learner for exactly what acting records."""
    env = SpecEnvironment(spec)
    rollout = make_rollout(env, agent, rollout_len)

    def traj(params):
        keys = jax.random.split(jax.random.key(0), num_envs)
        state = reset_envs(env, keys, (), agent.initial_actor_state)
        return rollout(params, state, (), jax.random.key(0))[1]

    return jax.eval_shape(traj, params)


__all__ = [
    "RolloutState",
    "SpecEnvironment",
    "make_rollout",
    "reset_actor_state",
    "reset_envs",
    "trajectory_shape",
]
