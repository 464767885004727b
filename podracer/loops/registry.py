"""The loops' registry, and the two calls that take a loop by name or as a :class:`Loop`.

:func:`get` finds a loop by name (``anakin``, ``sebulba``, or one added with :func:`register`;
a built-in one is imported on first use); :func:`loop_values` and :func:`sizes_of` translate
the loop-neutral sizes (:data:`~podracer.loops.base.SIZES`) into a loop's config fields.
:func:`build` makes the recipe and the loop's system (its :attr:`Loop.build_system`) in one call;
:func:`train` builds and runs it. A loop module's ``build`` and ``train`` are these with its
:class:`Loop` given (``functools.partial``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from podracer import parallel
from podracer.envs.options import EnvOptions
from podracer.errors import ConfigValueError
from podracer.loops.base import SIZES, Loop, Members, Periodic, RunHooks, RunResult, System
from podracer.loops.recipe import Recipe, make_recipe


def loop_values(values: Mapping[str, Any], loop: Loop | str, where: str = "loop_defaults"):
    """``values`` for ``loop``'s config, in its field names.

    ``values`` holds loop-neutral sizes (:data:`SIZES`) for every loop, and may hold a section
    per loop name, ``{"anakin": {...}}``, for that loop alone (which wins over the neutral
    ones); a section's keys are neutral sizes or the loop's own config fields. A loop without a
    mapping for a neutral size (``Loop.sizes``) gets none.

    Args:
      values: an agent's ``loop_defaults``, or the loop part of a preset.
      loop: a :class:`Loop` or its name.
      where: what ``values`` are, for errors.

    Returns:
      ``{config field: value}`` for ``loop``.

    Raises:
      ConfigValueError: a key that is neither a neutral size nor a loop's section.
    """
    loop = get(loop) if isinstance(loop, str) else loop
    out: dict[str, Any] = {}
    section: Mapping[str, Any] = {}
    for key, value in values.items():
        if key in SIZES:
            if key in loop.sizes:
                out[loop.sizes[key]] = value
        elif isinstance(value, Mapping):
            if key == loop.name:
                section = value
        else:
            raise ConfigValueError(
                f"{where}[{key!r}]={value!r} is not allowed: give a loop-neutral size "
                f"({', '.join(SIZES)}) or a mapping for one loop (a loop's name: "
                f"{', '.join(names())})"
            )
    for key, value in section.items():
        out[loop.sizes.get(key, key) if key in SIZES else key] = value
    return out


def sizes_of(loop: Loop | str, config: Any) -> dict[str, Any]:
    """The loop-neutral view of ``config``'s sizes (:data:`SIZES` the loop maps), e.g.
    ``{"envs": 16, "rollout_len": 128}`` of ``AnakinConfig(num_envs=16, rollout_len=128)``
    and of ``SebulbaConfig(envs_per_actor=16, rollout_len=128)``."""
    loop = get(loop) if isinstance(loop, str) else loop
    return {size: getattr(config, field) for size, field in loop.sizes.items()}


def loop_defaults(agent_spec, loop: Loop | str) -> dict[str, Any]:
    """The loop sizes ``agent_spec`` suits, for ``loop``'s config in its field names
    (:func:`loop_values` of ``agent_spec.loop_defaults``): what ``podracer train`` starts the
    loop's config from."""
    return loop_values(agent_spec.loop_defaults, loop, f"{agent_spec.name}: loop_defaults")


_BUILT_IN = {"anakin": "podracer.loops.anakin", "sebulba": "podracer.loops.sebulba"}


LOOPS: dict[str, Loop] = {}


def register(loop: Loop) -> Loop:
    """Adds ``loop`` under ``loop.name`` (``--arch NAME``); a different loop of that name is
    an error. Returns ``loop``."""
    if loop.name in LOOPS and LOOPS[loop.name] is not loop:
        raise ValueError(f"register: a loop named {loop.name!r} is already registered")
    LOOPS[loop.name] = loop
    return loop


def names() -> list[str]:
    """Every loop name: the built-in ones and the registered ones."""
    return list(dict.fromkeys([*_BUILT_IN, *LOOPS]))


def get(name: str) -> Loop:
    """The loop called ``name``; an unknown name is an error listing the loops.

    Args:
      name: ``"anakin"``, ``"sebulba"`` or the name of a loop added with :func:`register`.

    Returns:
      The registered :class:`Loop` (a built-in one is imported on first use).

    Raises:
      ConfigValueError: no loop has that name.
    """
    if name not in LOOPS and name in _BUILT_IN:
        register(importlib.import_module(_BUILT_IN[name]).LOOP)
    if name not in LOOPS:
        raise ConfigValueError(f"arch={name!r} is not allowed: choose one of {', '.join(names())}")
    return LOOPS[name]


