"""The Sebulba loop's configuration."""

from __future__ import annotations

import dataclasses

from podracer.errors import ConfigError
from podracer.loops.layout import LearnerLayoutFields
from podracer.util.validation import check_choice, check_positive


@dataclasses.dataclass(frozen=True)
class SebulbaConfig(LearnerLayoutFields):
    """Sebulba's devices, threads and sizes."""

    actor_device_ids: tuple[int, ...] = (0,)
    """Local device ids that run the actors' inference."""
    learner_device_ids: tuple[int, ...] = (0,)
    """Local device ids that form the learner mesh (data parallel)."""
    actors_per_device: int = 1
    """Actor threads per actor device, each with its own environments."""
    envs_per_actor: int = 8
    """Environments each actor steps (split over the learner devices: a multiple of their count)."""
    async_batch_size: int = 0
    """envpool async mode: environments per recv (0: sync mode, every env each step). The actor
    acts on this many while envpool steps the others. That pays where a sync step leaves the
    cores idle while it waits for its slowest environment (environments that wait on another
    process or machine: 3x sync mode on 2 CPU cores). Where the CPU is the bottleneck it costs
    more than it hides (about 10% more CPU per step: half-size batches, twice the calls), so on
    2 CPU cores it is slower than sync mode on CartPole and on Atari (``benchmarks/README.md``)."""
    rollout_len: int = 32
    """Steps per environment in each trajectory."""
    queue_size: int = 2
    """Trajectories each actor may have waiting for the learner (back-pressure)."""
    deterministic: bool = False
    """Fixed policy lag of one update: rollout k acts with the params of update k-1, so a seed
    reproduces a run."""
    env_threads: int = 0
    """envpool worker threads per actor (0: envpool's default)."""
    num_seeds: int = 1
    """Members trained together in one program; member i uses seed ``seed + i``. Each actor
    steps ``envs_per_actor`` environments of every member (``num_seeds * envs_per_actor`` in
    all, each member's its own envpool with its own seeds), acts for all members in one call and
    the learner updates every member in one call (``docs/population.md``)."""
    member_loop: str = "vmap"
    """How the actors' act and the learner's update run the members: ``vmap`` (one batched
    program, the fast default) or ``map`` (``lax.map``, one after another: each member computes
    exactly what a run of its own computes, bit for bit)."""

    def __post_init__(self):
        check_positive(
            self, "actors_per_device", "envs_per_actor", "rollout_len", "queue_size", "num_seeds"
        )
        check_choice(self, "member_loop", ("vmap", "map"))
        self.check_layout()
        for field in ("actor_device_ids", "learner_device_ids"):
            ids = getattr(self, field)
            if not ids or any(i < 0 for i in ids) or len(set(ids)) != len(ids):
                raise ConfigError(
                    f"SebulbaConfig.{field}={ids!r} is not allowed: give one or more distinct "
                    "device ids >= 0"
                )
        if self.async_batch_size < 0 or self.async_batch_size > self.envs_per_actor:
            raise ConfigError(
                f"SebulbaConfig.async_batch_size={self.async_batch_size} is not allowed: it must "
                f"be 0 (sync) or between 1 and envs_per_actor={self.envs_per_actor}"
            )
        if self.async_batch_size and self.deterministic:
            raise ConfigError(
                f"SebulbaConfig.async_batch_size={self.async_batch_size} is not allowed with "
                "deterministic=True: async mode's arrival order is not reproducible; use 0"
            )
        if self.envs_per_actor % len(self.learner_device_ids):
            raise ConfigError(
                f"SebulbaConfig.envs_per_actor={self.envs_per_actor} is not allowed: it must be a "
                f"multiple of the number of learner devices ({len(self.learner_device_ids)})"
            )

    @property
    def num_actors(self) -> int:
        return len(self.actor_device_ids) * self.actors_per_device

    @property
    def steps_per_update(self) -> int:
        """Environment steps of this process's actors that go into one learner update (every
        process contributes as many: :func:`podracer.loops.sebulba.steps_per_update`)."""
        return self.num_actors * self.envs_per_actor * self.rollout_len
