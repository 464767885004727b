"""XLand-MiniGrid's grid worlds behind podracer's :class:`~podracer.types.Environment` contract.

Ids are ``xminigrid:<name>`` with ``<name>`` one of xminigrid's registry (:func:`names`: the
MiniGrid ports ``xminigrid:MiniGrid-Empty-5x5``, ``xminigrid:MiniGrid-DoorKey-8x8``, ... and the
XLand meta-RL grids ``xminigrid:XLand-MiniGrid-R1-9x9``, ...). Keyword arguments of
:func:`podracer.envs.make` are fields of xminigrid's ``EnvParams`` that ``xminigrid.make``
replaces (``max_steps``: the time limit; ``view_size``; an XLand ``ruleset``, ...).

``default_params`` is the ``EnvParams`` that ``xminigrid.make`` returns, and
:meth:`XMiniGridEnvironment.with_params` gives the environment other ones. An XLand grid's
default ruleset is xminigrid's empty one, whose goal is never achieved (its episodes only end
at the time limit): give it a ruleset (``params.replace(ruleset=...)``, from a benchmark of
``xminigrid.load_benchmark``, which downloads it) for a task. Most of its fields (sizes,
``max_steps``, ``view_size``) are static (``pytree_node=False``: fixed when a program is
traced, never batched); an XLand ruleset is an array leaf, which a batch may vary.

Observations are xminigrid's as it gives them: the agent's egocentric view, uint8
``[view_size, view_size, 2]`` (tile and colour codes; ``[7, 7, 2]`` for the MiniGrid ports but
the Memory ones' ``[3, 3, 2]``, ``[5, 5, 2]`` for XLand), read from the environment's reset.
Actions are discrete: i32 ``[]`` in ``{0, ..., 5}`` (forward, right, left, pick up, put down,
toggle); every action is always legal (no mask).

Termination and truncation come from xminigrid's ``TimeStep``: a step of type ``LAST`` with
``discount`` 0 (the goal of the task achieved: ``check_goal``) is ``terminated``; ``LAST`` with
``discount`` 1 (``step_num == max_steps`` without the goal) is ``truncated``. A goal reached on
the last allowed step is terminated (xminigrid gives discount 0 there). The reward is
xminigrid's: ``1 - 0.9 * step_num / max_steps`` at the goal, 0 otherwise.

Auto-reset is done here, at the step that ends an episode (xminigrid's own wrappers are not
used): ``step_key, reset_key = jax.random.split(key)``; xminigrid's step takes no key (and
draws no random numbers), and when the episode ended the state and observation are those of
``xminigrid_env.reset(params, reset_key)``, ``final_obs`` keeping the last observation of the
episode that ended. The state is xminigrid's ``TimeStep``.

``shard_map``: xminigrid's ``lax.cond`` s return a constant in one branch and the state in the
other (``core.actions``: an empty pocket after putting an object down, against the pocket kept),
which a ``shard_map`` that checks varying manual axes (JAX 0.10's default, ``check_vma=True``)
refuses ("cond branches must have equal output types"). The environment says
``check_vma = False``, so Anakin (and the sweeps and populations) run their ``shard_map``
unchecked, where the step gives the values of ``jit`` / ``vmap`` (tested); in a checked
``shard_map`` :meth:`XMiniGridEnvironment.step` raises a
:class:`~podracer.errors.ConfigValueError` that says so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.jax import base
from podracer.types import DiscreteActionSpec

PREFIX = "xminigrid:"

_LAST = 2  # xminigrid's StepType.LAST

KNOWN: tuple[str, ...] = (
    "XLand-MiniGrid-R1-9x9",
    "XLand-MiniGrid-R1-11x11",
    "XLand-MiniGrid-R1-13x13",
    "XLand-MiniGrid-R1-15x15",
    "XLand-MiniGrid-R1-17x17",
    "XLand-MiniGrid-R2-9x9",
    "XLand-MiniGrid-R2-11x11",
    "XLand-MiniGrid-R2-13x13",
    "XLand-MiniGrid-R2-15x15",
    "XLand-MiniGrid-R2-17x17",
    "XLand-MiniGrid-R4-9x9",
    "XLand-MiniGrid-R4-11x11",
    "XLand-MiniGrid-R4-13x13",
    "XLand-MiniGrid-R4-15x15",
    "XLand-MiniGrid-R4-17x17",
    "XLand-MiniGrid-R6-13x13",
    "XLand-MiniGrid-R6-17x17",
    "XLand-MiniGrid-R6-19x19",
    "XLand-MiniGrid-R9-16x16",
    "XLand-MiniGrid-R9-19x19",
    "XLand-MiniGrid-R9-25x25",
    "MiniGrid-BlockedUnlockPickUp",
    "MiniGrid-DoorKey-5x5",
    "MiniGrid-DoorKey-6x6",
    "MiniGrid-DoorKey-8x8",
    "MiniGrid-DoorKey-16x16",
    "MiniGrid-Empty-5x5",
    "MiniGrid-Empty-6x6",
    "MiniGrid-Empty-8x8",
    "MiniGrid-Empty-16x16",
    "MiniGrid-EmptyRandom-5x5",
    "MiniGrid-EmptyRandom-6x6",
    "MiniGrid-EmptyRandom-8x8",
    "MiniGrid-EmptyRandom-16x16",
    "MiniGrid-FourRooms",
    "MiniGrid-LockedRoom",
    "MiniGrid-MemoryS8",
    "MiniGrid-MemoryS16",
    "MiniGrid-MemoryS32",
    "MiniGrid-MemoryS64",
    "MiniGrid-MemoryS128",
    "MiniGrid-Playground",
    "MiniGrid-Unlock",
    "MiniGrid-UnlockPickUp",
)
"""Every name of xminigrid 0.9.3's registry, each made, reset and stepped by this adapter
(traced); the tests compare ``MiniGrid-EmptyRandom-5x5`` with xminigrid step by step."""


def names() -> tuple[str, ...]:
    """Every environment name of xminigrid's registry (``xminigrid`` must be installed)."""
    import xminigrid

    return tuple(xminigrid.registered_environments())


