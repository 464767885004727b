"""The environment families: ONE table, a row per id prefix, that says how an id is made.

A row (:class:`Family`) names, for the ids that start with its ``prefix`` (``"gymnax:"``; a
prefix without a colon, ``"catch"``, is one exact id):

- ``jax``: the maker of its JAX environments, ``"module:function"``, called as
  ``function(env_id, **kwargs)`` by :func:`podracer.envs.make`;
- ``host``: the maker of its host environments (Sebulba's actors), called as
  ``function(env_id, num_envs=..., **options)`` by :func:`podracer.envs.host.make` (with
  ``batch_size=`` too when ``host_async``), and ``host_options``, ``"module:function"`` giving
  the maker's keyword options and their defaults (what ``--env-param`` may set). A family
  without a host maker is stepped on the host as a JAX environment
  (:class:`~podracer.envs.host.jax_env.JaxHostEnvironment`); one without a JAX maker runs on
  Sebulba only;
- ``extra``: the pip extra that installs its library (``pip install 'podracer[extra]'``), named
  by the one-line error when the library is missing (:func:`podracer.envs.jax.base.require`);
- ``render``: the renderer of its JAX environments' states, ``"module:function"``, called as
  ``function(env, states, params) -> uint8 [T, H, W, 3]`` by
  :func:`podracer.envs.render.renderer` (None: the family does not draw, unless its
  environment has a ``render`` method of its own); a host family draws through its host
  maker's ``render=True`` (``HostEnvironment.render``);
- ``presets``: the preset family of its ids (:mod:`podracer.loops.presets`): one name for the
  whole family, or ``(pattern, family)`` pairs over the name after the prefix (``fnmatch``, the
  first that matches wins; the query string of an id, ``brax:ant?backend=positional``, is
  ignored).

Makers are named by strings, imported only when an id of theirs is made, so an optional
library is needed only by the family that uses it. Adding a family is one adapter module (its
``make(env_id, **kwargs)``) and one row here, or :func:`add` at run time (docs/environments.md,
"Adding a family").
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
from collections.abc import Callable
from typing import Any

Presets = str | tuple[tuple[str, str], ...]
"""A preset family for every id of a row, or ``(pattern, family)`` pairs over the name."""


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the registry (the module's docstring says what each field means)."""

    prefix: str
    jax: str | None = None
    host: str | None = None
    host_options: str | None = None
    host_async: bool = False
    extra: str | None = None
    presets: Presets = ()
    render: str | None = None

    def matches(self, env_id: str) -> bool:
        """Whether ``env_id`` is one of this family's ids."""
        if self.prefix.endswith(":"):
            return env_id.startswith(self.prefix)
        return env_id == self.prefix

    def preset_family(self, env_id: str) -> str | None:
        """The preset family of ``env_id`` (one of this family's ids), or None."""
        if isinstance(self.presets, str):
            return self.presets
        name = env_id.split("?", 1)[0].removeprefix(self.prefix)
        return next(
            (family for pattern, family in self.presets if fnmatch.fnmatchcase(name, pattern)),
            None,
        )


MUJOCO_TASKS = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "InvertedDoublePendulum",
    "InvertedPendulum",
    "Pusher",
    "Reacher",
    "Swimmer",
    "Walker2d",
)
"""MuJoCo's locomotion and control tasks, as envpool and gymnasium name them (``<task>-v*``)."""

