"""On-device environments: ``make(id)`` builds one by its id.

Ids: ``"catch"`` (the Podracer paper's demo), ``"gymnax:<name>"`` for every environment of
gymnax, discrete (``gymnax:CartPole-v1``, ``gymnax:Breakout-MinAtar``, ...) or continuous
(``gymnax:Pendulum-v1``, ``gymnax:MountainCarContinuous-v0``, ...), ``"brax:<name>"`` for brax's
environments (``brax:ant``, ``brax:halfcheetah``, ...; options in the id as a query string,
``brax:ant?backend=positional&episode_length=100``, see :mod:`podracer.envs.jax.brax`; brax is an
optional extra), ``"trading:synthetic"`` and ``"trading:PATH.csv"`` (a portfolio of
stocks, :mod:`podracer.trading.environment`), the JAX suites' ``"<family>:<name>"`` (``playground:``,
``craftax:``, ``jumanji:``, ``navix:``, ``xminigrid:``, ``popgym_arcade:``, ``pgx:``; each an
optional extra, :data:`podracer.envs.suites.FAMILIES`), an id added with :func:`register`, and
``"module:attribute"``: a user's environment class or factory, imported from ``sys.path`` or
the current directory and called with the keyword arguments
(``podracer train --env my_envs:make_env``).

A run's environment options (``--env-param``, ``--env-observe``: :class:`EnvOptions`) are
applied by :func:`make_with_options`, the one factory every loop builds its JAX environments
with (:mod:`podracer.envs.options`).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from podracer.errors import ConfigValueError
from podracer.envs.jax import brax as brax_envs
from podracer.trading import environment as trading
from podracer.envs.jax.brax import BRAX_IDS, BraxEnvironment# brax itself: when a brax: id is made
from podracer.envs.jax.catch import Catch
from podracer.envs.jax.gymnax import CONTINUOUS_IDS, DISCRETE_IDS, GymnaxEnvironment
from podracer.envs.options import EnvOptions, make_with_options
from podracer.envs.suites import FAMILIES
from podracer.envs.wrappers import EpisodeStatistics, ObservationMask, WithParams

KNOWN_IDS: tuple[str, ...] = (
    "catch",
    *(f"gymnax:{name}" for name in DISCRETE_IDS),
    *(f"gymnax:{name}" for name in CONTINUOUS_IDS),
    *(f"brax:{name}" for name in BRAX_IDS),
    "trading:synthetic",
)

RESERVED_PREFIXES = ("gymnax:", "brax:", "trading:", "envpool:", "gymnasium:", *FAMILIES)
"""Id prefixes of the built-in families (JAX and host); any other ``a:b`` is a module path."""

_REGISTRY: dict[str, Callable[..., Any]] = {}


def register(env_id: str, factory: Callable[..., Any]) -> None:
    """Makes ``make(env_id, **kwargs)`` return ``factory(**kwargs)``: an environment of your own
    (see ``docs/environments.md``) for every loop, the sweeps and the population.

    Args:
      env_id: the new id (not a built-in one, and without a built-in family's prefix).
      factory: a class or function that returns a :class:`~podracer.types.Environment`.

    Raises:
      ValueError: the id is built in or already registered.
    """
    if env_id in KNOWN_IDS or env_id.startswith(RESERVED_PREFIXES):
        raise ValueError(f"register: {env_id!r} is a built-in id; choose another name")
    if env_id in _REGISTRY:
        raise ValueError(f"register: {env_id!r} is already registered")
    _REGISTRY[env_id] = factory


def make(env_id: str, **kwargs):
    """Builds the environment ``env_id`` (see :data:`KNOWN_IDS` and :func:`register`).

    Args:
      env_id: ``"catch"``, ``"gymnax:<name>"``, ``"brax:<name>"`` (options as a query string),
        ``"trading:synthetic"``, ``"trading:PATH.csv"``, a registered id, or
        ``"module:attribute"`` (a class or factory of your own).
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
    if env_id == "catch":
        return Catch(**kwargs)
    if env_id.startswith("gymnax:") and env_id in KNOWN_IDS:
        return GymnaxEnvironment(env_id.removeprefix("gymnax:"), **kwargs)
    if env_id.startswith("brax:"):
        return brax_envs.make(env_id, **kwargs)
    if env_id.startswith("trading:"):
        return trading.make(env_id, **kwargs)
    family = next((prefix for prefix in FAMILIES if env_id.startswith(prefix)), None)
    if family is not None:  # a suite's adapter, imported only now (its library is an extra)
        return importlib.import_module(FAMILIES[family][0]).make(env_id, **kwargs)
    if ":" in env_id and not env_id.startswith(RESERVED_PREFIXES):
        from podracer.agents.spec import load_attribute

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
    if env_id.startswith(("envpool:", "gymnasium:")):
        raise ConfigValueError(
            f"environment id {env_id!r} is a host environment (stepped by Python threads, not "
            "compiled into the program): run it with --arch sebulba, or choose a JAX "
            f"environment: {', '.join(KNOWN_IDS[:6])}, ..."
        )
    known = (*KNOWN_IDS, *_REGISTRY)
    close = difflib.get_close_matches(env_id, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigValueError(
        f"unknown environment id {env_id!r}.{hint} Known ids: {', '.join(known)}"
    )


__all__ = [
    "KNOWN_IDS",
    "BraxEnvironment",
    "Catch",
    "EnvOptions",
    "EpisodeStatistics",
    "GymnaxEnvironment",
    "ObservationMask",
    "WithParams",
    "make",
    "make_with_options",
    "register",
]
