"""NAVIX's grid worlds (MiniGrid in JAX) behind podracer's :class:`~podracer.types.Environment`.

Ids are ``navix:<name>`` with ``<name>`` one of NAVIX's registry (:func:`names`:
``navix:Navix-Empty-5x5-v0``, ``navix:Navix-DoorKey-8x8-v0``, ``navix:Navix-FourRooms-v0``, ...).
Keyword arguments of :func:`podracer.envs.make` go to ``navix.make``: ``max_steps`` (the time
limit, NAVIX's default 100), ``observation_fn`` (``navix.observations.symbolic`` by default;
``rgb``, ``categorical``, the first-person ones, ...), ``reward_fn``, ``termination_fn``, ...

Observations are what the ``observation_fn`` gives, as NAVIX gives it: by default the symbolic
view of the whole grid, uint8 ``[height, width, 3]`` (MiniGrid's object, colour and state
codes); ``observation_spec`` is read from the environment's reset. Actions are discrete:
i32 ``[]`` in ``{0, ..., len(action_set) - 1}`` (MiniGrid's 7 by default: left, right, forward,
pickup, drop, toggle, done); every action is always legal (no mask). NAVIX environments have no
parameters (everything is fixed when the environment is made): ``default_params`` is ``()``.

Termination and truncation come from NAVIX's ``Timestep.step_type``: ``TERMINATION`` (2, the
``termination_fn`` fired: the goal reached, lava, a ball hit, ...) is ``terminated``;
``TRUNCATION`` (1, ``t >= max_steps`` without a termination) is ``truncated``. NAVIX itself
gives ``TERMINATION`` when both happen at one step (``terminations.check_truncation``), so the
two are never both true. The reward is NAVIX's (``reward_fn``, less ``penality_coeff`` at a
termination).

Auto-reset: NAVIX's own ``step`` resets one step late (the step after an end returns the next
episode's first timestep, from the key kept in its state). The adapter resets at the same step
instead: it steps with NAVIX's transition (``Environment._step``: what ``step`` does on a
timestep that has not ended, without evaluating a reset beside it under ``vmap``) and, when the
episode ended, takes ``navix_env.reset(reset_key)`` (``step_key, reset_key =
jax.random.split(key)``; NAVIX's step takes no key: its own randomness, the dynamic obstacles'
moves, comes from the key in its state). The state is NAVIX's ``Timestep``, which never carries
an ended step type.

``shard_map``: NAVIX's ``lax.cond`` s return the state's events in one branch and fresh
constant events in the other (``actions._can_walk_there``: a wall hit), which a ``shard_map``
that checks varying manual axes (JAX 0.10's default, ``check_vma=True``) refuses ("cond branches
must have equal output types"). The environment says ``check_vma = False``, so Anakin (and the
sweeps and populations) run their ``shard_map`` unchecked, where the step gives the values of
``jit`` / ``vmap`` (tested); in a checked ``shard_map`` :meth:`NavixEnvironment.step` raises a
:class:`~podracer.errors.ConfigValueError` that says so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.jax import base
from podracer.types import DiscreteActionSpec

PREFIX = "navix:"

KNOWN: tuple[str, ...] = (
    "Navix-DistShift1-v0",
    "Navix-DistShift2-v0",
    "Navix-DoorKey-16x16-v0",
    "Navix-DoorKey-5x5-v0",
    "Navix-DoorKey-6x6-v0",
    "Navix-DoorKey-8x8-v0",
    "Navix-DoorKey-Random-16x16-v0",
    "Navix-DoorKey-Random-5x5-v0",
    "Navix-DoorKey-Random-6x6-v0",
    "Navix-DoorKey-Random-8x8-v0",
    "Navix-Dynamic-Obstacles-16x16-v0",
    "Navix-Dynamic-Obstacles-5x5-Random-v0",
    "Navix-Dynamic-Obstacles-5x5-v0",
    "Navix-Dynamic-Obstacles-6x6-Random-v0",
    "Navix-Dynamic-Obstacles-6x6-v0",
    "Navix-Dynamic-Obstacles-8x8-v0",
    "Navix-Empty-16x16-v0",
    "Navix-Empty-5x5-v0",
    "Navix-Empty-6x6-v0",
    "Navix-Empty-8x8-v0",
    "Navix-Empty-Random-16x16-v0",
    "Navix-Empty-Random-5x5-v0",
    "Navix-Empty-Random-6x6-v0",
    "Navix-Empty-Random-8x8-v0",
    "Navix-FourRooms-v0",
    "Navix-GoToDoor-5x5-v0",
    "Navix-GoToDoor-6x6-v0",
    "Navix-GoToDoor-8x8-v0",
    "Navix-KeyCorridorS3R1-v0",
    "Navix-KeyCorridorS3R2-v0",
    "Navix-KeyCorridorS3R3-v0",
    "Navix-KeyCorridorS4R3-v0",
    "Navix-KeyCorridorS5R3-v0",
    "Navix-KeyCorridorS6R3-v0",
    "Navix-LavaGapS5-v0",
    "Navix-LavaGapS6-v0",
    "Navix-LavaGapS7-v0",
    "Navix-SimpleCrossingS11N5-v0",
    "Navix-SimpleCrossingS9N1-v0",
    "Navix-SimpleCrossingS9N2-v0",
    "Navix-SimpleCrossingS9N3-v0",
)
"""Every name of NAVIX 0.7.4's registry, each made, reset and stepped by this adapter (traced);
the tests compare ``Navix-Dynamic-Obstacles-5x5-Random-v0`` with NAVIX step by step."""


def names() -> tuple[str, ...]:
    """Every environment name of NAVIX's registry (``navix`` must be installed)."""
    import navix

    return tuple(sorted(navix.registry()))


def make(env_id: str, **kwargs: Any) -> NavixEnvironment:
    """``navix:<name>`` with NAVIX's keyword arguments (``max_steps``, ``observation_fn``, ...)."""
    navix, name = base.library_and_name(env_id, "navix", PREFIX, names)
    return NavixEnvironment(env_id, navix.make(name, **kwargs))


class NavixEnvironment(base.Adapter):
    """A NAVIX environment, auto-resetting at the step that ends an episode."""

    check_vma = False  # NAVIX's lax.conds fail a checked shard_map (the module's docstring)
    library = "NAVIX"

    def _specs(self, params: Any) -> tuple[Any, DiscreteActionSpec]:
        first = jax.eval_shape(self._env.reset, jax.random.key(0))
        action_spec = DiscreteActionSpec(len(self._env.action_set))
        return base.observation_spec_of(first.observation), action_spec

    def _reset(self, key, params):
        timestep = self._env.reset(key)
        return timestep, timestep.observation

    def step(self, key, state, action, params):
        del params
        _, reset_key = jax.random.split(key)  # the step key: NAVIX's step takes none
        stepped = self._traced(self._env._step, state, jnp.asarray(action, jnp.int32))
        terminated = stepped.step_type == 2  # navix StepType.TERMINATION
        truncated = (stepped.step_type == 1) & ~terminated  # StepType.TRUNCATION
        fresh = self._env.reset(reset_key)
        return self._auto_reset(
            terminated | truncated,
            (fresh, fresh.observation),
            (stepped, stepped.observation),
            stepped.reward,
            terminated,
            truncated,
        )
