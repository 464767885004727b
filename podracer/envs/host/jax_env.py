"""Any on-device :class:`~podracer.types.Environment` stepped from the host, as a host
environment (NumPy in, NumPy out, sync mode).

It lets Sebulba run the JAX environments (``catch``, ``gymnax:...``) — for tests that compare
Sebulba with Anakin on the same dynamics, and for trying Sebulba without envpool. The environment
runs jitted on a CPU device; the episode statistics come from
:class:`~podracer.envs.EpisodeStatistics`. Actions are checked by the environment's action spec:
ints ``[num_envs]`` for a ``DiscreteActionSpec``; for a ``BoundedActionSpec`` finite floats
``[num_envs, *shape]``, clipped to ``[low, high]``
(:func:`podracer.envs.host.checks.continuous_actions`).
"""

from __future__ import annotations

import jax
import numpy as np

from podracer.envs.host.checks import continuous_actions, discrete_actions
from podracer.envs.wrappers import EpisodeStatistics
from podracer.types import DiscreteActionSpec, TimeStep, step_batch


class JaxHostEnvironment:
    """``num_envs`` copies of a JAX environment, stepped in one jitted call from the host."""

    def __init__(self, env, num_envs: int, seed: int = 0, evaluation: bool = False):
        if num_envs < 1:
            raise ValueError(f"JaxHostEnvironment: num_envs={num_envs} must be >= 1")
        self._env = EpisodeStatistics(env)
        self.id = env.id
        self.num_envs = num_envs
        self.batch_size = num_envs
        self.is_async = False
        self.observation_spec = env.observation_spec
        self.action_spec = env.action_spec
        if evaluation:  # the params evaluations play with (a trading env's held-out days)
            from podracer.core.evaluation import evaluation_params

            self._params = evaluation_params(env)
        else:
            self._params = env.default_params
        self._device = jax.devices("cpu")[0]
        self._key = jax.device_put(jax.random.key(seed), self._device)
        self._state = None

        def reset(key):
            return jax.vmap(self._env.reset, in_axes=(0, None))(
                jax.random.split(key, num_envs), self._params
            )

        def step(key, state, actions):
            keys = jax.random.split(key, num_envs)
            return step_batch(self._env)(keys, state, actions, self._params)

        self._reset = jax.jit(reset)
        self._step = jax.jit(step)

    def _next_key(self):
        self._key, key = jax.random.split(self._key)
        return key

    def reset(self) -> TimeStep:
        self._state, ts = self._reset(self._next_key())
        return jax.device_get(ts)

    def step(self, actions) -> TimeStep:
        spec = self.action_spec
        if isinstance(spec, DiscreteActionSpec):
            actions = discrete_actions(self.id, actions, self.num_envs, spec.num_actions)
            actions = actions.astype(np.int32)
        else:  # a BoundedActionSpec: finite floats, clipped to the bounds
            actions = continuous_actions(self.id, actions, self.num_envs, spec)
        actions = jax.device_put(actions, self._device)
        self._state, ts = self._step(self._next_key(), self._state, actions)
        return jax.device_get(ts)

    def close(self) -> None:
        self._state = None
