"""The observation mask of a host environment (``--env-observe`` on Sebulba's envpool and
gymnasium environments; a JAX environment on the host is masked on device, by
:class:`podracer.envs.ObservationMask`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from podracer.envs.options import check_observe
from podracer.types import ObservationSpec, TimeStep


class ObservedHostEnvironment:
    """A :class:`~podracer.types.HostEnvironment` whose observations keep the entries
    ``indices`` (in that order): ``obs`` and ``final_obs`` ``[n, len(indices)]``, in sync and
    async mode; everything else is the wrapped environment's."""

    def __init__(self, env: Any, indices: Sequence[int]):
        self._env = env
        spec = env.observation_spec
        self.indices = check_observe(env.id, tuple(indices), tuple(spec.shape))
        self.observation_spec = ObservationSpec((len(self.indices),), spec.dtype)

    def __getattr__(self, name):  # id, num_envs, batch_size, is_async, action_spec, send, ...
        return getattr(self._env, name)

    def _mask(self, ts: TimeStep) -> TimeStep:
        obs = np.take(ts.obs, self.indices, axis=-1)
        final_obs = obs if ts.final_obs is ts.obs else np.take(ts.final_obs, self.indices, axis=-1)
        return ts._replace(obs=obs, final_obs=final_obs)

    def reset(self) -> TimeStep:
        return self._mask(self._env.reset())

    def step(self, actions) -> TimeStep:
        return self._mask(self._env.step(actions))

    def recv(self) -> tuple[TimeStep, np.ndarray]:
        ts, env_ids = self._env.recv()
        return self._mask(ts), env_ids

    def __repr__(self) -> str:
        return f"ObservedHostEnvironment({self._env!r}, {self.indices.tolist()})"
