"""What the JAX adapters share: :class:`Adapter`, the base class of an environment of another
library behind podracer's :class:`~podracer.types.Environment` (its specs, ``default_params``
and ``with_params``, the reset's first ``TimeStep``, the same-step auto-reset of a step), and
the functions around it: the optional library's import with a one-line error naming its extra,
unknown names with the closest known one, a library's refusal of a checked ``shard_map`` as one
line, selects over pytrees, observation specs of pytrees, and steps repeated ``action_repeat``
times.

An adapter (``podracer/envs/jax/<family>.py``) has a ``make(env_id, **kwargs)`` that returns a
:class:`~podracer.types.Environment`, named by its family's row of :mod:`podracer.envs.registry`;
:func:`podracer.envs.make` imports it only when an id of its family is made, so none of the
suites is needed to import podracer.
"""

from __future__ import annotations

import copy
import difflib
import importlib
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs import registry
from podracer.errors import ConfigValueError
from podracer.types import ObservationSpec, TimeStep
from podracer.util.ops import vary_as
from podracer.util.validation import check_fields


def require(library: str, env_id: str) -> Any:
    """``import library``, or a :class:`ConfigValueError` that names the id, the library and the
    extra that installs it (the ``extra`` of the id's family, :mod:`podracer.envs.registry`)."""
    extra = registry.extra_of(env_id) or library.split(".")[0]
    try:
        return importlib.import_module(library)
    except ImportError as error:
        raise ConfigValueError(
            f"environment id {env_id!r} needs the {library.split('.')[0]} library, which is not "
            f"installed ({error}): pip install 'podracer[{extra}]' (or 'podracer[envs]' for "
            "every suite)"
        ) from None


def library_and_name(
    env_id: str, library: str, prefix: str, names: Callable[[], Iterable[str]]
) -> tuple[Any, str]:
    """``(module, name)``: the library imported (:func:`require`) and the name after the id's
    ``prefix``, checked against the library's ``names()`` (:func:`check_name`)."""
    module = require(library, env_id)
    name = env_id.removeprefix(prefix)
    check_name(env_id, name, names(), prefix)
    return module, name


def check_name(env_id: str, name: str, known: Iterable[str], family: str) -> None:
    """A :class:`ConfigValueError` for a ``name`` not in ``known``, with the closest known
    name and the list."""
    known = tuple(known)
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {family + close[0]!r}?" if close else ""
    raise ConfigValueError(
        f"unknown environment id {env_id!r}: {name!r} is not one of the {family} environments "
        f"podracer adapts.{hint} Known: {', '.join(known)}"
    )


def replace_fields(env_id: str, library: str, params: Any, values: dict[str, Any]) -> Any:
    """``params`` (a library's dataclass of env params) with the fields in ``values`` replaced;
    a name that is not a field is a :class:`ConfigValueError` listing the fields."""
    check_fields(env_id, params, values, library)
    return params.replace(**values)


VMA_ERRORS = (
    "manual axis types do not match",
    "branches must have equal output types",
    "requires varying manual axes to match",
    "must have equal types",
    "pvary is a invariant->variant collective",
)
"""What JAX 0.10 says when a checked ``shard_map`` refuses code that mixes values varying over
the device axes with constants of its own (in a ``lax.cond``'s branches, a loop's carry)."""


