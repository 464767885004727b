"""The loops' public face: the registry and the one interface every entry point goes through.

A loop is one module that exports a :class:`Loop`; :func:`get` finds it by name
(``anakin``, ``sebulba``, or one added with :func:`register`). Runs, sweeps, populations and the
command line only ever do this::

    loop = loops.get(name)
    recipe = make_recipe(loop, env_id, agent_spec, agent_config, loop_config,
                         env_options=..., ...)                                # once
    system = loop.build_system(recipe, loop_config, devices=..., members=..., periodic=...)
    state = system.init(seed)                  # or a checkpoint restored into it
    result = system.run(state, seed=..., start_update=..., hooks=..., progress=...)
    evaluate = system.evaluator(seed=..., episodes=..., greedy=...)

and never look inside a system. ``RunResult`` (:mod:`podracer.loops.base`) is the one
result type. A system builds every environment through the recipe's
:class:`~podracer.loops.recipe.EnvFactory` (the id and its :class:`~podracer.envs.EnvOptions`,
made once): ``recipe.make_env()``, the one JAX environment of the run, built once;
``recipe.envs.host(...)`` for a host one, each its own.

The contracts are in :mod:`podracer.loops.base`, the registry and :func:`build` and
:func:`train` in :mod:`podracer.loops.registry`, the recipe in :mod:`podracer.loops.recipe`.
"""

from podracer.loops.base import SIZES, Loop, Members, Periodic, RunHooks, RunResult, System
from podracer.loops.layout import LearnerLayout, LearnerLayoutFields, learner_layout
from podracer.loops.recipe import EnvFactory, Recipe, make_recipe
from podracer.loops.registry import (
    LOOPS,
    build,
    build_members,
    for_config,
    get,
    loop_defaults,
    loop_values,
    names,
    register,
    sizes_of,
    train,
)

__all__ = [
    "LOOPS",
    "SIZES",
    "EnvFactory",
    "LearnerLayout",
    "LearnerLayoutFields",
    "Loop",
    "Members",
    "Periodic",
    "Recipe",
    "RunHooks",
    "RunResult",
    "System",
    "build",
    "build_members",
    "for_config",
    "get",
    "learner_layout",
    "loop_defaults",
    "loop_values",
    "make_recipe",
    "names",
    "register",
    "sizes_of",
    "train",
]
