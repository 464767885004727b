"""Catch, the environment of the Podracer paper's Anakin demo (Hessel et al., 2021).

A ball starts on the top row of a ``rows x columns`` board (10 x 5) in a random column and falls
one row per step; a paddle on the bottom row, starting in the middle column, moves left (action 0),
stays (1) or moves right (2), clipped at the walls. The paddle moves first, then the ball falls.
When the ball reaches the bottom row the episode terminates with reward +1 if the paddle is under
it and -1 otherwise, so every episode lasts ``rows - 1`` steps. The observation is the board,
``f32 [rows, columns]``, with 1 where the ball and the paddle are.

Paper: https://arxiv.org/abs/2104.06272 (section 3, and its Colab demo).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from podracer.types import DiscreteActionSpec, ObservationSpec, TimeStep


@struct.dataclass
class CatchParams:
    rows: int = struct.field(pytree_node=False, default=10)
    columns: int = struct.field(pytree_node=False, default=5)


@struct.dataclass
class CatchState:
    ball_row: jax.Array  # i32 []
    ball_column: jax.Array  # i32 []
    paddle_column: jax.Array  # i32 []


class Catch:
    """The Catch environment (see the module docstring)."""

    auto_reset = True
    """Whether ``step`` resets an episode that ends (as
    :attr:`podracer.envs.jax.base.Adapter.auto_reset`)."""

    id = "catch"

    def __init__(self, rows: int = 10, columns: int = 5):
        if rows < 2:
            raise ValueError(f"Catch: rows={rows} is too small; it must be >= 2")
        if columns < 1:
            raise ValueError(f"Catch: columns={columns} must be >= 1")
        self._params = CatchParams(rows=rows, columns=columns)

    @property
    def default_params(self) -> CatchParams:
        return self._params

    def with_params(self, params: CatchParams) -> Catch:
        """Catch with ``params`` as its ``default_params`` (``--env-param rows=12``): the board's
        size, and so the observation spec, is theirs."""
        return Catch(rows=params.rows, columns=params.columns)

    @property
    def observation_spec(self) -> ObservationSpec:
        return ObservationSpec((self._params.rows, self._params.columns), jnp.dtype(jnp.float32))

    @property
    def action_spec(self) -> DiscreteActionSpec:
        return DiscreteActionSpec(3)

    @staticmethod
    def _initial_state(key, params: CatchParams) -> CatchState:
        return CatchState(
            ball_row=jnp.zeros((), jnp.int32),
            ball_column=jax.random.randint(key, (), 0, params.columns, dtype=jnp.int32),
            paddle_column=jnp.asarray(params.columns // 2, jnp.int32),
        )

    @staticmethod
    def _observe(state: CatchState, params: CatchParams) -> jax.Array:
        board = jnp.zeros((params.rows, params.columns), jnp.float32)
        board = board.at[state.ball_row, state.ball_column].set(1.0)
        return board.at[params.rows - 1, state.paddle_column].set(1.0)

    def reset(self, key, params: CatchParams):
        state = self._initial_state(key, params)
        obs = self._observe(state, params)
        return state, TimeStep.first(obs)

    def step(self, key, state: CatchState, action, params: CatchParams):
        paddle = jnp.clip(state.paddle_column + action - 1, 0, params.columns - 1)
        stepped = CatchState(state.ball_row + 1, state.ball_column, paddle.astype(jnp.int32))
        terminated = stepped.ball_row == params.rows - 1
        caught = stepped.paddle_column == stepped.ball_column
        reward = jnp.where(terminated, jnp.where(caught, 1.0, -1.0), 0.0).astype(jnp.float32)
        final_obs = self._observe(stepped, params)
        truncated = jnp.zeros_like(terminated)  # derived from the state, so it shards like it
        if not self.auto_reset:
            return stepped, TimeStep(final_obs, reward, terminated, truncated, final_obs)
        fresh = self._initial_state(key, params)
        state = jax.tree.map(lambda a, b: jnp.where(terminated, a, b), fresh, stepped)
        obs = jnp.where(terminated, self._observe(fresh, params), final_obs)
        return state, TimeStep(obs, reward, terminated, truncated, final_obs)

    def __repr__(self) -> str:
        return f"Catch(rows={self._params.rows}, columns={self._params.columns})"


def make(env_id: str, **kwargs) -> Catch:
    """The ``catch`` id's environment: ``Catch(**kwargs)`` (``rows``, ``columns``)."""
    del env_id
    return Catch(**kwargs)
