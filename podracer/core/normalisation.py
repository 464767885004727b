"""Running observation normalisation and reward scaling, for every agent.

:func:`normalised` wraps an :class:`~podracer.types.Agent` so that

- the statistics (:class:`RunningStatistics`) live in the agent's slot of the
  :class:`~podracer.types.LearnerState`, are updated by the learner once per update from the
  trajectory it was given (after the gradient steps, like every agent state), and are therefore
  checkpointed with the rest;
- the batch statistics are taken with the learner's ``mean_fn``: the means over the whole batch
  on every device and process, so 2 devices end with the statistics 1 device would have with
  the whole batch, and every device keeps the same statistics;
- the actors normalise with the statistics the params they hold came with
  (``Agent.actor_params``), in Anakin and Sebulba alike, and evaluation reads them without
  changing them;
- ``prepare`` normalises the trajectory's ``obs`` and ``bootstrap_obs`` (and scales its
  rewards) with the statistics before the update, those the actors used (in Sebulba the actors'
  may lag by the params' lag), so the loss sees what ``act`` saw.

Observations become ``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)`` (f32), as in the
PPO implementation details of Huang et al. (2022) and Brax's ``running_statistics``. The first
rollout, before any statistics, is normalised with mean 0 and variance 1.

Rewards are divided by ``sqrt(var + 1e-8)`` of the discounted return and clipped: the return's
statistics are those of ``G_t = r_t + gamma (1 - done_t) G_{t+1}`` inside each trajectory
(``G_T = 0``), which needs nothing carried from one trajectory to the next, so it is the same in
every loop and for every actor thread (gym's ``NormalizeReward`` accumulates the return forward
across rollouts per environment instead; for a trajectory much longer than ``1 / (1 - gamma)``
steps the two agree).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.types import Agent, MeanFn, ObservationSpec, Trajectory
from podracer.util.ops import vary_as
from podracer.util.validation import check_range

EPSILON = 1e-8


@dataclasses.dataclass(frozen=True)
class NormalisationFields:
    """The normalisation fields of an agent config: a config that inherits them gets
    :func:`normalised` applied by :meth:`podracer.agents.AgentSpec.build`."""

    normalize_observations: bool = False
    """Normalise observations by running statistics of the observations seen (the learner
    updates them; the actors and evaluation apply them)."""
    normalize_rewards: bool = False
    """Scale rewards by a running estimate of the discounted return's standard deviation."""
    observation_clip: float = 10.0
    """Normalised observations are clipped to [-observation_clip, observation_clip]."""
    reward_clip: float = 10.0
    """Scaled rewards are clipped to [-reward_clip, reward_clip]."""

    def check_normalisation(self) -> None:
        """Validates the normalisation fields (call it from ``__post_init__``)."""
        check_range(self, "observation_clip", 0.0, None, low_open=True)
        check_range(self, "reward_clip", 0.0, None, low_open=True)


class RunningStatistics(NamedTuple):
    """Mean and (population) variance of everything seen, per element of ``shape``.

    ``count`` counts the batches combined: every batch of a run has the same size (the
    learner's whole batch), so weighting batches equally is Chan et al.'s exact parallel
    combination, and the count does not depend on how the batch was split over devices.
    """

    count: jax.Array  # f32 []: batches combined so far
    mean: jax.Array  # f32 [*shape]
    var: jax.Array  # f32 [*shape]


def init_statistics(shape: tuple[int, ...]) -> RunningStatistics:
    """No data yet: mean 0, variance 1 (normalising with them changes nothing but the dtype)."""
    return RunningStatistics(
        jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32)
    )


def update_statistics(
    stats: RunningStatistics, x: jax.Array, mean_fn: MeanFn, *, batch_dims: int
) -> RunningStatistics:
    """``stats`` combined with the batch ``x [*batch, *shape]`` (``batch_dims`` leading batch
    axes): the batch's mean and variance per element, over every device through ``mean_fn``,
    then ``n = count + 1``, ``delta = mean_b - mean``,
    ``mean' = mean + delta / n``, ``var' = (count var + var_b + delta^2 count / n) / n``."""
    shape = x.shape[batch_dims:]
    flat = x.reshape(-1, *shape).astype(jnp.float32)
    per_element = jax.vmap(mean_fn, in_axes=1)  # mean_fn of each element over the batch

    def moments(columns):  # [N, K] -> ([K], [K])
        mean = per_element(columns)
        return mean, per_element(jnp.square(columns - mean))

    batch_mean, batch_var = moments(flat.reshape(flat.shape[0], -1))
    batch_mean, batch_var = batch_mean.reshape(shape), batch_var.reshape(shape)
    count = stats.count + 1.0
    delta = batch_mean - stats.mean
    mean = stats.mean + delta / count
    var = (stats.count * stats.var + batch_var + jnp.square(delta) * stats.count / count) / count
    return RunningStatistics(count, mean, var)


