"""The host environments of several members as one: what a Sebulba actor steps when it runs
``num_seeds`` members (a sweep, a population).

Each member keeps its own host environment (its own envpool, seeded as that member's run alone
would seed it); :class:`MemberEnvironments` puts them side by side, member-major: environments
``[p * E, (p + 1) * E)`` are member ``p``'s. Sync mode sends every member's actions before it
receives any member's results (envpool's workers step the members side by side), or steps each
in turn (another kind of host environment);
async mode receives one batch from each member's environment (``recv`` gives ``P`` batches of
``batch_size`` ids, member-major) and answers each its own part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from podracer.types import HostEnvironment, TimeStep


def _concat(parts: Sequence[Any]) -> Any:
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *parts)


class MemberEnvironments:
    """``P`` host environments of ``E`` environments each, as one of ``P * E`` (member-major).

    They must agree in size, mode and specs (they are one factory's, with each member's seed).
    """

    def __init__(self, envs: Sequence[HostEnvironment]):
        if not envs:
            raise ValueError("MemberEnvironments: give one host environment per member")
        first = envs[0]
        for env in envs[1:]:
            if (env.num_envs, env.batch_size, env.is_async) != (
                first.num_envs,
                first.batch_size,
                first.is_async,
            ):
                raise ValueError("MemberEnvironments: the members' environments differ in size")
        self.envs = list(envs)
        self.members = len(envs)
        self.per_member = first.num_envs
        self.id = first.id
        self.num_envs = first.num_envs * self.members
        self.batch_size = first.batch_size * self.members
        self.is_async = first.is_async
        self.observation_spec = first.observation_spec
        self.action_spec = first.action_spec
        # environments whose step comes in two halves (envpool) step side by side
        self.overlapped = all(hasattr(env, "step_begin") for env in self.envs)

    def _split(self, actions: Any, size: int) -> list[Any]:
        return [
            jax.tree.map(lambda a, p=p: a[p * size : (p + 1) * size], actions)
            for p in range(self.members)
        ]

    def reset(self) -> TimeStep:
        return _concat([env.reset() for env in self.envs])

    def step(self, actions: Any) -> TimeStep:
        parts = self._split(np.asarray(actions), self.per_member)
        if self.overlapped:  # every member's envpool steps at once, on its own workers
            for env, part in zip(self.envs, parts, strict=True):
                env.step_begin(part)
            return _concat([env.step_end() for env in self.envs])
        return _concat([env.step(a) for env, a in zip(self.envs, parts, strict=True)])

    def async_reset(self) -> None:
        for env in self.envs:
            env.async_reset()

    def recv(self) -> tuple[TimeStep, np.ndarray]:
        steps, ids = [], []
        for p, env in enumerate(self.envs):
            ts, env_ids = env.recv()
            steps.append(ts)
            ids.append(np.asarray(env_ids) + p * self.per_member)
        return _concat(steps), np.concatenate(ids)

    def send(self, actions: Any, env_ids: np.ndarray) -> None:
        size = self.batch_size // self.members
        actions, env_ids = np.asarray(actions), np.asarray(env_ids)
        for p, env in enumerate(self.envs):
            part = slice(p * size, (p + 1) * size)
            env.send(actions[part], env_ids[part] - p * self.per_member)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def side_by_side(envs: Sequence[HostEnvironment]) -> HostEnvironment:
    """The members' host environments as one (a single member's as it is)."""
    return envs[0] if len(envs) == 1 else MemberEnvironments(envs)
