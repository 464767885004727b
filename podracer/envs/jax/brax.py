"""Brax environments behind podracer's :class:`~podracer.types.Environment` contract.

Ids are ``brax:<name>`` (:data:`BRAX_IDS`: ``brax:ant``, ``brax:halfcheetah``, ``brax:hopper``,
...), with options as keyword arguments of :func:`podracer.envs.make` or as a query string in the
id (``brax:ant?backend=positional&episode_length=100``), which is how ``--env`` passes them:

- ``backend`` (default ``"positional"``): the physics pipeline, one of :data:`BACKENDS`. Only
  ``positional`` and ``spring`` run inside ``jax.shard_map``, which Anakin, the sweeps and the
  populations use: ``generalized`` (brax's own default, the most accurate) and ``mjx`` fail to
  trace there with JAX 0.10 (their solvers, jaxopt's line search and MJX's, have a ``lax.cond``
  whose branches differ in varying manual axes), which :meth:`BraxEnvironment.step` reports as
  a :class:`ConfigValueError`; they work under plain ``jit`` / ``vmap``. Of the two,
  position-based dynamics is the more faithful; ``spring`` steps 3-5x faster on CPU (2 cores,
  64 environments under ``jit(vmap)``: ant ~20k steps/s against ~4k, halfcheetah ~8k against
  ~2.8k; ``generalized`` is no faster than ``positional`` there) with cruder contacts:
  ``brax:ant?backend=spring`` when throughput matters more than fidelity. Results are not
  comparable across backends (brax changes the time step, the substeps and, for
  ``positional``, actuator gears with the backend).
- ``episode_length`` (default 1000): the time limit, counted in brax steps as brax's
  ``EpisodeWrapper`` counts it (each podracer step is ``action_repeat`` of them); reaching it is
  a truncation.
- ``action_repeat`` (default 1): each action is applied ``action_repeat`` times and the rewards
  summed; the repeats stop at a termination (the state stays the terminal one and no more reward
  is added).

brax is imported only when a ``brax:`` id is made; it is an optional extra
(``pip install podracer[brax]``).

Observations are f32 ``[obs_size]``; actions f32 ``[action_size]`` within the action spec's
bounds: the actuators' control range (``[-1, 1]`` where brax gives none), or ``[-1, 1]`` for the
environments that map ``[-1, 1]`` onto that range themselves (:data:`RESCALED`). brax clips what
reaches the actuators to their range, but the control costs see the action as given.

``reset`` and ``step`` act on one unbatched environment (the loops ``vmap`` them). The episode
limit and the auto-reset are done here, not by brax's wrappers (its ``AutoResetWrapper`` always
returns to one fixed first state): ``terminated`` is brax's ``done``, ``truncated`` the time
limit without a termination (never both), and an episode that ends starts again from
``brax_env.reset`` with a key split from the step's key, ``final_obs`` keeping the observation
before the reset. Brax environments have no parameters: ``default_params`` is ``()``.
"""

from __future__ import annotations

import difflib
import urllib.parse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from podracer.envs.jax import base
from podracer.errors import ConfigError, ConfigValueError
from podracer.types import BoundedActionSpec, ObservationSpec

PREFIX = "brax:"

# Every environment of brax's registry (brax.envs) that builds and steps (brax 0.14, jax 0.10).
# Left out: "fast", a unit-test stub with no physics, and "swimmer", whose fluid model calls
# jnp.clip(a_min=...), which jax no longer has (a TypeError at its first step).
BRAX_IDS: tuple[str, ...] = (
    "ant",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "pusher",
    "reacher",
    "walker2d",
)

BACKENDS: tuple[str, ...] = ("positional", "generalized", "spring", "mjx")
"""brax's physics pipelines."""

DEFAULT_BACKEND = "positional"

RESCALED: frozenset[str] = frozenset({"humanoid", "humanoidstandup", "inverted_pendulum", "pusher"})
"""The environments whose ``step`` maps actions from ``[-1, 1]`` onto the actuators' control
range itself: their action spec is ``[-1, 1]``, not that range (``humanoid``'s is +-0.4)."""

OPTIONS: dict[str, type] = {"backend": str, "episode_length": int, "action_repeat": int}
"""The options of a ``brax:`` environment and their types."""


@struct.dataclass
class BraxState:
    """One environment's state: brax's own and the steps of the running episode."""

    env_state: Any  # brax.envs.State
    steps: jax.Array  # i32 []: brax steps taken in this episode (action_repeat per step)


