"""Jumanji's environments behind podracer's :class:`~podracer.types.Environment` contract.

Ids are ``jumanji:<name>`` with ``<name>`` one of Jumanji's registry (:func:`names`:
``jumanji:Snake-v1``, ``jumanji:Game2048-v1``, ``jumanji:Maze-v0``, ``jumanji:PacMan-v1``, ...).
Keyword arguments of :func:`podracer.envs.make` go to ``jumanji.make``: the environment's own
options (``time_limit``, ``num_rows`` / ``num_cols`` for Snake, ``generator`` for Maze, ...).

Only environments that take ONE discrete action are adapted: those whose action spec is a
``DiscreteArray`` (Snake, Game2048, Maze, PacMan, SlidingTilePuzzle, TSP, CVRP, Knapsack,
GraphColoring). The others are refused at ``make`` with a one-line error: a
``MultiDiscreteArray`` (RubiksCube, Tetris, Minesweeper, BinPack, JobShop, the multi-agent
ones, ...), a continuous ``BoundedArray`` (MultiCVRP, SearchAndRescue), a non-scalar reward,
or an ``action_mask`` of another shape than ``[num_actions]``. Actions are i32 ``[]`` in
``{0, ..., num_values - 1}``.

Observations: Jumanji's observation named tuple becomes a ``dict`` of its fields (nested named
tuples, e.g. Maze's ``Position``, become nested dicts), every leaf as Jumanji gives it, so the
observation keeps Jumanji's ``action_mask`` (bool ``[num_actions]``, True where legal) under
:data:`podracer.types.ACTION_MASK`; an environment whose observation is one array gives that
array. ``observation_spec`` is read from the environment's reset. Jumanji environments have no
parameters (everything is fixed when the environment is made): ``default_params`` is ``()``.

Termination and truncation are Jumanji's own: a ``StepType.LAST`` timestep with discount 0
(``jumanji.types.termination``) is ``terminated``, with a non-zero discount
(``jumanji.types.truncation``, discount 1) ``truncated``; the two are never both true. Note
that every single-discrete-action environment of Jumanji 1.1 ends its time limit with
``termination`` (discount 0): Snake's and PacMan's ``time_limit``, Maze's
(``num_rows * num_cols`` by default) and SlidingTilePuzzle's all come out as *terminated*, and
cannot be told apart from a real terminal state (only Connector and LevelBasedForaging, both
multi-discrete, use ``truncation``). An environment wrapped to end its time limit with
``truncation`` gives ``truncated``. The reward is Jumanji's, as f32.

Auto-reset: Jumanji's step takes no key (its randomness comes from the key in its state) and
does not reset. The adapter resets at the step that ends an episode: ``step_key, reset_key =
jax.random.split(key)``, and when the step's timestep is ``LAST`` the state and observation are
those of ``jumanji_env.reset(reset_key)`` (``jumanji.wrappers.AutoResetWrapper``, which resets
from the key in the state, is not used). The state is Jumanji's state.

``shard_map``: Game2048's, Maze's, SlidingTilePuzzle's and PacMan's code mixes values that
vary over the device axes with constants it makes itself, which a ``shard_map`` that checks
varying manual axes (JAX 0.10's default, ``check_vma=True``) refuses: their resets loop over a
constant initial carry (Maze's and SlidingTilePuzzle's generators, Game2048's action mask), and
PacMan's step clamps with constant bounds. (Snake, TSP, CVRP, Knapsack and GraphColoring trace
there.) The environment says ``check_vma = False``, so Anakin (and the sweeps and populations)
run their ``shard_map`` unchecked, where every one of them gives the values of ``jit`` /
``vmap`` (tested for Snake); in a checked ``shard_map`` the adapter raises a one-line
:class:`~podracer.errors.ConfigValueError` that says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.jax import base
from podracer.errors import ConfigValueError
from podracer.types import ACTION_MASK, DiscreteActionSpec, ObservationSpec

PREFIX = "jumanji:"

KNOWN: tuple[str, ...] = (
    "Snake-v1",
    "Game2048-v1",
    "Maze-v0",
    "PacMan-v1",
    "SlidingTilePuzzle-v0",
    "TSP-v1",
    "CVRP-v1",
    "Knapsack-v1",
    "GraphColoring-v1",
)
"""The single-discrete-action environments of Jumanji 1.1.2's registry, each checked to make,
reset and step (the tests step Snake against Jumanji directly). Sokoban-v0 is one too, but it
downloads its levels when it is made."""

_LAST = 2  # jumanji.types.StepType.LAST


def names() -> tuple[str, ...]:
    """Every environment name of Jumanji's registry (``jumanji`` must be installed); those with
    other than one discrete action are refused by :func:`make`."""
    import jumanji

    return tuple(sorted(jumanji.registered_environments()))


def make(env_id: str, **kwargs: Any) -> JumanjiEnvironment:
    """``jumanji:<name>`` with Jumanji's keyword arguments (``time_limit``, ...)."""
    jumanji, name = base.library_and_name(env_id, "jumanji", PREFIX, names)
    return JumanjiEnvironment(env_id, jumanji.make(name, **kwargs))


