"""POPGym Arcade's environments behind podracer's :class:`~podracer.types.Environment` contract.

Ids are ``popgym_arcade:<name>`` with ``<name>`` one of POPGym Arcade's registry
(:func:`names`: ``popgym_arcade:CountRecallEasy``, ``popgym_arcade:MineSweeperEasy``,
``popgym_arcade:NavigatorHard``, ``popgym_arcade:BreakoutMedium``, ...; CartPole, NoisyCartPole,
CountRecall, BattleShip, AutoEncode, Navigator, MineSweeper, Skittles, Breakout and Tetris, each
Easy, Medium and Hard). Keyword arguments of :func:`podracer.envs.make` go to the environment's
class: ``obs_size`` (the image's side: 128, POPGym Arcade's default, or 256; it draws no
smaller one), ``partial_obs`` (False: the fully observable version; True: the partially
observable one, which hides the history), and where the class takes them its own options
(``max_steps_in_episode`` of Breakout and Tetris, ...).

Install: POPGym Arcade requires stable-gymnax, which installs a package named gymnax over
gymnax 1.0 (another step API); it is installed without its dependencies:
``pip install --no-deps -r requirements/popgym-arcade.txt``. Its environments subclass gymnax
1.0's ``Environment``, whose generic ``step`` does not fit them (it adds gymnax 1.0's
``is_truncated``, which reads ``state.time`` and ``params.max_steps_in_episode``: all but
Breakout and Tetris lack one or the other, and each reports its own time limit in the info of
``step_env``): the adapter drives their own ``step_env(key, state, action, params)`` and
``reset_env(key, params)``. CartPole,
NoisyCartPole, Skittles, Breakout and Tetris put ``self.discount(state, params)`` in their info,
which in gymnax 1.0 calls ``is_terminated``, a method they do not define (stable-gymnax's
``discount`` calls ``is_terminal``, which they do): the adapter sets their instance's
``is_terminated`` to their ``is_terminal``, which gives that info the value it has with
stable-gymnax (the adapter does not use it).

Observations are uint8 images ``[obs_size, obs_size, 3]``, as POPGym Arcade draws them.
Actions are discrete: i32 ``[]`` in ``{0, ..., n - 1}`` (5 for most games: up, down, left,
right, fire; 4 for AutoEncode); every action is always legal (no mask). ``default_params`` are
the environment's ``default_params`` (an empty ``EnvParams`` for most games; Breakout's and
Tetris' hold their ``max_steps_in_episode``); :meth:`PopGymArcadeEnvironment.with_params` sets
them.

Termination and truncation come from the info of ``step_env``: ``info["terminated"]`` is
``terminated`` (the game ended: all cards played, a mine or a barrier hit, the ships sunk, the
pole fallen, the ball lost, ...) and ``info["truncated"]`` (the game's time limit:
``max_steps_in_episode`` or ``max_episode_length`` steps) is ``truncated`` where the episode did
not terminate. Two exceptions, read from the source: Breakout and Tetris set their
``info["terminated"]`` to ``is_terminal``, which includes their time limit, so there an episode
that reaches its time limit is ``truncated``, not ``terminated`` (and a game over at the limit's
very step is read as a truncation: the two cannot be told apart). A step whose ``done`` is True
without either flag would be a termination (none does). The reward is ``step_env``'s, as f32.

Auto-reset: at the step that ends an episode, ``step_key, reset_key = jax.random.split(key)``:
``step_env(step_key, ...)`` and, when the episode ended, ``reset_env(reset_key, params)``; the
state is the environment's state.

``shard_map``: all but CountRecall mix, in their code, values that vary over the device axes
with constants of their own, which a ``shard_map`` that checks varying manual axes (JAX 0.10's
default, ``check_vma=True``) refuses (a ``lax.cond`` with a branch of constants in CartPole,
NoisyCartPole, AutoEncode, Skittles and Tetris, a ``while_loop`` over a constant initial carry
in Breakout, an arithmetic operation on a constant in BattleShip and Navigator); MineSweeper's
jitted ``render`` under ``vmap`` fails there in JAX itself ("pvary is a invariant->variant
collective"). The environment says ``check_vma = False``, so Anakin (and the sweeps and
populations) run their ``shard_map`` unchecked, where all 30 trace and give the values of
``jit`` / ``vmap`` (tested for CountRecall); in a checked ``shard_map`` the adapter raises a
one-line :class:`~podracer.errors.ConfigValueError` that says so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.jax import base
from podracer.errors import ConfigValueError
from podracer.types import DiscreteActionSpec, ObservationSpec

PREFIX = "popgym_arcade:"

INSTALL = "pip install --no-deps -r requirements/popgym-arcade.txt"
"""How POPGym Arcade is installed beside gymnax 1.0 (pyproject.toml's comment)."""

KNOWN: tuple[str, ...] = (
    "CountRecallEasy",
    "MineSweeperEasy",
    "NavigatorEasy",
    "BattleShipEasy",
    "AutoEncodeEasy",
    "CartPoleEasy",
    "NoisyCartPoleEasy",
    "SkittlesEasy",
    "BreakoutEasy",
    "TetrisEasy",
)
"""One game of each kind (every name of :func:`names` is accepted; all 30 were checked to make
and to trace reset and step under ``jit(vmap)``). The tests step CountRecallEasy against POPGym
Arcade directly."""

TIME_LIMIT_IN_TERMINATED = ("Breakout", "Tetris")
"""The games whose ``info["terminated"]`` includes their time limit."""

OBS_SIZES = (128, 256)
"""The image sides POPGym Arcade draws."""


def _require(env_id: str) -> Any:
    """``import popgym_arcade``, or the one-line error that says how it is installed."""
    try:
        return base.require("popgym_arcade", env_id)
    except ConfigValueError as error:
        raise ConfigValueError(
            f"environment id {env_id!r} needs the popgym_arcade library, which is not "
            f"installed ({error.__context__}): {INSTALL} (POPGym Arcade without its dependency "
            "stable-gymnax, which would replace gymnax 1.0)"
        ) from None


def names() -> tuple[str, ...]:
    """Every environment name of POPGym Arcade's registry (``popgym_arcade`` must be
    installed)."""
    from popgym_arcade.registration import REGISTERED_ENVIRONMENTS

    return tuple(REGISTERED_ENVIRONMENTS)


def make(env_id: str, **kwargs: Any) -> PopGymArcadeEnvironment:
    """``popgym_arcade:<name>`` with the class's keyword arguments (``obs_size``,
    ``partial_obs``, ...)."""
    popgym_arcade = _require(env_id)
    name = env_id.removeprefix(PREFIX)
    base.check_name(env_id, name, names(), PREFIX)
    obs_size = kwargs.get("obs_size", OBS_SIZES[0])
    if obs_size not in OBS_SIZES:
        raise ConfigValueError(
            f"environment {env_id!r}: obs_size={obs_size!r}; POPGym Arcade draws images of "
            f"side {' or '.join(map(str, OBS_SIZES))}"
        )
    try:
        game, params = popgym_arcade.make(name, **kwargs)
    except TypeError as error:
        raise ConfigValueError(f"environment {env_id!r}: {error}") from None
    return PopGymArcadeEnvironment(env_id, game, params)


class PopGymArcadeEnvironment(base.Adapter):
    """A POPGym Arcade environment driven through its ``step_env`` / ``reset_env``,
    auto-resetting at the step that ends an episode."""

    check_vma = False  # POPGym Arcade's code fails a checked shard_map (the module's docstring)
    library = "POPGym Arcade"
    vary_reset = True  # a fresh state's step count of 0 varies as the key does, as a step's

    def __init__(self, env_id: str, game: Any, params: Any):
        from gymnax.environments.environment import Environment

        cls = type(game)
        if cls.is_terminal is not Environment.is_terminal and (
            cls.is_terminated is Environment.is_terminated
        ):  # gymnax 1.0's discount calls is_terminated; stable-gymnax's calls is_terminal
            game.is_terminated = game.is_terminal
        self._time_limit_in_terminated = cls.__name__.startswith(TIME_LIMIT_IN_TERMINATED)
        super().__init__(env_id, game, params)

    def _specs(self, params: Any) -> tuple[ObservationSpec, DiscreteActionSpec]:
        from gymnax.environments import spaces

        action_space = self._env.action_space(params)
        if not isinstance(action_space, spaces.Discrete):
            raise ConfigValueError(
                f"environment {self.id!r} has a {type(action_space).__name__} action space: "
                "podracer's adapter takes POPGym Arcade's discrete ones"
            )
        obs, _ = jax.eval_shape(self._env.reset_env, jax.random.key(0), params)
        obs_spec = ObservationSpec(tuple(obs.shape), jnp.dtype(obs.dtype))
        return obs_spec, DiscreteActionSpec(int(action_space.n))

    def _reset(self, key, params):
        obs, state = self._traced(self._env.reset_env, key, params)
        return state, obs

    def step(self, key, state, action, params):
        step_key, reset_key = jax.random.split(key)
        action = jnp.asarray(action, jnp.int32)
        obs, stepped, reward, done, info = self._traced(
            self._env.step_env, step_key, state, action, params
        )
        truncated = jnp.asarray(info["truncated"], bool)
        terminated = jnp.asarray(info["terminated"], bool)
        if self._time_limit_in_terminated:  # their "terminated" includes the time limit
            terminated = terminated & ~truncated
        terminated = terminated | (jnp.asarray(done, bool) & ~truncated)
        truncated = truncated & ~terminated
        fresh_obs, fresh = self._traced(self._env.reset_env, reset_key, params)
        done = terminated | truncated
        return self._auto_reset(
            done, (fresh, fresh_obs), (stepped, obs), reward, terminated, truncated
        )
