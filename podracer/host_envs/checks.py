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
