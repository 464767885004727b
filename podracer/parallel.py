"""Meshes and shardings shared by every loop."""

from __future__ import annotations

from collections.abc import Sequence

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA_AXIS = "data"
"""The one name of the data-parallel axis, in every loop and in the learner core."""


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: every device of every process) named DATA_AXIS."""
    if devices is None:
        return jax.make_mesh((jax.device_count(),), (DATA_AXIS,))
    return Mesh(list(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def sharded(mesh: Mesh, axis: int) -> NamedSharding:
    """Split along array axis ``axis`` over DATA_AXIS, replicated elsewhere."""
    return NamedSharding(mesh, P(*([None] * axis), DATA_AXIS))