def make(env_id: str, **kwargs: Any) -> XMiniGridEnvironment:
    """``xminigrid:<name>``, with fields of its ``EnvParams`` as keyword arguments."""
    xminigrid, name = base.library_and_name(env_id, "xminigrid", PREFIX, names)
    env, params = xminigrid.make(name)
    return XMiniGridEnvironment(
        env_id, env, base.replace_fields(env_id, "xminigrid", params, kwargs)
    )


class XMiniGridEnvironment(base.Adapter):
    """An xminigrid environment, auto-resetting at the step that ends an episode."""

    check_vma = False  # xminigrid's lax.conds fail a checked shard_map (the module's docstring)
    library = "xminigrid"

    def _specs(self, params: Any) -> tuple[Any, DiscreteActionSpec]:
        first = jax.eval_shape(lambda key: self._env.reset(params, key), jax.random.key(0))
        action_spec = DiscreteActionSpec(int(self._env.num_actions(params)))
        return base.observation_spec_of(first.observation), action_spec

    def _reset(self, key, params):
        timestep = self._env.reset(params, key)
        return timestep, timestep.observation

    def step(self, key, state, action, params):
        _, reset_key = jax.random.split(key)  # the step key: xminigrid's step takes none
        stepped = self._traced(self._env.step, params, state, jnp.asarray(action, jnp.int32))
        last = stepped.step_type == _LAST
        terminated = last & (stepped.discount == 0)
        truncated = last & ~terminated
        fresh = self._env.reset(params, reset_key)
        return self._auto_reset(
            last,
            (fresh, fresh.observation),
            (stepped, stepped.observation),
            stepped.reward,
            terminated,
            truncated,
        )
