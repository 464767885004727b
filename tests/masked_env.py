"""A small environment with dict observations and a legal-action mask, for the tests.

Each step a new set of legal actions is drawn (at least one of ``num_actions``, each legal with
probability 1/2); a legal action earns +1, an illegal one -10 and ends the episode (a
termination). An episode is cut after ``length`` steps (a truncation). So a policy that takes
only legal actions has a return of exactly ``length`` in every episode. The observation is
``{"position": f32 [2], "board": f32 [3, 3], "action_mask": bool [num_actions]}``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from podracer.types import DiscreteActionSpec, ObservationSpec, TimeStep


@struct.dataclass
class State:
    t: jax.Array  # i32 []
    obs: dict


class MaskedChoice:
    id = "masked_choice"

    def __init__(self, num_actions: int = 5, length: int = 6):
        self.num_actions, self.length = num_actions, length

    default_params = ()

    @property
    def observation_spec(self):
        return {
            "action_mask": ObservationSpec((self.num_actions,), jnp.dtype(bool)),
            "board": ObservationSpec((3, 3), jnp.dtype(jnp.float32)),
            "position": ObservationSpec((2,), jnp.dtype(jnp.float32)),
        }

    @property
    def action_spec(self):
        return DiscreteActionSpec(self.num_actions)

    def _observe(self, key):
        mask_key, forced_key, board_key, position_key = jax.random.split(key, 4)
        mask = jax.random.bernoulli(mask_key, 0.5, (self.num_actions,))
        mask = mask | jax.nn.one_hot(
            jax.random.randint(forced_key, (), 0, self.num_actions), self.num_actions, dtype=bool
        )
        return {
            "action_mask": mask,
            "board": jax.random.normal(board_key, (3, 3)),
            "position": jax.random.normal(position_key, (2,)),
        }

    def reset(self, key, params):
        obs = self._observe(key)
        false = jnp.zeros((), bool)
        return State(jnp.zeros((), jnp.int32), obs), TimeStep(
            obs, jnp.zeros((), jnp.float32), false, false, obs
        )

    def step(self, key, state, action, params):
        obs_key, reset_key = jax.random.split(key)
        legal = state.obs["action_mask"][action]
        t = state.t + 1
        terminated = ~legal
        truncated = (t >= self.length) & ~terminated
        done = terminated | truncated
        next_obs = self._observe(obs_key)
        first = self._observe(reset_key)
        obs = jax.tree.map(lambda a, b: jnp.where(done, a, b), first, next_obs)
        reward = jnp.where(legal, 1.0, -10.0).astype(jnp.float32)
        state = State(jnp.where(done, 0, t).astype(jnp.int32), obs)
        return state, TimeStep(obs, reward, terminated, truncated, next_obs)
