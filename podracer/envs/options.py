"""Environment options: parameters and an observation mask, for every loop and kind of
environment (``--env-param NAME=VALUE``, ``--env-observe INDICES``).

:class:`EnvOptions` is part of a run's spec (``config.json``'s ``env_options``) and of its
:class:`~podracer.loops.Recipe`; every environment of a run is built with them by one factory
per kind: :func:`podracer.envs.factory.make_with_options` for a JAX environment (Anakin's
rollout and evaluator, a population's tournament, a JAX environment stepped on Sebulba's host)
and :func:`podracer.envs.host.make` for a host environment (Sebulba's actors, evaluator and
probe). This module holds the options and their checks; it builds nothing.

- ``params``: for a JAX environment (``catch``, ``gymnax:``, ``brax:``, a registered or
  ``module:attribute`` id) the fields of its ``default_params`` (gymnax's ``EnvParams``), which
  the environment then carries as its ``default_params`` wherever it is used; for a host
  environment (``envpool:``, ``gymnasium:``) keyword arguments of the environment's ``make``.
  A value takes the type of the name's default (int, float, bool or str); text (the command
  line's) is parsed by that type, a bool taking ``true``/``false``/``1``/``0``.
- ``observe``: the indices of the entries of a vector (1-D) observation that the agent sees, in
  that order (``observe=(0, 2)`` on CartPole: positions kept, velocities hidden); ``obs`` and
  ``final_obs`` are masked and the observation spec shrinks. ``()`` keeps every entry.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from podracer.errors import ConfigError

PARAM_FLAG = "--env-param"
OBSERVE_FLAG = "--env-observe"
_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}  # by type


@dataclasses.dataclass(frozen=True)
class EnvOptions:
    """A run's environment options (hashable; ``to_dict`` / ``from_dict`` for ``config.json``).

    ``EnvOptions(params={"memory_length": 10}, observe=(0, 2))``: ``params`` is a mapping or
    ``(name, value)`` pairs, kept sorted by name; ``observe`` distinct indices ``>= 0``.
    """

    params: tuple[tuple[str, Any], ...] = ()
    """EnvParams fields of a JAX environment, or ``make`` keyword arguments of a host
    environment (``--env-param NAME=VALUE``)."""
    observe: tuple[int, ...] = ()
    """The entries of a vector observation kept, in order; () keeps all (``--env-observe``)."""

    def __post_init__(self):
        items = self.params.items() if isinstance(self.params, Mapping) else self.params
        pairs: dict[str, Any] = {}
        for item in items:
            if isinstance(item, str) or len(item) != 2:
                raise ConfigError(
                    f"EnvOptions.params={self.params!r} is not allowed: give a mapping or "
                    "(name, value) pairs"
                )
            name, value = item
            if not isinstance(name, str) or not name.isidentifier():
                raise ConfigError(
                    f"{PARAM_FLAG} {name!r} is not allowed: a parameter's name is an identifier"
                )
            if name in pairs:
                raise ConfigError(
                    f"{PARAM_FLAG} {name}={value!r} is not allowed: {name} is given twice"
                )
            if isinstance(value, np.generic):
                value = value.item()
            if not isinstance(value, bool | int | float | str):
                raise ConfigError(
                    f"{PARAM_FLAG} {name}={value!r} is not allowed: a value is an int, float, "
                    "bool or str"
                )
            pairs[name] = value
        object.__setattr__(self, "params", tuple(sorted(pairs.items())))
        observe = self.observe
        if isinstance(observe, str):
            observe = parse_indices(observe)
        given = _indices_text(observe)
        if isinstance(observe, int | np.integer) or not all(
            isinstance(i, int | np.integer) and not isinstance(i, bool) for i in observe
        ):
            raise ConfigError(
                f"{OBSERVE_FLAG} {given} is not allowed: give observation indices, e.g. 0,2"
            )
        observe = tuple(int(i) for i in observe)
        negative = [i for i in observe if i < 0]
        if negative:
            raise ConfigError(
                f"{OBSERVE_FLAG} {given} is not allowed: index {negative[0]} is negative; "
                "indices count from 0"
            )
        twice = [i for n, i in enumerate(observe) if i in observe[:n]]
        if twice:
            raise ConfigError(
                f"{OBSERVE_FLAG} {given} is not allowed: index {twice[0]} is given twice; give "
                "distinct indices"
            )
        object.__setattr__(self, "observe", observe)

    @property
    def param_dict(self) -> dict[str, Any]:
        """``params`` as a dict."""
        return dict(self.params)

    @property
    def empty(self) -> bool:
        """No option is set: the environment as its id builds it."""
        return not self.params and not self.observe

    def to_dict(self) -> dict[str, Any]:
        """``{"params": {name: value}, "observe": [indices]}`` (``config.json``'s
        ``env_options``)."""
        return {"params": self.param_dict, "observe": list(self.observe)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "env_options") -> EnvOptions:
        """The inverse of :meth:`to_dict`; an unknown key is an error naming the keys."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"{where} must be a mapping with keys params, observe, not {type(data).__name__}"
            )
        unknown = sorted(set(data) - {"params", "observe"})
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(unknown)}; the keys are params, observe"
            )
        params = data.get("params") or {}
        if not isinstance(params, Mapping):
            raise ConfigError(f"{where}: params must be a mapping of names to values")
        return cls(params=params, observe=tuple(data.get("observe") or ()))

    def merged(self, params: Mapping[str, Any] | None = None, observe=None) -> EnvOptions:
        """These options with ``params`` added (replacing those of the same name) and
        ``observe`` replacing the mask when given."""
        return EnvOptions(
            params={**self.param_dict, **(params or {})},
            observe=self.observe if observe is None else observe,
        )


