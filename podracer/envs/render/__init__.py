"""Drawing an environment's states: the frames of a video (``podracer eval --video``,
``--video-interval``).

:func:`renderer` finds how an environment draws, in this order:

1. the environment's own ``render(state, params) -> uint8 [H, W, 3]`` (one state; a user's
   environment renders by defining it, docs/environments.md "Watching");
2. its family's renderer, the ``render`` of its row in :mod:`podracer.envs.registry`:
   ``function(env, states, params) -> uint8 [T, H, W, 3]`` over ``T`` states stacked on a
   leading axis (one module per kind here: :mod:`.drawn` for catch and trading,
   :mod:`.gymnax`, :mod:`.mujoco` for brax and MuJoCo Playground, :mod:`.suites` for the
   other JAX suites);
3. otherwise :class:`NoRenderer`, one line.

Host environments (envpool, gymnasium) draw themselves: made with ``render=True``, their
``render()`` returns the frames of their environments (:class:`podracer.types.HostEnvironment`).

:func:`without_auto_reset` gives the environment whose ``step`` keeps an ended episode's state,
so that a video's last frame is the episode's end (its ``auto_reset`` attribute; an
environment without one keeps resetting, and its video ends a frame early).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from podracer.envs import registry
from podracer.errors import ConfigValueError

Renderer = Callable[[Any, Any], np.ndarray]
"""``render(states, params) -> uint8 [T, H, W, 3]``: ``T`` states (a leading axis) drawn."""


class NoRenderer(ConfigValueError):
    """The environment cannot draw its states (one line, naming it and what would)."""


def unwrapped(env: Any) -> Any:
    """The environment inside podracer's wrappers (``WithParams``, ``ObservationMask``,
    ``EpisodeStatistics``: each keeps it as ``_env``)."""
    while hasattr(env, "_env") and type(env).__module__.startswith("podracer.envs.wrappers"):
        env = env._env
    return env


def renderer(env: Any, env_id: str | None = None) -> Renderer:
    """How ``env`` (the environment of ``env_id``) draws ``T`` stacked states: its own
    ``render`` method, else its family's renderer.

    Raises:
      NoRenderer: neither exists (one line).
    """
    env_id = env_id or getattr(env, "id", type(env).__name__)
    inner = unwrapped(env)
    own = getattr(inner, "render", None)
    if callable(own):
        return _each(own)
    family = registry.family_of(env_id)
    if family is not None and family.render:
        draw = registry.load(family.render)
        return lambda states, params: _frames(draw(inner, states, params), env_id)
    where = f"the family {family.prefix!r}" if family is not None else "this environment"
    raise NoRenderer(
        f"{env_id} does not render: {where} has no renderer (give the environment a "
        "render(state, params) method that returns uint8 [H, W, 3]; docs/environments.md, "
        "'Watching', lists the families that render)"
    )


def _each(render: Callable[[Any, Any], Any]) -> Renderer:
    """A one-state ``render(state, params)`` as a renderer of ``T`` stacked states."""

    def frames(states, params):
        count = len(jax.tree.leaves(states)[0])
        drawn = [render(jax.tree.map(lambda x, t=t: x[t], states), params) for t in range(count)]
        return _frames(np.stack([np.asarray(f) for f in drawn]), "render")

    return frames


def _frames(frames: Any, where: str) -> np.ndarray:
    """``frames`` checked: uint8 ``[T, H, W, 3]`` (an RGBA frame loses its alpha)."""
    frames = np.asarray(frames)
    if frames.ndim == 4 and frames.shape[-1] == 4:
        frames = frames[..., :3]
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(
            f"{where}: a renderer returned {frames.dtype} {list(frames.shape)}; frames are "
            "uint8 [T, H, W, 3]"
        )
    return frames


def without_auto_reset(env: Any) -> tuple[Any, bool]:
    """``(env', kept)``: ``env`` with a copy of its innermost environment whose ``step`` keeps
    an ended episode's state (``auto_reset = False``), and whether it could (``kept``: the
    environment has an ``auto_reset`` attribute)."""
    inner = unwrapped(env)
    if not hasattr(inner, "auto_reset"):
        return env, False
    chain = []
    layer = env
    while layer is not inner:
        chain.append(layer)
        layer = layer._env
    copied = copy.copy(inner)
    copied.auto_reset = False
    for layer in reversed(chain):
        layer = copy.copy(layer)
        layer._env = copied
        copied = layer
    return copied, True


__all__ = ["NoRenderer", "Renderer", "renderer", "unwrapped", "without_auto_reset"]
