"""The Anakin loop's configuration."""

from __future__ import annotations

import dataclasses

from podracer.errors import ConfigError
from podracer.loops.layout import LearnerLayoutFields
from podracer.util.validation import check_choice, check_positive


@dataclasses.dataclass(frozen=True)
class AnakinConfig(LearnerLayoutFields):
    """The Anakin loop's sizes. ``num_envs`` counts every device's environments together."""

    num_envs: int = 4
    """Environments per seed, over all devices (a multiple of the device count)."""
    rollout_len: int = 128
    """Steps per environment between two updates."""
    num_seeds: int = 1
    """Independent runs vmapped in one program; run i uses seed ``seed + i``."""
    updates_per_call: int = 0
    """Updates per call of the compiled step (0: about 20 calls per run, and at most 2^20
    environment steps per call, so Ctrl-C and SIGTERM, which act between calls, act within
    seconds)."""
    rollout_unroll: int = 1
    """``unroll`` of the rollout's time scan (1 is fastest on XLA:CPU: ``docs/design.md``)."""
    member_shards: int = 1
    """Devices the seed (member) axis is split over; each group of ``devices / member_shards``
    devices splits its members' environments. Must divide ``num_seeds`` and the device count."""
    member_loop: str = "vmap"
    """How a device runs its seeds (members) inside the compiled step: ``vmap`` (one batched
    program, the fast default) or ``map`` (``lax.map``, one after another: each member computes
    exactly what a run of its own computes, bit for bit, at the cost of the batching)."""

    def __post_init__(self):
        check_positive(self, "num_envs", "rollout_len", "num_seeds")
        check_choice(self, "member_loop", ("vmap", "map"))
        if self.updates_per_call < 0:
            raise ConfigError(
                f"AnakinConfig.updates_per_call={self.updates_per_call} is not allowed: "
                "it must be >= 0 (0 chooses it from the run length)"
            )
        check_positive(self, "rollout_unroll", "member_shards")
        self.check_layout()

    @property
    def steps_per_update(self) -> int:
        """Environment steps of one seed between two updates."""
        return self.num_envs * self.rollout_len