def as_options(value: EnvOptions | Mapping[str, Any] | None) -> EnvOptions:
    """``value`` as :class:`EnvOptions`: ``None`` is no option, a mapping is ``params`` (the
    former ``env_options={"episodic_life": True}`` of a host environment)."""
    if value is None:
        return EnvOptions()
    if isinstance(value, EnvOptions):
        return value
    if isinstance(value, Mapping):
        return EnvOptions(params=value)
    raise ConfigError(
        f"env_options={value!r} is not allowed: give an EnvOptions or a mapping of parameters"
    )


def _indices_text(observe: Any) -> str:
    if isinstance(observe, str):
        return observe
    try:
        return ",".join(str(i) for i in observe)
    except TypeError:
        return repr(observe)


def parse_indices(text: str) -> tuple[int, ...]:
    """``"0,2"`` -> ``(0, 2)``; anything but comma-separated integers is an error."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"{OBSERVE_FLAG} {text} is not allowed: give comma-separated observation indices, "
            "e.g. 0,2"
        ) from None


def parse_params(texts: Sequence[str]) -> dict[str, str]:
    """``["memory_length=10", ...]`` -> ``{"memory_length": "10"}`` (values typed later, by
    :func:`typed_params`); a repeated name or an entry without ``=`` is an error."""
    out: dict[str, str] = {}
    for text in texts:
        name, equals, value = text.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ConfigError(
                f"{PARAM_FLAG} {text} is not allowed: give NAME=VALUE, e.g. {PARAM_FLAG} "
                "memory_length=10"
            )
        if name in out:
            raise ConfigError(f"{PARAM_FLAG} {text} is not allowed: {name} is given twice")
        out[name] = value
    return out


# --- values typed by the defaults ------------------------------------------------------------


def value_type(default: Any) -> type | None:
    """The type a parameter with this default takes (bool, int, float, str; ``object`` for a
    default of None: any of them, text read as the first that parses), or None when it is none
    of them (an array, a tuple): such a parameter cannot be set."""
    if default is None:
        return object
    if isinstance(default, bool | np.bool_):
        return bool
    if isinstance(default, int | np.integer):
        return int
    if isinstance(default, float | np.floating):
        return float
    if isinstance(default, str):
        return str
    shape, dtype = getattr(default, "shape", None), getattr(default, "dtype", None)
    if shape == () and dtype is not None:
        return {"b": bool, "i": int, "u": int, "f": float}.get(np.dtype(dtype).kind)
    return None


def _parse(text: str, kind: type) -> Any:
    if kind is object:  # no default to say: the first of int, float, bool that reads it, or text
        for guess in (int, float, bool):
            try:
                return _parse(text, guess)
            except ValueError:
                pass
        return text
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError(text)
    return kind(text.strip()) if kind is not str else text


def typed_value(env_id: str, name: str, value: Any, default: Any) -> Any:
    """``value`` as the type of ``default``: text is parsed (a bool takes true/false/1/0), an
    int is taken for a float; anything else is an error naming the flag, the value and the type."""
    kind = value_type(default)
    shown = f"{PARAM_FLAG} {name}={value}"
    if kind is None:
        what = (
            f"an array of shape {tuple(default.shape)}"
            if hasattr(default, "shape")
            else type(default).__name__
        )
        raise ConfigError(
            f"{shown} is not allowed: {name} of {env_id} is {what}; {PARAM_FLAG} sets int, "
            "float, bool and str parameters"
        )
    try:
        if isinstance(value, str) and kind is not str:
            return _parse(value, kind)
        if kind is object:
            return value
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
        raise ValueError(value)
    except ValueError:
        raise ConfigError(
            f"{shown} is not allowed: {name} of {env_id} takes {_KINDS[kind]} (its default is "
            f"{default!r})"
        ) from None


def typed_params(
    env_id: str, params: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """``params`` checked against ``defaults`` (every parameter of ``env_id`` and its default)
    and typed by them (:func:`typed_value`); an unknown name is an error listing the names
    that can be set."""
    settable = [name for name, default in defaults.items() if value_type(default) is not None]
    out = {}
    for name, value in params.items():
        if name not in defaults:
            import difflib

            close = difflib.get_close_matches(name, settable, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            names = ", ".join(settable) if settable else "none"
            raise ConfigError(
                f"{PARAM_FLAG} {name}={value} is not allowed: {env_id} has no parameter "
                f"{name!r}{hint}; its parameters are {names}"
            )
        out[name] = typed_value(env_id, name, value, defaults[name])
    return out


def param_fields(params: Any) -> dict[str, Any]:
    """The fields of a JAX environment's ``default_params`` and their values: a dataclass
    (gymnax's and flax's ``struct.dataclass``), a ``NamedTuple`` or a dict; other params (brax's
    ``()``) have none."""
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    if isinstance(params, tuple) and hasattr(params, "_fields"):
        return params._asdict()
    if isinstance(params, Mapping):
        return dict(params)
    return {}


def replace_params(params: Any, values: Mapping[str, Any]) -> Any:
    """``params`` with the fields in ``values`` replaced (a default that is a 0-d array keeps
    its array type and dtype)."""
    fields = param_fields(params)
    values = {
        name: np.asarray(value, np.asarray(fields[name]).dtype)
        if hasattr(fields[name], "dtype") and not isinstance(fields[name], np.generic)
        else value
        for name, value in values.items()
    }
    if dataclasses.is_dataclass(params):
        return dataclasses.replace(params, **values)
    if isinstance(params, tuple) and hasattr(params, "_fields"):
        return params._replace(**values)
    return {**params, **values}


# --- the observation mask ------------------------------------------------------------------


def check_observe(env_id: str, observe: Sequence[int], shape: tuple[int, ...]) -> np.ndarray:
    """The indices of ``observe`` as an i32 array, checked against an observation ``shape``:
    a vector's, each index within it."""
    given = _indices_text(observe)
    if len(shape) != 1:
        raise ConfigError(
            f"{OBSERVE_FLAG} {given} is not allowed: {env_id}'s observations have shape "
            f"{tuple(shape)}, not a vector's; {OBSERVE_FLAG} takes environments with 1-D "
            "observations"
        )
    size = shape[0]
    outside = [i for i in observe if not 0 <= i < size]
    if outside:
        raise ConfigError(
            f"{OBSERVE_FLAG} {given} is not allowed: index {outside[0]} is outside {env_id}'s "
            f"observations of {size} entries; give distinct indices in 0..{size - 1}"
        )
    return np.asarray(observe, np.int32)


def constructor_defaults(factory: Any) -> dict[str, Any]:
    """The keyword parameters of ``factory`` that have a default, and the defaults."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return {}
    return {
        name: p.default
        for name, p in signature.parameters.items()
        if p.default is not inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


__all__ = [
    "EnvOptions",
    "as_options",
    "check_observe",
    "constructor_defaults",
    "param_fields",
    "parse_indices",
    "parse_params",
    "replace_params",
    "typed_params",
]
