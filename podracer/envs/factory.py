"""Making environments: :func:`make` builds a JAX environment by its id, :func:`register` adds an
id, and :func:`make_with_options` applies a run's :class:`~podracer.envs.options.EnvOptions`
(``--env-param``, ``--env-observe``); :func:`resolve` types a run's options by the
environment's defaults before anything is built. The ids are listed in :mod:`podracer.envs`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from typing import Any

from podracer.envs import registry
from podracer.envs.jax.brax import BRAX_IDS
from podracer.envs.jax.gymnax import CONTINUOUS_IDS, DISCRETE_IDS
from podracer.envs.options import (
    PARAM_FLAG,
    EnvOptions,
    as_options,
    param_fields,
    replace_params,
    typed_params,
)
from podracer.envs.wrappers import ObservationMask, WithParams
from podracer.errors import ConfigError, ConfigValueError
from podracer.util.imports import load_attribute

KNOWN_IDS: tuple[str, ...] = (
    "catch",
    *(f"gymnax:{name}" for name in DISCRETE_IDS),
    *(f"gymnax:{name}" for name in CONTINUOUS_IDS),
    *(f"brax:{name}" for name in BRAX_IDS),
    "trading:synthetic",
)
"""Ids of the built-in families that :func:`make` builds as they are (a family may take more:
``trading:PATH.csv``, the suites' names, brax's options in a query string)."""

_REGISTRY: dict[str, Callable[..., Any]] = {}
"""The ids added by :func:`register` and their factories (a family of ids is a row of
:mod:`podracer.envs.registry` instead)."""


def register(env_id: str, factory: Callable[..., Any]) -> None:
    """Makes ``make(env_id, **kwargs)`` return ``factory(**kwargs)``: an environment of your own
    (see ``docs/environments.md``) for every loop, the sweeps and the population.

    Args:
      env_id: the new id (not a built-in one, and without a built-in family's prefix).
      factory: a class or function that returns a :class:`~podracer.types.Environment`.

    Raises:
      ValueError: the id is built in or already registered.
    """
    if env_id in KNOWN_IDS or registry.family_of(env_id) is not None:
        raise ValueError(f"register: {env_id!r} is a built-in id; choose another name")
    if env_id in _REGISTRY:
        raise ValueError(f"register: {env_id!r} is already registered")
    _REGISTRY[env_id] = factory


def make(env_id: str, **kwargs):
    """Builds the environment ``env_id``: a registered id (:func:`register`), an id of a family
    (:mod:`podracer.envs.registry`: its row's JAX maker builds it), or a ``module:attribute``.

    Args:
      env_id: ``"catch"``, ``"gymnax:<name>"``, ``"brax:<name>"`` (options as a query string),
        ``"trading:synthetic"``, ``"trading:PATH.csv"``, a JAX suite's ``"<family>:<name>"``, a
        registered id, or ``"module:attribute"`` (a class or factory of your own).
      **kwargs: the constructor's keyword arguments (``envs.make("catch", rows=5)``).

    Returns:
      The :class:`~podracer.types.Environment`, with its ``default_params`` (run options are
      applied by :func:`make_with_options`).

    Raises:
      ConfigValueError: an unknown id (with the closest known one), a host environment's id,
        or a ``module:attribute`` that is not an environment.
    """
    if env_id in _REGISTRY:
        return _REGISTRY[env_id](**kwargs)
    family = registry.family_of(env_id)
    if family is not None and family.jax:  # its adapter, imported only now (maybe an extra's)
        return registry.load(family.jax)(env_id, **kwargs)
    if family is not None:
        raise ConfigValueError(
            f"environment id {env_id!r} is a host environment (stepped by Python threads, not "
            "compiled into the program): run it with --arch sebulba, or choose a JAX "
            f"environment: {', '.join(KNOWN_IDS[:6])}, ..."
        )
    if ":" in env_id:
        factory = load_attribute(env_id, "environment id")
        if not callable(factory):
            raise ConfigValueError(
                f"environment id {env_id!r} names a {type(factory).__name__}: give a class or a "
                "function that returns an Environment (docs/environments.md)"
            )
        env = factory(**kwargs)
        missing = [
            name
            for name in ("id", "reset", "step", "observation_spec", "action_spec", "default_params")
            if not hasattr(env, name)
        ]
        if missing:
            raise ConfigValueError(
                f"environment id {env_id!r} made a {type(env).__name__}, which has no "
                f"{', '.join(missing)}: it must follow podracer.types.Environment "
                "(docs/environments.md)"
            )
        return env
    known = (*KNOWN_IDS, *_REGISTRY)
    close = difflib.get_close_matches(env_id, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigValueError(
        f"unknown environment id {env_id!r}.{hint} Known ids: {', '.join(known)}"
    )


def with_options(env: Any, options: EnvOptions, env_id: str | None = None) -> Any:
    """A JAX environment with ``options``: ``params`` replace fields of its ``default_params``
    (through its own ``with_params(params)`` when it has one, which recomputes specs that
    depend on them, as the gymnax adapter and Catch do; otherwise
    :class:`~podracer.envs.wrappers.WithParams`), then ``observe`` masks its observations
    (:class:`~podracer.envs.wrappers.ObservationMask`)."""
    env_id = env_id or getattr(env, "id", type(env).__name__)
    if options.params:
        defaults = param_fields(env.default_params)
        values = typed_params(env_id, options.param_dict, defaults)
        params = replace_params(env.default_params, values)
        with_params = getattr(env, "with_params", None)
        try:
            env = with_params(params) if callable(with_params) else WithParams(env, params)
        except ValueError as error:  # the environment's own check of a value (Catch's rows)
            given = " ".join(f"{PARAM_FLAG} {k}={v}" for k, v in values.items())
            raise ConfigError(f"{given} is not allowed: {error}") from None
    if options.observe:
        env = ObservationMask(env, options.observe, env_id)
    return env


def make_with_options(
    env_id: str, options: EnvOptions | Mapping[str, Any] | None = None, **kwargs: Any
) -> Any:
    """THE factory of a run's JAX environment: :func:`podracer.envs.make` (``kwargs`` go to
    the constructor) with ``options`` applied (:func:`with_options`).

    Args:
      env_id: the environment's id (:func:`podracer.envs.make`).
      options: an :class:`EnvOptions` (or a mapping of its ``params``): ``params`` replace
        fields of the environment's ``default_params``, ``observe`` keeps those entries of a
        vector observation.
      **kwargs: the environment constructor's keyword arguments.

    Returns:
      The :class:`~podracer.types.Environment`, wrapped as the options need
      (:class:`~podracer.envs.WithParams`, :class:`~podracer.envs.ObservationMask`).

    Raises:
      ConfigError: an unknown id, parameter or index, or a value of the wrong type.
    """
    options = as_options(options)
    env = make(env_id, **kwargs)
    return env if options.empty else with_options(env, options, env_id)


def param_defaults(env_id: str) -> dict[str, Any]:
    """Every parameter ``--env-param`` can name for ``env_id`` and its default: a host
    environment's ``make`` keyword arguments (its family's ``host_options``,
    :mod:`podracer.envs.registry`), a JAX environment's ``default_params`` fields."""
    family = registry.family_of(env_id)
    if family is not None and family.host_options:
        return registry.load(family.host_options)(env_id)
    return param_fields(make(env_id).default_params)


def resolve(env_id: str, options: EnvOptions | Mapping[str, Any] | None) -> EnvOptions:
    """``options`` with their values typed for ``env_id`` (:func:`param_defaults`): what the
    command line does with ``--env-param`` text before anything is built. A name ``env_id``
    does not have, or a value of the wrong type, is an error."""
    options = as_options(options)
    if not options.params:
        return options
    params = typed_params(env_id, options.param_dict, param_defaults(env_id))
    return dataclasses.replace(options, params=params)