def to_dict(obs: Any) -> Any:
    """A Jumanji observation as a dict of arrays: named tuples and dataclasses become dicts of
    their fields (recursively), arrays stay arrays."""
    if isinstance(obs, tuple) and hasattr(obs, "_asdict"):
        return {name: to_dict(leaf) for name, leaf in obs._asdict().items()}
    if dataclasses.is_dataclass(obs) and not isinstance(obs, type):
        return {f.name: to_dict(getattr(obs, f.name)) for f in dataclasses.fields(obs)}
    if isinstance(obs, dict):
        return {str(name): to_dict(leaf) for name, leaf in obs.items()}
    return obs


class JumanjiEnvironment(base.Adapter):
    """A Jumanji environment with one discrete action, auto-resetting at the step that ends an
    episode (``jumanji_env`` may be a ``jumanji.wrappers.Wrapper``)."""

    check_vma = False  # some of Jumanji's code fails a checked shard_map (the module's docstring)
    library = "Jumanji"
    vary_reset = True  # a fresh state's step count of 0 varies as the key does, as a step's

    def _specs(self, params: Any) -> tuple[Any, DiscreteActionSpec]:
        from jumanji import specs

        env_id, jumanji_env = self.id, self._env
        action_spec = jumanji_env.action_spec
        if not isinstance(action_spec, specs.DiscreteArray):
            raise ConfigValueError(
                f"environment {env_id!r} takes {type(action_spec).__name__} actions of shape "
                f"{tuple(action_spec.shape)}: podracer's discrete agents take one discrete "
                "action (a Jumanji DiscreteArray action spec)"
            )
        self._action_dtype = jnp.dtype(action_spec.dtype)
        num_actions = int(action_spec.num_values)
        reward_shape = tuple(jumanji_env.reward_spec.shape)
        if reward_shape != ():
            raise ConfigValueError(
                f"environment {env_id!r} gives rewards of shape {reward_shape}: podracer's "
                "agents take one scalar reward a step (a single-agent environment)"
            )
        _, first = jax.eval_shape(jumanji_env.reset, jax.random.key(0))
        obs_spec = base.observation_spec_of(to_dict(first.observation))
        mask = obs_spec.get(ACTION_MASK) if isinstance(obs_spec, dict) else None
        expected = ObservationSpec((num_actions,), jnp.dtype(bool))
        if mask is not None and mask != expected:
            raise ConfigValueError(
                f"environment {env_id!r} has an action_mask of shape {mask.shape} "
                f"({mask.dtype}), not [{num_actions}] bool: podracer's "
                "discrete agents take one discrete action"
            )
        return obs_spec, DiscreteActionSpec(num_actions)

    def _reset(self, key, params):
        state, timestep = self._traced(self._env.reset, key)
        return state, to_dict(timestep.observation)

    def step(self, key, state, action, params):
        del params
        _, reset_key = jax.random.split(key)  # the step key: Jumanji's step takes none
        action = jnp.asarray(action, self._action_dtype)
        stepped, timestep = self._traced(self._env.step, state, action)
        last = timestep.step_type == _LAST
        terminated = last & (timestep.discount == 0)
        truncated = last & ~terminated
        fresh, first = self._traced(self._env.reset, reset_key)
        return self._auto_reset(
            last,
            (fresh, to_dict(first.observation)),
            (stepped, to_dict(timestep.observation)),
            timestep.reward,
            terminated,
            truncated,
        )
