"""gymnax environments behind podracer's :class:`~podracer.types.Environment` contract.

gymnax >= 1.0 returns ``(obs, state, reward, terminated, truncated, info)`` from ``step`` and keeps
the pre-reset observation in ``info["final_observation"]``. The adapter turns that into a
:class:`~podracer.types.TimeStep` and makes ``terminated`` and ``truncated`` exclusive: an episode
that reaches a terminal state on the time limit's last step is *terminated* (its value is zero,
there is nothing to bootstrap).

Discrete-action environments (:data:`DISCRETE_IDS`) take i32 actions ``[]``
(``DiscreteActionSpec``); continuous ones (:data:`CONTINUOUS_IDS`, gymnax's ``Box`` action
spaces) take f32 actions of ``action_spec.shape`` (``BoundedActionSpec``, with ``low`` / ``high``
NumPy f32 arrays of that shape). Continuous actions go to gymnax as they are: Pendulum and
MountainCarContinuous clip them to their bounds, the ``-misc`` tasks do not.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.envs.jax.base import Adapter, check_name
from podracer.errors import ConfigValueError
from podracer.types import BoundedActionSpec, DiscreteActionSpec, ObservationSpec, TimeStep

PREFIX = "gymnax:"

# Every discrete-action environment of gymnax's registry. MNISTBandit-bsuite is left out: it
# downloads the MNIST data set when it is built, which a run on a cluster node cannot rely on.
DISCRETE_IDS: tuple[str, ...] = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
    "SimpleBandit-bsuite",
    "FourRooms-misc",
    "MetaMaze-misc",
    "BernoulliBandit-misc",
    "GaussianBandit-misc",
    "Pong-misc",
    "FrozenLake-misc",
)

# Every continuous-action (Box) environment of gymnax's registry.
CONTINUOUS_IDS: tuple[str, ...] = (
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "PointRobot-misc",
    "Reacher-misc",
    "Swimmer-misc",
)


def make(env_id: str, **kwargs: Any) -> GymnaxEnvironment:
    """``gymnax:<name>`` with gymnax's keyword arguments for ``gymnax.make``; a name not in
    :data:`DISCRETE_IDS` or :data:`CONTINUOUS_IDS` is an error with the closest one."""
    name = env_id.removeprefix(PREFIX)
    check_name(env_id, name, (*DISCRETE_IDS, *CONTINUOUS_IDS), PREFIX)
    return GymnaxEnvironment(name, **kwargs)


class GymnaxEnvironment(Adapter):
    """A gymnax environment (discrete or continuous actions), auto-resetting, with ``final_obs``
    kept."""

    library = "gymnax"

    def __init__(self, name: str, **env_kwargs: Any):
        import gymnax

        if name not in DISCRETE_IDS and name not in CONTINUOUS_IDS:
            raise ConfigValueError(
                f"gymnax environment {name!r} is not supported: podracer's gymnax adapter takes "
                f"{', '.join((*DISCRETE_IDS, *CONTINUOUS_IDS))}"
            )
        super().__init__(f"{PREFIX}{name}", *gymnax.make(name, **env_kwargs))

    def _specs(self, params: Any) -> tuple[ObservationSpec, DiscreteActionSpec | BoundedActionSpec]:
        """The specs with ``params`` (gymnax's spaces take the params: Pendulum's action bounds
        are ``params.max_torque``)."""
        from gymnax.environments import spaces

        action_space = self._env.action_space(params)
        action_spec: DiscreteActionSpec | BoundedActionSpec
        if isinstance(action_space, spaces.Discrete):
            action_spec = DiscreteActionSpec(int(action_space.n))
        else:
            assert isinstance(action_space, spaces.Box), action_space
            shape = tuple(int(d) for d in action_space.shape)
            low, high = (
                np.broadcast_to(np.asarray(bound, np.float32), shape).copy()
                for bound in (action_space.low, action_space.high)
            )
            action_spec = BoundedActionSpec(shape, low, high, "float32")
        obs_space = self._env.observation_space(params)
        obs_spec = ObservationSpec(tuple(obs_space.shape), jnp.dtype(obs_space.dtype))
        return obs_spec, action_spec

    def _reset(self, key, params):
        obs, state = self._env.reset(key, params)
        return state, obs

    def _step_no_reset(self, key, state, action, params):
        """gymnax's step without its reset (``step_env``): the ended episode's state kept."""
        key, _ = jax.random.split(key)  # the key gymnax's step gives step_env
        obs, state, reward, terminated, _ = self._env.step_env(key, state, action, params)
        truncated = jnp.asarray(self._env.is_truncated(state, params), bool)
        terminated = jnp.asarray(terminated, bool)
        reward = jnp.asarray(reward, jnp.float32)
        return state, TimeStep(obs, reward, terminated, truncated & ~terminated, obs)

    def step(self, key, state, action, params):
        if isinstance(self._action_spec, BoundedActionSpec):
            action = jnp.asarray(action, jnp.float32)
        if not self.auto_reset:
            return self._step_no_reset(key, state, action, params)
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        terminated = jnp.asarray(terminated, bool)
        truncated = jnp.asarray(truncated, bool) & ~terminated
        return state, TimeStep(
            obs=obs,
            reward=jnp.asarray(reward, jnp.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=info["final_observation"],
        )
