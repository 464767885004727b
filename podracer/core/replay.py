"""Replay's public names where they were first imported from: a face over
:mod:`podracer.core.learner.replay` (what an off-policy agent asks for, the replay body) and
:mod:`podracer.core.learner.buffers` (the buffers). New code imports from those modules."""

from podracer.core.learner.buffers import (
    PrioritisedBuffer,
    PrioritisedSample,
    PrioritisedState,
    ReplayFields,
    WindowBuffer,
    WindowState,
    break_streams,
    importance_weights,
    make_buffer,
    prioritised_buffer,
    stored,
    window_buffer,
    window_capacity,
)
from podracer.core.learner.replay import (
    NStepItem,
    Replay,
    ReplayBatch,
    check_replay,
    gradient_steps,
    n_step_items,
    n_step_targets,
    replay_body,
    replay_init,
)

__all__ = [
    "NStepItem",
    "PrioritisedBuffer",
    "PrioritisedSample",
    "PrioritisedState",
    "Replay",
    "ReplayBatch",
    "ReplayFields",
    "WindowBuffer",
    "WindowState",
    "break_streams",
    "check_replay",
    "gradient_steps",
    "importance_weights",
    "make_buffer",
    "n_step_items",
    "n_step_targets",
    "prioritised_buffer",
    "replay_body",
    "replay_init",
    "stored",
    "window_buffer",
    "window_capacity",
]