def traced(env_id: str, library: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a library's reset or step); inside a ``jax.shard_map`` that checks varying
    manual axes, its refusal of the library's code as a one-line :class:`ConfigValueError`
    (an adapter whose library needs it says ``check_vma = False``: Anakin runs its
    ``shard_map`` unchecked)."""
    try:
        return fn(*args)
    except (TypeError, ValueError) as error:
        if not jax.sharding.get_abstract_mesh().manual_axes or not any(
            text in str(error) for text in VMA_ERRORS
        ):
            raise
        raise ConfigValueError(
            f"{env_id}: {library}'s code does not trace inside a jax.shard_map that checks "
            "varying manual axes: it mixes values that vary over the device axes with constants "
            "of its own (in a lax.cond or a loop); give shard_map check_vma=False, as the "
            f"environment's check_vma attribute says and Anakin does ({str(error).splitlines()[0]})"
        ) from None


def select_tree(done: jax.Array, on_done: Any, otherwise: Any) -> Any:
    """``on_done`` where ``done`` (a bool scalar, or ``[B]`` under ``vmap``), else
    ``otherwise``, leaf by leaf (the two pytrees have one structure): how an adapter takes a
    fresh episode's state and observation after a step that ended one."""

    def pick(a, b):
        a, b = jnp.asarray(a), jnp.asarray(b)
        return jnp.where(
            jnp.reshape(done, jnp.shape(done) + (1,) * (a.ndim - jnp.ndim(done))), a, b
        )

    return jax.tree.map(pick, on_done, otherwise)


def observation_spec_of(obs: Any) -> Any:
    """The :class:`~podracer.types.ObservationSpec` of one (unbatched) observation, or the
    dict of them for a dict observation (an adapter turns a library's named tuple into a dict
    first)."""
    if isinstance(obs, dict):
        return {name: observation_spec_of(leaf) for name, leaf in obs.items()}
    return ObservationSpec(tuple(jnp.shape(obs)), jnp.dtype(jnp.result_type(obs)))


def strong(tree: Any) -> Any:
    """Every leaf a (not weakly typed) array, so reset's and step's states have one type."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), tree)


def repeated_step(
    step_once: Callable[[Any, jax.Array], Any],
    select: Callable[[jax.Array, Any, Any], Any],
    env_state: Any,
    action: jax.Array,
    times: int,
) -> tuple[Any, jax.Array]:
    """``step_once(env_state, action)`` ``times`` times (a physics library's ``action_repeat``);
    the state and the summed reward, f32. The repeats stop at a termination (a state whose
    ``done > 0``): ``select(ended, state, stepped)`` keeps the terminal state, and no more reward
    is added."""
    if times == 1:
        stepped = step_once(env_state, action)
        return stepped, jnp.asarray(stepped.reward, jnp.float32)

    def repeat(carry, _):
        state, total, ended = carry
        stepped = step_once(state, action)
        total = total + jnp.where(ended, 0.0, stepped.reward).astype(jnp.float32)
        stepped = select(ended, state, stepped)  # frozen after a termination
        return (stepped, total, ended | (stepped.done > 0)), None

    start = (env_state, jnp.zeros((), jnp.float32), jnp.zeros((), bool))
    (env_state, total, _), _ = jax.lax.scan(repeat, start, None, times)
    return env_state, total


class Adapter:
    """The base of a JAX adapter: the library's environment ``_env`` as the environment ``id``.

    A subclass gives :meth:`_specs` (the observation and action specs for some params) and
    :meth:`_reset` (the library's reset: the state and the observation), and its ``step``, which
    ends with :meth:`_auto_reset` where the library does not reset by itself. ``library`` names
    the library in the errors of :func:`traced`; ``vary_reset`` marks the reset's state and
    ``TimeStep`` as varying over the ``shard_map`` axes the key varies over (a library whose
    fresh state holds constants of its own: a step count of 0), so a scan's carry keeps its type.
    Subclasses say ``check_vma = False`` where their library's code fails a checked
    ``shard_map``.
    """

    library = "the library"
    vary_reset = False
    auto_reset = True
    """Whether ``step`` resets an episode that ends (the contract); a copy with ``False``
    (:func:`podracer.envs.render.without_auto_reset`) keeps the ended episode's state, which a
    video draws as its last frame. Read when ``step`` is traced."""

    def __init__(self, env_id: str, env: Any, params: Any = ()):
        self.id = env_id
        self._env = env
        self._set_params(params)

    def _set_params(self, params: Any) -> None:
        self._params = params
        self._obs_spec, self._action_spec = self._specs(params)

    def _specs(self, params: Any) -> tuple[Any, Any]:
        """The observation spec and the action spec with ``params``."""
        raise NotImplementedError

    def _reset(self, key: jax.Array, params: Any) -> tuple[Any, Any]:
        """The library's reset: the state and the observation."""
        raise NotImplementedError

    @property
    def default_params(self) -> Any:
        return self._params

    def with_params(self, params: Any) -> Adapter:
        """This environment with ``params`` as its ``default_params`` (``--env-param``), its
        specs computed from them."""
        env = copy.copy(self)
        env._set_params(params)
        return env

    @property
    def observation_spec(self) -> Any:
        return self._obs_spec

    @property
    def action_spec(self) -> Any:
        return self._action_spec

    @property
    def unwrapped(self) -> Any:
        """The library's environment underneath."""
        return self._env

    def _traced(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, a refusal of a checked ``shard_map`` as one line (:func:`traced`)."""
        return traced(self.id, self.library, fn, *args)

    def reset(self, key, params=()):
        state, obs = self._reset(key, params)
        out = (state, TimeStep.first(obs))
        return vary_as(out, key) if self.vary_reset else out

    def _auto_reset(
        self,
        done: jax.Array,
        fresh: tuple[Any, Any],
        stepped: tuple[Any, Any],
        reward: Any,
        terminated: jax.Array,
        truncated: jax.Array,
    ) -> tuple[Any, TimeStep]:
        """The same-step auto-reset: the state and ``TimeStep`` of a step whose library state
        and observation are ``stepped``; where ``done``, the state and ``obs`` are ``fresh``'s
        (a reset's) and ``final_obs`` keeps the ended episode's last observation. Without
        :attr:`auto_reset`, the state and ``obs`` are ``stepped``'s."""
        state, obs = select_tree(done, fresh, stepped) if self.auto_reset else stepped
        return state, TimeStep(
            obs=obs,
            reward=jnp.asarray(reward, jnp.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=stepped[1],
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"


class PhysicsAdapter(Adapter):
    """An adapter of a physics library (brax, MuJoCo Playground) whose step takes no key and
    whose state says ``done`` (a termination): each step applies the action ``action_repeat``
    times (:func:`repeated_step`), an episode is truncated after ``episode_length`` library
    steps, and the state is ``state_class(env_state, steps)``: the library's state and the
    library steps of the episode so far. A subclass gives :meth:`_fresh` (the library's reset)
    and :meth:`_step_once` (its step), and may map the library's observation
    (:meth:`_observation`) and choose how states are selected (:meth:`_select`)."""

    episode_length: int
    action_repeat: int
    state_class: type

    def _fresh(self, key: jax.Array) -> Any:
        """The library's reset: a fresh state."""
        raise NotImplementedError

    def _step_once(self, env_state: Any, action: jax.Array) -> Any:
        """The library's step: the next state."""
        raise NotImplementedError

    def _select(self, done: jax.Array, on_done: Any, otherwise: Any) -> Any:
        return select_tree(done, on_done, otherwise)

    def _observation(self, obs: Any) -> Any:
        """The agent's observation of the library's."""
        return obs

    def _reset(self, key, params):
        env_state = self._fresh(key)
        state = self.state_class(env_state, jnp.zeros((), jnp.int32))
        return state, self._observation(env_state.obs)

    def step(self, key, state, action, params=()):
        del params
        _, reset_key = jax.random.split(key)  # the step key: the library's step takes none
        action = jnp.asarray(action, jnp.float32)
        stepped, reward = repeated_step(
            self._step_once, self._select, state.env_state, action, self.action_repeat
        )
        steps = state.steps + self.action_repeat
        terminated = jnp.asarray(stepped.done > 0, bool)
        truncated = ~terminated & (steps >= self.episode_length)
        done = terminated | truncated
        if self.auto_reset:
            env_state = self._select(done, self._fresh(reset_key), stepped)
            steps = jnp.where(done, 0, steps).astype(jnp.int32)
        else:
            env_state = stepped
        obs, final_obs = self._observation(env_state.obs), self._observation(stepped.obs)
        timestep = TimeStep(obs, reward, terminated, truncated, final_obs)
        return self.state_class(env_state, steps), timestep
