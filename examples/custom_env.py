"""A JAX environment of your own, trained by its import path (or registered as ``corridor``).

    cd examples
    podracer train --agent ppo --env custom_env:Corridor            # Anakin
    podracer train --agent ppo --env custom_env:Corridor --arch sebulba  # on the host
    python custom_env.py                                            # the same from Python

``--env module:attribute`` names a class or a function that returns the environment; the
``Corridor(length, max_steps)`` keywords are its options in Python (``envs.make(id, **kwargs)``).

The walk-through is ``docs/environments.md``. The agent starts at the left end of a corridor of
``length`` cells and moves left (action 0) or right (action 1); reaching the right end ends the
episode (a termination) with reward +1, every step costs 0.01, and an episode is cut after
``max_steps`` steps (a truncation). The observation is the one-hot position, ``f32 [length]``.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
from flax import struct

from podracer import envs
from podracer.types import DiscreteActionSpec, ObservationSpec, TimeStep


@struct.dataclass
class CorridorParams:
    length: int = struct.field(pytree_node=False, default=8)  # static: it sets a shape
    max_steps: int = 50
    step_cost: float = 0.01  # a pytree leaf: vmap over params to randomise it


@struct.dataclass
class CorridorState:
    position: jax.Array  # i32 []
    t: jax.Array  # i32 []: steps taken in this episode


class Corridor:
    """The environment contract (``podracer.types.Environment``), gymnax's argument order."""

    id = "corridor"

    def __init__(self, length: int = 8, max_steps: int = 50):
        if length < 2:
            raise ValueError(f"Corridor: length={length} is not allowed: it must be >= 2")
        self._params = CorridorParams(length=length, max_steps=max_steps)

    @property
    def default_params(self) -> CorridorParams:
        return self._params

    @property
    def observation_spec(self) -> ObservationSpec:
        return ObservationSpec((self._params.length,), jnp.dtype(jnp.float32))

    @property
    def action_spec(self) -> DiscreteActionSpec:
        return DiscreteActionSpec(2)

    def _observe(self, state: CorridorState, params: CorridorParams) -> jax.Array:
        return jax.nn.one_hot(state.position, params.length, dtype=jnp.float32)

    def reset(self, key, params: CorridorParams):
        del key  # always the left end
        state = CorridorState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        obs = self._observe(state, params)
        false = jnp.zeros((), bool)
        return state, TimeStep(obs, jnp.zeros((), jnp.float32), false, false, obs)

    def step(self, key, state: CorridorState, action, params: CorridorParams):
        position = jnp.clip(state.position + 2 * action - 1, 0, params.length - 1)
        stepped = CorridorState(position.astype(jnp.int32), state.t + 1)
        terminated = stepped.position == params.length - 1
        truncated = ~terminated & (stepped.t >= params.max_steps)  # never both
        reward = jnp.where(terminated, 1.0, 0.0) - params.step_cost
        final_obs = self._observe(stepped, params)  # the obs before any reset
        fresh, fresh_ts = self.reset(key, params)
        done = terminated | truncated
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)  # auto-reset
        obs = jnp.where(done, fresh_ts.obs, final_obs)
        return state, TimeStep(obs, reward.astype(jnp.float32), terminated, truncated, final_obs)


envs.register("corridor", Corridor)  # podracer's loops, sweeps and populations now know it


def main() -> None:
    from podracer.agents import PPOConfig
    from podracer.loops.anakin import AnakinConfig, train
    from podracer.runs.logging import ConsoleProgress

    total = 100_000
    result = train(
        "corridor",
        PPOConfig(),
        AnakinConfig(num_envs=8, rollout_len=64),
        total_timesteps=total,
        progress=ConsoleProgress(total),
    )
    print(json.dumps(result.summary))  # final_return near 1 - 0.01 x 7 = 0.93


if __name__ == "__main__":
    main()