def build(
    loop: Loop | str,
    env_id: str,
    agent_config: Any,
    config: Any,
    *,
    total_timesteps: int,
    agent_spec=None,
    seed: int = 0,
    devices: Sequence[jax.Device] | None = None,
    members: Callable[[Recipe], Members] | None = None,
    periodic: Callable[[Recipe], Periodic] | None = None,
    env_options: EnvOptions | None = None,
    **options: Any,
) -> System:
    """The recipe (:func:`make_recipe`) and the system of ``loop`` in one call.

    Without ``devices``, a CPU given one device per core
    (:func:`podracer.parallel.use_cpu_cores`) runs the members on them
    (``loop.place_members``).

    Args:
      loop: a :class:`Loop` or its registered name.
      env_id: the environment id.
      agent_config: the agent's config.
      config: the loop's config (:class:`~podracer.loops.anakin.AnakinConfig`,
        :class:`~podracer.loops.sebulba.SebulbaConfig`).
      total_timesteps: environment steps per member.
      agent_spec: the agent's :class:`~podracer.agents.AgentSpec` (default: the registered
        agent whose config ``agent_config`` is, :func:`podracer.agents.spec_of`).
      seed: the run seed.
      devices: the devices the system runs on (default: the loop's choice).
      members: made from the recipe: a sweep's or a population's members, its agent with
        traced hyper-parameters (``recipe.member``).
      periodic: made from the recipe: work done inside the program every ``interval``
        updates (a population's evaluation and tournament).
      env_options: the environment's parameters and observation mask
        (:class:`~podracer.envs.EnvOptions`; None: none), for the probe and every
        environment the system builds.
      **options: the loop's own ``build_system`` keywords (Anakin: ``env_params``, a whole
        params pytree that replaces the environment's ``default_params`` in training).

    Returns:
      The loop's :class:`System`: ``init(seed)``, ``run(state, ...)``, ``evaluator(...)``.
    """
    loop = get(loop) if isinstance(loop, str) else loop
    if agent_spec is None:
        from podracer import agents

        agent_spec = agents.spec_of(agent_config)
    recipe = make_recipe(
        loop,
        env_id,
        agent_spec,
        agent_config,
        config,
        total_timesteps=total_timesteps,
        seed=seed,
        devices=devices,
        env_options=env_options,
    )
    if devices is None and loop.place_members is not None and parallel.spread_members():
        config, devices = loop.place_members(config, recipe)
    return loop.build_system(
        recipe,
        config,
        devices=devices,
        members=None if members is None else members(recipe),
        periodic=None if periodic is None else periodic(recipe),
        **options,
    )


def build_members(
    loop: Loop | str,
    env_id: str,
    agent_config: Any,
    config: Any,
    num_members: int,
    *,
    members: Callable[[Recipe], Members],
    **kwargs: Any,
) -> System:
    """The system of ``num_members`` members as one program of ``loop`` (a sweep's grid, a
    population): :func:`build` with ``config`` given that many members (``loop.with_members``)
    and the ``members`` (with their hyper-parameters) made from the recipe; ``kwargs`` are
    :func:`build`'s (``total_timesteps``, ``agent_spec``, ``seed``, ``devices``, ``periodic``,
    ``env_options``, ...)."""
    loop = get(loop) if isinstance(loop, str) else loop
    config = loop.with_members(config, num_members)
    return build(loop, env_id, agent_config, config, members=members, **kwargs)


def train(
    loop: Loop | str,
    env_id: str,
    agent_config: Any,
    config: Any,
    *,
    seed: int = 0,
    total_timesteps: int,
    devices: Sequence[jax.Device] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    state: Any = None,
    start_update: int = 0,
    hooks: RunHooks | None = None,
    **options: Any,
) -> RunResult:
    """Builds the system of an agent's config (:func:`build`) and runs it for
    ``total_timesteps`` steps per member, without a run directory (:func:`podracer.runs.train`
    keeps one).

    Args:
      loop: a :class:`Loop` or its registered name.
      env_id: the environment id.
      agent_config: the agent's config; it chooses a registered agent
        (:func:`podracer.agents.spec_of`) unless ``agent_spec`` is given.
      config: the loop's config.
      seed: the run seed; member ``i`` of ``num_seeds`` runs seed ``seed + i``.
      total_timesteps: environment steps per member.
      devices: the devices to run on (default: the loop's choice).
      progress: called with every ``"train"`` record (:mod:`podracer.runs.logging`).
      state: a state to resume from (a checkpoint restored into ``system.init(seed)``);
        None starts afresh.
      start_update: the updates ``state`` holds.
      hooks: host work between calls (:class:`RunHooks`: checkpoints, evaluation).
      **options: :func:`build`'s ``agent_spec``, ``env_options``, ``members``, ``periodic`` and
        the loop's own.

    Returns:
      The :class:`RunResult` of the run.
    """
    system = build(
        loop,
        env_id,
        agent_config,
        config,
        total_timesteps=total_timesteps,
        seed=seed,
        devices=devices,
        **options,
    )
    return system.run(state, seed=seed, start_update=start_update, hooks=hooks, progress=progress)


def for_config(config: Any) -> Loop:
    """The registered loop whose config class ``config`` is."""
    for name in names():
        if get(name).config_cls is type(config):
            return get(name)
    raise TypeError(f"no registered loop takes a config of type {type(config).__name__}")