CLASSIC_PRESETS: tuple[tuple[str, str], ...] = (
    # Discrete classic control: a few actions, vector observations, short episodes.
    *((task, "classic_control") for task in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")),
    # Continuous classic control: one or two actions, short episodes.
    *((task, "classic_continuous") for task in ("Pendulum-v1", "MountainCarContinuous-v0")),
)
"""The classic control tasks' presets, named alike by gymnax, envpool and gymnasium."""

HOST_PRESETS: tuple[tuple[str, str], ...] = (
    *((f"{task}-v*", "mujoco") for task in MUJOCO_TASKS),
    *CLASSIC_PRESETS,
)
"""The presets of the host kinds' ids (envpool's and gymnasium's names are alike)."""

FAMILIES: list[Family] = [
    Family(
        "catch",
        jax="podracer.envs.jax.catch:make",
        presets="catch",
        render="podracer.envs.render.drawn:catch",
    ),
    # MinAtar's 10x10 frames in JAX, [H, W, C] with a channel per object, and classic control.
    Family(
        "gymnax:",
        jax="podracer.envs.jax.gymnax:make",
        presets=(("*-MinAtar", "minatar"), *CLASSIC_PRESETS),
        render="podracer.envs.render.gymnax:render",
    ),
    # Brax's physics in JAX (Anakin).
    Family(
        "brax:",
        jax="podracer.envs.jax.brax:make",
        extra="brax",
        presets="brax",
        render="podracer.envs.render.mujoco:brax",
    ),
    # Stock trading: D assets' orders in [-1, 1]^D, a day per step.
    Family(
        "trading:",
        jax="podracer.trading.environment:make",
        presets="trading",
        render="podracer.envs.render.drawn:trading",
    ),
    # The JAX suites: MuJoCo Playground's DM Control Suite and locomotion on MJX, Craftax,
    # Jumanji (Snake before the rest: its presets send Snake's "grid" through a CNN, which the
    # other games do not have), the MiniGrids in JAX (NAVIX, XLand-MiniGrid), POPGym Arcade,
    # pgx's single-player games.
    *(
        Family(
            f"{name}:",
            jax=f"podracer.envs.jax.{name}:make",
            extra=name,
            presets=presets,
            render=f"podracer.envs.render.{renderer}:{name}",
        )
        for name, presets, renderer in (
            ("playground", "playground", "mujoco"),
            ("craftax", "craftax", "suites"),
            ("jumanji", (("Snake-*", "snake"), ("*", "jumanji")), "suites"),
            ("navix", "minigrid", "suites"),
            ("xminigrid", "minigrid", "suites"),
            ("popgym_arcade", "popgym_arcade", "suites"),
            ("pgx", "pgx", "suites"),
        )
    ),
    # Host environments (Sebulba): envpool's pool (sync and async) and gymnasium's vector env.
    Family(
        "envpool:",
        host="podracer.envs.host.envpool:make",
        host_options="podracer.envs.host.envpool:option_defaults",
        host_async=True,
        presets=HOST_PRESETS,
    ),
    Family(
        "gymnasium:",
        host="podracer.envs.host.gymnasium:make",
        host_options="podracer.envs.host.gymnasium:option_defaults",
        presets=HOST_PRESETS,
    ),
]
"""The families, one row each (:func:`add` appends one)."""


def add(family: Family) -> Family:
    """Adds a row: ``family``'s ids are made by its makers from now on.

    Raises:
      ValueError: a row with this prefix exists, the prefix overlaps a row's, or the row has
        no maker.
    """
    if not family.jax and not family.host:
        raise ValueError(f"registry.add: {family.prefix!r} has neither a jax nor a host maker")
    for row in FAMILIES:
        if row.matches(family.prefix) or family.matches(row.prefix):
            raise ValueError(f"registry.add: {family.prefix!r} overlaps the family {row.prefix!r}")
    FAMILIES.append(family)
    return family


def remove(prefix: str) -> None:
    """Takes the row of ``prefix`` out (what a test that added one does when it ends)."""
    FAMILIES[:] = [row for row in FAMILIES if row.prefix != prefix]


def family_of(env_id: str) -> Family | None:
    """The row ``env_id`` belongs to, or None (a registered id, a ``module:attribute``)."""
    return next((row for row in FAMILIES if row.matches(env_id)), None)


def prefixes() -> tuple[str, ...]:
    """Every row's prefix: ids no user may register, and ``a:b`` ids that are not module
    paths."""
    return tuple(row.prefix for row in FAMILIES)


def host_prefixes() -> tuple[str, ...]:
    """The prefixes of the families with a host maker (the host kinds)."""
    return tuple(row.prefix for row in FAMILIES if row.host)


def preset_family(env_id: str) -> str | None:
    """The preset family of ``env_id`` (its row's ``presets``), or None."""
    row = family_of(env_id)
    return None if row is None else row.preset_family(env_id)


def extra_of(env_id: str) -> str | None:
    """The pip extra of ``env_id``'s family, or None."""
    row = family_of(env_id)
    return None if row is None else row.extra


def load(maker: str) -> Callable[..., Any]:
    """The function a row names, ``"module:function"``, imported now."""
    module, _, name = maker.partition(":")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "FAMILIES",
    "Family",
    "add",
    "family_of",
    "host_prefixes",
    "load",
    "prefixes",
    "preset_family",
    "remove",
]
