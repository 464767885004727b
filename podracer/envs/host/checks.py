"""Checks every host environment makes of what an actor gives it."""

from __future__ import annotations

from typing import Any

import numpy as np


def discrete_actions(env_id: str, actions: Any, n: int, num_actions: int) -> np.ndarray:
    """``actions`` as an integer array ``[n]`` with every entry in ``0..num_actions - 1``; a
    wrong shape, dtype or value is a ``ValueError`` naming the environment and what it takes."""
    actions = np.asarray(actions)
    if actions.shape != (n,):
        raise ValueError(
            f"{env_id}: actions of shape {actions.shape} are not allowed: give one action per "
            f"environment, shape ({n},)"
        )
    if actions.dtype.kind not in "iu":
        raise ValueError(
            f"{env_id}: actions of dtype {actions.dtype} are not allowed: give integers"
        )
    if n and (actions.min() < 0 or actions.max() >= num_actions):
        raise ValueError(
            f"{env_id}: actions {actions} are not allowed: each must be in 0..{num_actions - 1}"
        )
    return actions


def continuous_actions(env_id: str, actions: Any, n: int, spec: Any) -> np.ndarray:
    """``actions`` as a ``spec.dtype`` (f32) array ``[n, *spec.shape]`` of finite floats, each
    entry clipped to ``[spec.low, spec.high]`` (policies may sample outside the bounds; the
    environment clips, as envpool and most gymnasium tasks do). ``spec`` is a
    :class:`~podracer.types.BoundedActionSpec`; a wrong shape, a dtype that is not a float or a
    value that is not finite is a ``ValueError`` naming the environment and what it takes."""
    actions = np.asarray(actions)
    shape = (n, *spec.shape)
    if actions.shape != shape:
        raise ValueError(
            f"{env_id}: actions of shape {actions.shape} are not allowed: give one action of "
            f"shape {tuple(spec.shape)} per environment, shape {shape}"
        )
    if actions.dtype.kind != "f":
        raise ValueError(
            f"{env_id}: actions of dtype {actions.dtype} are not allowed: give floats (continuous "
            f"actions of shape {tuple(spec.shape)} in [{_bounds(spec)}])"
        )
    if not np.isfinite(actions).all():
        raise ValueError(
            f"{env_id}: actions that are not finite (NaN or infinite) are not allowed: found "
            f"{np.count_nonzero(~np.isfinite(actions))} in an array of shape {shape}"
        )
    dtype = np.dtype(spec.dtype)
    with np.errstate(over="ignore"):  # f64 beyond f32's range: inf, clipped to the bound
        actions = actions.astype(dtype, copy=False)
        low, high = np.asarray(spec.low, dtype), np.asarray(spec.high, dtype)
    return np.clip(actions, low, high)


def _bounds(spec: Any) -> str:
    low, high = np.asarray(spec.low), np.asarray(spec.high)
    if low.size and np.all(low == low.flat[0]) and np.all(high == high.flat[0]):
        return f"{low.flat[0]:g}, {high.flat[0]:g}"
    return f"{low.tolist()}, {high.tolist()}"


def check_drawable(env_id: str, render: bool, started: bool) -> None:
    """What a host environment's ``render()`` checks first: it was made with ``render=True``
    (else a one-line :class:`~podracer.envs.render.NoRenderer`) and has been reset."""
    if not render:
        from podracer.envs.render import NoRenderer

        raise NoRenderer(
            f"{env_id} was made without render=True: make it with render=True "
            "(podracer.envs.host.make(env_id, num_envs=..., render=True)) to draw it"
        )
    if not started:
        raise RuntimeError(f"{env_id}: call reset() before render()")
