"""The one learner core (``make_learner``), shared by Anakin, Sebulba and the population: a
small public face over its modules.

- :mod:`~podracer.core.learner.skeleton`: ``learner_skeleton`` (init, ``prepare``, a body,
  ``update_state``), the one gradient step (the all-reduce over the data axis, the optimizer)
  and the per-device layout of a :class:`~podracer.types.LearnerState`;
- :mod:`~podracer.core.learner.epochs`: the on-policy body, epochs of minibatches;
- :mod:`~podracer.core.learner.replay`: what an off-policy agent asks for (``Replay``) and the
  replay body;
- :mod:`~podracer.core.learner.buffers`: the replay buffers (items, priorities, windows);
- :mod:`~podracer.core.learner.build`: ``make_learner``, the skeleton around the body the agent
  asks for.
"""

from podracer.core.learner.buffers import ReplayFields, break_streams
from podracer.core.learner.build import make_learner
from podracer.core.learner.epochs import epochs
from podracer.core.learner.replay import (
    NStepItem,
    Replay,
    ReplayBatch,
    n_step_items,
    n_step_targets,
    replay_body,
)
from podracer.core.learner.skeleton import (
    AGENT_STATE_STREAM,
    BodyState,
    BodyTools,
    LearnerBody,
    learner_skeleton,
    make_body_tools,
    mark_varying,
    one_device,
    optimizer_step,
    per_device,
    pmean_gradients,
    state_specs,
)

__all__ = [
    "AGENT_STATE_STREAM",
    "BodyState",
    "BodyTools",
    "LearnerBody",
    "NStepItem",
    "Replay",
    "ReplayBatch",
    "ReplayFields",
    "break_streams",
    "epochs",
    "learner_skeleton",
    "make_body_tools",
    "make_learner",
    "mark_varying",
    "n_step_items",
    "n_step_targets",
    "one_device",
    "optimizer_step",
    "per_device",
    "pmean_gradients",
    "replay_body",
    "state_specs",
]