def _close_hint(given: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(given, known, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def parse_id(env_id: str) -> tuple[str, dict[str, Any]]:
    """``"brax:ant?backend=positional&episode_length=100"`` -> ``("ant", {"backend":
    "positional", "episode_length": 100})``; a :class:`ConfigValueError` for an unknown name or
    option, or a value that is not of the option's type."""
    rest = env_id.removeprefix(PREFIX)
    name, _, query = rest.partition("?")
    if name not in BRAX_IDS:
        raise ConfigValueError(
            f"unknown brax environment {name!r} in {env_id!r}."
            f"{_close_hint(name, BRAX_IDS)} Known: {', '.join(BRAX_IDS)}"
        )
    options: dict[str, Any] = {}
    if query:
        for item in query.split("&"):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigValueError(
                    f"environment id {env_id!r}: {item!r} is not an option; write "
                    "brax:<name>?option=value&option=value"
                )
            key, value = urllib.parse.unquote(key), urllib.parse.unquote(value)
            if key in options:
                raise ConfigValueError(f"environment id {env_id!r} gives {key!r} twice")
            options[key] = value
    return name, _check_options(options, f"environment id {env_id!r}")


def _check_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """The options converted to their types and checked."""
    checked: dict[str, Any] = {}
    for key, value in options.items():
        if key not in OPTIONS:
            raise ConfigValueError(
                f"{where}: unknown brax option {key!r}.{_close_hint(key, list(OPTIONS))} "
                f"Options: {', '.join(OPTIONS)}"
            )
        kind = OPTIONS[key]
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int | np.integer | str):
                raise ConfigValueError(f"{where}: {key}={value!r} is not an integer")
            try:
                value = int(value)
            except ValueError:
                raise ConfigValueError(f"{where}: {key}={value!r} is not an integer") from None
            if value < 1:
                raise ConfigValueError(f"{where}: {key}={value} is not allowed: it must be >= 1")
        elif key == "backend" and value not in BACKENDS:
            raise ConfigValueError(
                f"{where}: unknown brax backend {value!r}.{_close_hint(str(value), BACKENDS)} "
                f"Backends: {', '.join(BACKENDS)}"
            )
        checked[key] = value
    return checked


def make(env_id: str, **kwargs: Any) -> BraxEnvironment:
    """The environment of a ``brax:<name>[?options]`` id; ``kwargs`` are more options (an option
    given both ways is an error)."""
    name, options = parse_id(env_id)
    kwargs = _check_options(kwargs, f"environment id {env_id!r}")
    both = sorted(set(options) & set(kwargs))
    if both:
        raise ConfigValueError(
            f"environment id {env_id!r}: {', '.join(both)} given both in the id and as keyword "
            "arguments"
        )
    return BraxEnvironment(name, **options, **kwargs)


def _brax_envs():
    """``brax.envs``, imported on first use. mujoco prints "Failed to import warp" to stdout when
    brax imports it without NVIDIA Warp (an optional GPU backend podracer does not use): that
    line is kept off the run's output."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            from brax import envs
    except ImportError as error:
        raise ConfigError(
            f"the brax: environments need brax ({error}): pip install 'podracer[brax]'"
        ) from None
    return envs


def _tree_where(cond: jax.Array, a: Any, b: Any) -> Any:
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y).astype(jnp.result_type(y)), a, b)


class BraxEnvironment(base.PhysicsAdapter):
    """One brax environment with podracer's ``TimeStep`` (see the module docstring)."""

    library = "brax"
    state_class = BraxState

    def __init__(
        self,
        name: str,
        backend: str | None = None,
        episode_length: int = 1000,
        action_repeat: int = 1,
    ):
        if name not in BRAX_IDS:
            raise ConfigValueError(
                f"unknown brax environment {name!r}.{_close_hint(name, BRAX_IDS)} "
                f"Known: {', '.join(BRAX_IDS)}"
            )
        options = {"episode_length": episode_length, "action_repeat": action_repeat}
        if backend is not None:
            options["backend"] = backend
        checked = _check_options(options, f"brax:{name}")
        self.name = name
        self.backend: str = checked.get("backend", DEFAULT_BACKEND)
        self.episode_length: int = checked["episode_length"]
        self.action_repeat: int = checked["action_repeat"]

        try:
            env = _brax_envs().get_environment(name, backend=self.backend)
        except ValueError as error:  # a backend this environment does not support
            raise ConfigValueError(
                f"brax:{name} with backend={self.backend!r} is not allowed: {error}"
            ) from None
        # The id makes this environment again: the options that are not the defaults.
        given = []
        if backend is not None:
            given.append(f"backend={self.backend}")
        if self.episode_length != 1000:
            given.append(f"episode_length={self.episode_length}")
        if self.action_repeat != 1:
            given.append(f"action_repeat={self.action_repeat}")
        super().__init__(f"{PREFIX}{name}" + (f"?{'&'.join(given)}" if given else ""), env)

    def _specs(self, params: Any) -> tuple[ObservationSpec, BoundedActionSpec]:
        obs = jax.eval_shape(self._env.reset, jax.random.key(0)).obs
        obs_spec = ObservationSpec(tuple(obs.shape), jnp.dtype(jnp.float32))
        size = int(self._env.action_size)
        low, high = np.full(size, -1.0, np.float32), np.full(size, 1.0, np.float32)
        actuator = getattr(getattr(self._env, "sys", None), "actuator", None)
        if actuator is not None and size and self.name not in RESCALED:
            ctrl = np.asarray(actuator.ctrl_range, np.float32).reshape(size, 2)
            limited = np.isfinite(ctrl).all(axis=1)  # brax gives +-inf where ctrl is not limited
            low = np.where(limited, ctrl[:, 0], low).astype(np.float32)
            high = np.where(limited, ctrl[:, 1], high).astype(np.float32)
        return obs_spec, BoundedActionSpec((size,), low, high, "float32")

    def _fresh(self, key) -> Any:
        env_state = self._env.reset(key)
        return base.strong(env_state.replace(obs=jnp.asarray(env_state.obs, jnp.float32)))

    def _step_once(self, env_state: Any, action: jax.Array) -> Any:
        try:
            stepped = base.strong(self._env.step(env_state, action))
        except TypeError as error:
            if "manual axis types" not in str(error):
                raise
            raise ConfigValueError(
                f"{self.id}: brax's {self.backend!r} pipeline does not trace inside "
                "jax.shard_map (Anakin, sweeps, populations) with this JAX: its solver's lax.cond "
                "mixes varying and replicated values; use backend=positional or backend=spring"
            ) from None
        return stepped.replace(obs=jnp.asarray(stepped.obs, jnp.float32))

    def _select(self, done: jax.Array, on_done: Any, otherwise: Any) -> Any:
        return _tree_where(done, on_done, otherwise)