def normalise(stats: RunningStatistics, x: jax.Array, clip: float) -> jax.Array:
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` in f32; ``x [..., *shape]``."""
    z = (x.astype(jnp.float32) - stats.mean) * jax.lax.rsqrt(stats.var + EPSILON)
    return jnp.clip(z, -clip, clip)


def discounted_returns(traj: Trajectory, gamma: float) -> jax.Array:
    """``G [T, B]``: ``G_t = r_t + gamma (1 - done_t) G_{t+1}`` with ``G_T = 0``."""

    def step(g_next, inputs):
        reward, done = inputs
        g = reward + gamma * jnp.where(done, 0.0, g_next)
        return g, g

    done = traj.terminated | traj.truncated
    # The carry varies over every shard_map axis that the rewards or the episode ends vary
    # over: an environment whose reward is a constant (brax's inverted pendulum) gives
    # rewards that vary over none.
    init = vary_as(vary_as(jnp.zeros_like(traj.reward[0]), traj.reward), done)
    _, returns = jax.lax.scan(step, init, (traj.reward, done), reverse=True)
    return returns


class NormalisedState(NamedTuple):
    """The slot of a :func:`normalised` agent: the wrapped agent's own, and the statistics
    (``()`` for the ones switched off)."""

    inner: Any
    observations: RunningStatistics | tuple
    returns: RunningStatistics | tuple


class NormalisedParams(NamedTuple):
    """What a :func:`normalised` agent's ``act`` receives: the wrapped agent's acting params
    and the observation statistics they act with."""

    inner: Any
    observations: RunningStatistics | tuple


def normalised(
    agent: Agent,
    config: NormalisationFields,
    observation_spec: ObservationSpec | None,
    gamma: float = 0.99,
) -> Agent:
    """``agent`` with the observation normalisation and reward scaling ``config`` asks for
    (``agent`` itself when it asks for neither), for observations of ``observation_spec``;
    ``gamma`` discounts the return whose standard deviation scales rewards."""
    by_obs, by_return = config.normalize_observations, config.normalize_rewards
    if not (by_obs or by_return):
        return agent
    if by_obs and observation_spec is None:
        raise ValueError("normalised: normalize_observations needs the observation spec")
    if by_obs and not isinstance(observation_spec, ObservationSpec):
        from podracer.errors import ConfigError

        raise ConfigError(
            "normalize_observations=True is not allowed with dict observations (these are a "
            f"dict of {', '.join(sorted(observation_spec))}): it normalises array observations; "
            "set it to False"
        )
    obs_shape = tuple(observation_spec.shape) if by_obs else ()

    def observations(stats, obs):
        return normalise(stats, obs, config.observation_clip) if by_obs else obs

    def init_state(key, params):
        return NormalisedState(
            agent.init_state(key, params),
            init_statistics(obs_shape) if by_obs else (),
            init_statistics(()) if by_return else (),
        )

    def update_state(state: NormalisedState, params, traj: Trajectory, mean_fn):
        obs_stats = state.observations
        if by_obs:
            obs_stats = update_statistics(obs_stats, traj.obs, mean_fn, batch_dims=2)
        return_stats = state.returns
        if by_return:
            returns = discounted_returns(traj, gamma)
            return_stats = update_statistics(return_stats, returns, mean_fn, batch_dims=2)
        inner_traj = normalised_trajectory(state, traj)
        inner = agent.update_state(state.inner, params, inner_traj, mean_fn)
        return NormalisedState(inner, obs_stats, return_stats)

    def normalised_trajectory(state: NormalisedState, traj: Trajectory) -> Trajectory:
        if by_obs:
            traj = traj._replace(
                obs=observations(state.observations, traj.obs),
                bootstrap_obs=observations(state.observations, traj.bootstrap_obs),
            )
        if by_return:
            scale = jax.lax.rsqrt(state.returns.var + EPSILON)
            traj = traj._replace(
                reward=jnp.clip(traj.reward * scale, -config.reward_clip, config.reward_clip)
            )
        return traj

    def prepare(params, state: NormalisedState, traj: Trajectory, mean_fn):
        return agent.prepare(params, state.inner, normalised_trajectory(state, traj), mean_fn)

    def prepare_no_lag(params, state: NormalisedState, traj: Trajectory, mean_fn):
        inner = normalised_trajectory(state, traj)
        return agent.prepare_no_lag(params, state.inner, inner, mean_fn)

    def actor_params(params, state: NormalisedState):
        return NormalisedParams(agent.actor_params(params, state.inner), state.observations)

    def act(params: NormalisedParams, actor_state, obs, key):
        if by_obs:
            obs = observations(params.observations, obs)
        return agent.act(params.inner, actor_state, obs, key)

    return agent._replace(
        act=act,
        prepare=prepare,
        prepare_no_lag=None if agent.prepare_no_lag is None else prepare_no_lag,
        init_state=init_state,
        update_state=update_state,
        actor_params=actor_params,
    )
