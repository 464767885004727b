"""pgx's single-player games behind podracer's :class:`~podracer.types.Environment` contract.

Ids are ``pgx:<name>`` with ``<name>`` one of pgx's registry (:func:`names`) that has one
player: ``pgx:2048`` and the MinAtar ports ``pgx:minatar-asterix``, ``pgx:minatar-breakout``,
``pgx:minatar-freeway``, ``pgx:minatar-seaquest``, ``pgx:minatar-space_invaders`` (pgx 2.6
ships them in ``pgx.minatar``: the separate pgx-minatar package is not needed). Games of two
or more players (chess, go, othello, the poker games, sparrow mahjong, ...) are refused at
``make`` with a one-line error: podracer trains one agent, self-play is not built.

Keyword arguments of :func:`podracer.envs.make` go to the game's class: the MinAtar games'
``sticky_action_prob`` (pgx's default 0.1) and ``use_minimal_action_set`` (True); 2048 takes
none. Besides them, ``max_episode_steps`` (default None: none) is a time limit the adapter
adds, which pgx does not have.

Observations are a dict: ``{"observation": state.observation, "action_mask":
state.legal_action_mask}`` (pgx's observation as pgx gives it: bool ``[10, 10, channels]``
for MinAtar, bool ``[4, 4, 31]`` for 2048; the mask bool ``[num_actions]``, True where
legal). Actions are discrete: i32 ``[]`` in ``{0, ..., num_actions - 1}`` (MinAtar's minimal
action set by default, 2048's four moves). pgx games have no parameters (options are fixed
when the game is made): ``default_params`` is ``()``. The reward is ``state.rewards[0]``, f32.

Termination and truncation: ``terminated`` is pgx's ``state.terminated`` (a game over: the
ball lost in Breakout, no legal move left in 2048, ...; an illegal action, which pgx ends with
a reward of -1, too). pgx's own games never set ``state.truncated`` (its ``truncated`` is
still read: ``truncated = state.truncated & ~terminated``), and have no time limit: MinAtar
Freeway's 2500-step limit is a termination in pgx, as in MinAtar, and cannot be told apart
from a game over; the other MinAtar games may run forever. With ``max_episode_steps``, an
episode that reaches that many steps without a termination is ``truncated`` (counted by pgx's
``state._step_count``, which its reset sets to 0).

Auto-reset: at the step that ends an episode. ``step_key, reset_key =
jax.random.split(key)``: pgx's ``env.step(state, action, step_key)`` (MinAtar's sticky actions
and 2048's new tiles come from it) and, when the episode ended, ``env.init(reset_key)``; the
state is pgx's state (``pgx.experimental.auto_reset`` is not used).

``shard_map``: pgx's code mixes values that vary over the device axes with constants it makes
itself, which a ``shard_map`` that checks varying manual axes (JAX 0.10's default,
``check_vma=True``) refuses: every MinAtar game's ``lax.cond`` s with a branch of constants
(Breakout's ball, ...), 2048's observation (a ``fori_loop`` over a constant initial carry). The
environment says ``check_vma = False``, so Anakin (and the sweeps and populations) run their
``shard_map`` unchecked, where the games give the values of ``jit`` / ``vmap`` (tested for
Breakout); in a checked ``shard_map`` the adapter raises a one-line
:class:`~podracer.errors.ConfigValueError` that says so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.jax import base
from podracer.errors import ConfigValueError
from podracer.types import ACTION_MASK, DiscreteActionSpec

PREFIX = "pgx:"

KNOWN: tuple[str, ...] = (
    "2048",
    "minatar-asterix",
    "minatar-breakout",
    "minatar-freeway",
    "minatar-seaquest",
    "minatar-space_invaders",
)
"""The single-player games of pgx 2.6, each checked to make, reset and step (the tests step
2048 and MinAtar Breakout against pgx directly)."""


def names() -> tuple[str, ...]:
    """Every game of pgx's registry (``pgx`` must be installed); those of more than one player
    are refused by :func:`make`."""
    import pgx

    return tuple(pgx.available_envs())


def make(env_id: str, **kwargs: Any) -> PgxEnvironment:
    """``pgx:<name>`` with the game's keyword arguments and ``max_episode_steps``."""
    pgx, name = base.library_and_name(env_id, "pgx", PREFIX, names)
    max_episode_steps = kwargs.pop("max_episode_steps", None)
    game = pgx.make(name)
    if game.num_players != 1:
        raise ConfigValueError(
            f"environment {env_id!r} is a game of {game.num_players} players: podracer's pgx "
            "adapter takes single-player games (self-play is not built); "
            f"{', '.join(PREFIX + known for known in KNOWN)} have one"
        )
    if kwargs:
        try:
            game = type(game)(**kwargs)
        except TypeError as error:
            raise ConfigValueError(f"environment {env_id!r}: {error}") from None
    return PgxEnvironment(env_id, game, max_episode_steps=max_episode_steps)


class PgxEnvironment(base.Adapter):
    """A single-player pgx game, auto-resetting at the step that ends an episode, with an
    optional time limit (``max_episode_steps``)."""

    check_vma = False  # pgx's code fails a checked shard_map (the module's docstring)
    library = "pgx"
    vary_reset = True  # a fresh state's step count of 0 varies as the key does, as a step's

    def __init__(self, env_id: str, game: Any, *, max_episode_steps: int | None = None):
        if max_episode_steps is not None and int(max_episode_steps) < 1:
            raise ConfigValueError(
                f"environment {env_id!r}: max_episode_steps={max_episode_steps} must be >= 1"
            )
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        super().__init__(env_id, game)

    def _specs(self, params: Any) -> tuple[Any, DiscreteActionSpec]:
        first = jax.eval_shape(self._env.init, jax.random.key(0))
        action_spec = DiscreteActionSpec(int(first.legal_action_mask.shape[0]))
        return base.observation_spec_of(self._observe(first)), action_spec

    @staticmethod
    def _observe(state: Any) -> dict[str, Any]:
        return {"observation": state.observation, ACTION_MASK: state.legal_action_mask}

    def _reset(self, key, params):
        state = self._traced(self._env.init, key)
        return state, self._observe(state)

    def step(self, key, state, action, params):
        del params
        step_key, reset_key = jax.random.split(key)
        action = jnp.asarray(action, jnp.int32)
        stepped = self._traced(self._env.step, state, action, step_key)
        terminated = jnp.asarray(stepped.terminated, bool)
        truncated = jnp.asarray(stepped.truncated, bool)
        if self.max_episode_steps is not None:
            truncated = truncated | (stepped._step_count >= self.max_episode_steps)
        truncated = truncated & ~terminated
        fresh = self._traced(self._env.init, reset_key)
        return self._auto_reset(
            terminated | truncated,
            (fresh, self._observe(fresh)),
            (stepped, self._observe(stepped)),
            stepped.rewards[0],
            terminated,
            truncated,
        )

    def __repr__(self) -> str:
        limit = self.max_episode_steps
        limit_text = "" if limit is None else f", max_episode_steps={limit}"
        return f"PgxEnvironment({self.id!r}{limit_text})"
