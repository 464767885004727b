"""Meshes and shardings: the data and member axes, the CPU cores as devices, members' placement,
and the arrays that cross from hosts to devices. Pure, except :func:`use_cpu_cores`, which sets
XLA's flag before JAX starts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from podracer.errors import ConfigError, ConfigValueError

DATA_AXIS = "data"
"""The one name of the data-parallel axis, in every loop and in the learner core."""

MEMBER_AXIS = "member"
"""The mesh axis that Anakin's members (vmapped seeds, sweep or population members) are split
over; each member's environments are split over :data:`DATA_AXIS`."""

# Meshes use automatic sharding (``jax.make_mesh`` defaults to explicit axes): inside the loops
# ``shard_map`` makes every axis manual, and outside it (a population's tournament, evaluation
# over members) XLA propagates the shardings; a mesh built from a device list is the same.
AUTO = jax.sharding.AxisType.Auto

# --- meshes and global arrays (pure) ---------------------------------------------------------


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: every device of every process) named DATA_AXIS."""
    if devices is None:
        return jax.make_mesh((jax.device_count(),), (DATA_AXIS,), axis_types=(AUTO,))
    return Mesh(list(devices), (DATA_AXIS,))


def member_mesh(devices: Sequence[jax.Device] | None = None, member_shards: int = 1) -> Mesh:
    """A 2-D mesh ``(MEMBER_AXIS, DATA_AXIS)`` of shape ``(member_shards, D / member_shards)``
    over ``devices`` (default: every device of every process).

    Members are split over the first axis; each group of ``D / member_shards`` devices holds
    whole members and splits their environments (and averages their gradients) over the second.
    With ``member_shards=1`` it is :func:`data_mesh` with a leading axis of size one.
    """
    count = jax.device_count() if devices is None else len(devices)
    if member_shards < 1 or count % member_shards:
        raise ConfigError(
            f"AnakinConfig.member_shards={member_shards} is not allowed on {count} devices: it "
            f"must divide the device count ({count})"
        )
    shape = (member_shards, count // member_shards)
    if devices is None:
        return jax.make_mesh(shape, (MEMBER_AXIS, DATA_AXIS), axis_types=(AUTO, AUTO))
    return Mesh(np.asarray(list(devices), dtype=object).reshape(shape), (MEMBER_AXIS, DATA_AXIS))


def fetch(tree):
    """NumPy copies of a pytree of arrays on every process; an array split over several
    processes (a population's members over hosts) is gathered first. A collective when it
    gathers: every process must call it in the same order."""

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree.map(one, tree)


# --- a CPU's cores for members -----------------------------------------------------------------

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
_cpu_cores_set = 0  # the device count use_cpu_cores set, 0 when it set none


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def use_cpu_cores(count: int | None = None) -> int:
    """Host (edge). Gives XLA:CPU one device per core (``count``, default :func:`usable_cores`)
    by adding ``--xla_force_host_platform_device_count`` to ``XLA_FLAGS``, so that
    :func:`spread_members` can run members side by side: XLA:CPU runs one device's program on
    one core, so vmapped members on one device do not use the others.

    It acts only before JAX has started its backends (call it first, before any JAX
    computation) and only when ``XLA_FLAGS`` does not set the count already (the user's choice
    wins, ``=1`` included). It changes nothing on GPUs and TPUs, whose CPU devices are not used
    for training. Returns the count it set, or 0 when it set none. ``podracer train`` and
    ``podracer sweep`` call it for single-process runs.
    """
    global _cpu_cores_set
    from jax._src import xla_bridge  # backends_are_initialized has no public name

    flags = os.environ.get("XLA_FLAGS", "")
    count = usable_cores() if count is None else count
    if _DEVICE_COUNT_FLAG in flags or xla_bridge.backends_are_initialized() or count < 2:
        return 0
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()
    _cpu_cores_set = count
    return count


def member_placement(
    num_members: int, devices: Sequence[jax.Device] | None = None
) -> tuple[list[jax.Device], int]:
    """``(devices, member_shards)`` that run ``num_members`` members on as many of ``devices``
    (default: this process's) as divide them, one group of members per device and no device
    splitting a member's environments: the largest divisor ``D`` of ``num_members`` not above
    the device count gives ``(devices[:D], D)``. One member gets one device."""
    devices = list(jax.local_devices() if devices is None else devices)
    shards = max(d for d in range(1, min(num_members, len(devices)) + 1) if num_members % d == 0)
    return devices[:shards], shards


MIN_STEPS_PER_CORE = 2048
"""Environment steps per update a CPU core must get before one member's environments are split
over cores: below it the all-reduces cost more than the halved work saves. Measured with PPO on
CartPole (128-step rollouts, 2 cores, ``benchmarks/README.md``, "peers.py"): 8 environments (512
steps a core) ran 16.0 ms an update on one core and 19.8 on two; 16 (1,024 a core) 43.5 against
33.4; 32 (2,048) 83.2 against 68.3; 1,024 environments 2.45 s against 1.15. Set above 1,024
because at 1,024 a core the Podracer paper's Catch demo (Q(lambda), 128 envs x 16 steps, a
light update) ran slower split in whole runs (Q(lambda) on CartPole 103K steps/s against 207K),
measured while another job used one of the cores: a member split over both cores waits for the
busier one at every all-reduce, which a member on one core does not."""


def cores_per_member(
    num_envs: int, steps_per_update: int, spare: int, min_steps: int = MIN_STEPS_PER_CORE
) -> int:
    """How many CPU devices one member's environments are split over when ``spare`` devices
    are free for each member: the largest divisor ``d`` of ``num_envs`` with ``d <= spare`` and
    at least ``min_steps`` of the member's ``steps_per_update`` on each; 1 when none is."""
    fits = [
        d
        for d in range(1, max(1, spare) + 1)
        if num_envs % d == 0 and steps_per_update // d >= min_steps
    ]
    return max(fits, default=1)


def spread_members() -> bool:
    """True when :func:`use_cpu_cores` gave this process its CPU devices and they train: a loop
    whose members run as one program then places them with :func:`member_placement`."""
    return (
        _cpu_cores_set > 1
        and jax.process_count() == 1
        and jax.default_backend() == "cpu"
        and jax.local_device_count() == _cpu_cores_set
    )


def devices_by_local_ids(local_ids: Sequence[int]) -> list[jax.Device]:
    """The devices with local index ``local_ids`` on every process, process by process.

    Every process runs the same configuration, so ``learner_device_ids=(1,)`` names device 1 of
    each host; the list is what a learner mesh over all hosts is built from. With one process it
    is ``[jax.local_devices()[i] for i in local_ids]``.
    """
    devices = []
    for process in range(jax.process_count()):
        local = jax.local_devices(process_index=process)
        bad = [i for i in local_ids if not 0 <= i < len(local)]
        if bad:
            raise ConfigValueError(
                f"local device ids {bad} do not exist: process {process} has {len(local)} "
                f"devices (ids 0..{len(local) - 1})"
            )
        devices.extend(local[i] for i in local_ids)
    return devices


def global_array(sharding: NamedSharding, local_data: Any) -> Any:
    """A global ``jax.Array`` (pytree of them) from every process's slice of the data.

    ``local_data`` holds this process's rows along the sharded axes (for
    ``P(None, DATA_AXIS)``: ``[T, B_local, ...]``); the global array concatenates the processes'
    slices in process order (``[T, B_local * num_processes, ...]`` when every process holds the
    same number of mesh devices). Not a collective: each process only places its own shards.
    """
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local_data
    )


def local_copy(x: jax.Array) -> jax.Array:
    """One addressable shard of a replicated array: a single-device array on this process."""
    return x.addressable_shards[0].data
