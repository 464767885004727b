"""Pure environment wrappers."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import struct

from podracer.types import EpisodeInfo


@struct.dataclass
class EpisodeStatisticsState:
    env_state: Any
    episode_return: Any  # f32 []: return of the running episode so far
    episode_length: Any  # i32 []: steps of the running episode so far


class EpisodeStatistics:
    """Tracks the return and length of each episode on device.

    Every ``TimeStep`` it returns carries ``info = EpisodeInfo(done, episode_return,
    episode_length)``: where ``done`` an episode has just ended (terminated or truncated) and the
    two numbers are its undiscounted return and its length; elsewhere they are 0.
    """

    def __init__(self, env):
        self._env = env
        self.id = env.id

    def __getattr__(self, name):  # default_params, observation_spec, action_spec, ...
        if name == "step_batch":  # where the wrapped environment has one, through this wrapper
            getattr(self._env, name)
            return self._step_batch
        return getattr(self._env, name)

    def reset(self, key, params):
        env_state, ts = self._env.reset(key, params)
        zero = jnp.zeros((), jnp.float32)
        info = EpisodeInfo(jnp.zeros((), bool), zero, jnp.zeros((), jnp.int32))
        state = EpisodeStatisticsState(env_state, zero, jnp.zeros((), jnp.int32))
        return state, ts._replace(info=info)

    def step(self, key, state: EpisodeStatisticsState, action, params):
        env_state, ts = self._env.step(key, state.env_state, action, params)
        return self._record(state, env_state, ts)

    def _step_batch(self, keys, state: EpisodeStatisticsState, actions, params):
        env_state, ts = self._env.step_batch(keys, state.env_state, actions, params)
        return self._record(state, env_state, ts)  # elementwise: a batch as one environment

    @staticmethod
    def _record(state: EpisodeStatisticsState, env_state, ts):
        ret = state.episode_return + ts.reward
        length = state.episode_length + 1
        done = ts.terminated | ts.truncated
        info = EpisodeInfo(done, jnp.where(done, ret, 0.0), jnp.where(done, length, 0))
        state = EpisodeStatisticsState(
            env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length).astype(jnp.int32)
        )
        return state, ts._replace(info=info)

    def __repr__(self) -> str:
        return f"EpisodeStatistics({self._env!r})"


class WithParams:
    """An environment whose ``default_params`` are ``params`` (the fields ``--env-param`` set);
    everything else is the wrapped environment's, its specs included."""

    def __init__(self, env, params: Any):
        self._env = env
        self.id = env.id
        self._params = params

    @property
    def default_params(self) -> Any:
        return self._params

    def __getattr__(self, name):  # observation_spec, action_spec, reset, step, ...
        return getattr(self._env, name)

    def __repr__(self) -> str:
        return f"WithParams({self._env!r}, {self._params!r})"


class ObservationMask:
    """Keeps the entries ``indices`` of a vector observation, in that order (``--env-observe``):
    ``obs`` and ``final_obs`` become ``[len(indices)]``, and so does the observation spec."""

    def __init__(self, env, indices, env_id: str | None = None):
        from podracer.envs.options import check_observe
        from podracer.types import ObservationSpec

        self._env = env
        self.id = env.id
        spec = env.observation_spec
        if not isinstance(spec, ObservationSpec):
            from podracer.errors import ConfigValueError

            raise ConfigValueError(
                f"--env-observe is not allowed with {env_id or env.id}, whose observations are a "
                f"dict of {', '.join(sorted(spec))}: it keeps entries of a vector observation"
            )
        self.indices = check_observe(env_id or env.id, tuple(indices), tuple(spec.shape))
        self._spec = ObservationSpec((len(self.indices),), spec.dtype)

    @property
    def observation_spec(self):
        return self._spec

    def __getattr__(self, name):  # default_params, action_spec, ...
        if name == "step_batch":  # where the wrapped environment has one, through this wrapper
            getattr(self._env, name)
            return self._step_batch
        return getattr(self._env, name)

    def _step_batch(self, keys, state, actions, params):
        state, ts = self._env.step_batch(keys, state, actions, params)
        return state, self._mask(ts)  # the last axis: a batch as one environment

    def _mask(self, ts):
        return ts._replace(obs=ts.obs[..., self.indices], final_obs=ts.final_obs[..., self.indices])

    def reset(self, key, params):
        state, ts = self._env.reset(key, params)
        return state, self._mask(ts)

    def step(self, key, state, action, params):
        state, ts = self._env.step(key, state, action, params)
        return state, self._mask(ts)

    def __repr__(self) -> str:
        return f"ObservationMask({self._env!r}, {self.indices.tolist()})"
