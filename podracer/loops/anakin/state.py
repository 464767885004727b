"""Anakin's state and metrics: what the compiled program carries and returns, and where each
part lives on the ``(MEMBER_AXIS, DATA_AXIS)`` mesh (:func:`state_layout`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.sharding import PartitionSpec as P

from podracer.core.learner.skeleton import state_specs as learner_specs
from podracer.core.rollout import RolloutState
from podracer.parallel import (
    DATA_AXIS,
    MEMBER_AXIS,
)
from podracer.types import LearnerState


class AnakinState(NamedTuple):
    """The whole state of an Anakin run; every leaf has a leading seed (member) axis ``[S]``,
    split over the mesh's MEMBER_AXIS."""

    learner: LearnerState  # replicated over DATA_AXIS (a per-device agent state: split over it)
    rollout: RolloutState  # [S, num_envs, ...], split over DATA_AXIS along the env axis
    key: jax.Array  # [S] acting keys (each device folds in its index)
    hparams: dict[str, jax.Array]  # [S] each: the members' traced hyper-parameters
    periodic: Any = ()  # [S, ...]: the state of Periodic work (a population's lineage)


class UpdateMetrics(NamedTuple):
    """Per-update metrics ``[S, K]``, already reduced over devices."""

    learner: dict[str, jax.Array]  # the loss metrics of learner.update
    episodes: jax.Array  # i32: episodes that ended during the update's rollout
    return_sum: jax.Array  # f32: sum of their returns
    length_sum: jax.Array  # i32: sum of their lengths
    events: Any = ()  # Periodic.apply's events at the end of the call, and "due": bool []


def state_layout(agent, mesh: jax.sharding.Mesh) -> tuple[AnakinState, AnakinState]:
    """The :class:`AnakinState`'s partition specs and shardings on ``mesh``: members over
    ``MEMBER_AXIS``, environments (and per-device learner state) over ``DATA_AXIS``."""
    specs = AnakinState(
        learner=learner_specs(agent, P(MEMBER_AXIS), P(MEMBER_AXIS, DATA_AXIS)),
        rollout=P(MEMBER_AXIS, DATA_AXIS),
        key=P(MEMBER_AXIS),
        hparams=P(MEMBER_AXIS),
        periodic=P(MEMBER_AXIS),
    )
    shardings = jax.tree.map(
        lambda spec: jax.sharding.NamedSharding(mesh, spec),
        specs,
        is_leaf=lambda x: isinstance(x, P),
    )
    return specs, shardings
