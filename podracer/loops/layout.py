"""The learner's layout for a backend: where the loop layer (not ``core/``) looks at devices.

:class:`LearnerLayoutFields` holds the two config fields both loops take, with their validation;
:func:`learner_layout` chooses ``make_learner``'s ``unroll`` and ``microbatch_steps`` for the
devices the learner runs on. The arithmetic is the same up to rounding whatever they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax

from podracer.errors import ConfigError

IMAGE_TORSOS = ("nature_cnn", "impala_resnet")
"""Torsos whose learner XLA:CPU runs faster in gradient slices. Not the MinAtar CNN: one small
convolution, and PQN on MinAtar ran 16K steps/s in 32-step slices against 18-19K in one."""

LOOP_FRIENDLY_TORSOS = ("impala_resnet",)
"""Image torsos whose every convolution has stride 1, so that their gradients go through
:mod:`podracer.util.ops` and XLA:CPU runs them as fast inside the learner's loops as outside."""

CPU_IMAGE_MICROBATCH_STEPS = 32
"""Gradient slice size for the image torsos on XLA:CPU (``benchmarks/learner_unroll.py``)."""


@dataclasses.dataclass(frozen=True)
class LearnerLayoutFields:
    """The learner-layout fields of a loop config (both loops inherit them)."""

    learner_unroll: int = 0
    """``unroll`` of the learner's epoch and minibatch loops (0: automatic — unrolled for the
    Nature CNN on CPU, loops elsewhere, the IMPALA ResNet included)."""
    learner_microbatch: int = 0
    """Environment steps per gradient slice: each minibatch's gradient is accumulated over
    slices of at most this many steps (0: automatic — 32 for the image torsos on CPU, where it
    is faster, one slice elsewhere; a value >= the minibatch gives one slice)."""

    def check_layout(self) -> None:
        """Validates the layout fields (call it from ``__post_init__``)."""
        for field in ("learner_unroll", "learner_microbatch"):
            if getattr(self, field) < 0:
                raise ConfigError(
                    f"{type(self).__name__}.{field}={getattr(self, field)} is not allowed: it "
                    "must be >= 0 (0 chooses it from the backend and the torso)"
                )


class LearnerLayout(NamedTuple):
    """``make_learner``'s ``unroll`` and ``microbatch_steps``."""

    unroll: int | bool = 1
    microbatch_steps: int = 0


def learner_layout(
    agent_config: Any, config: LearnerLayoutFields, devices: Sequence[jax.Device] | None = None
) -> LearnerLayout:
    """The learner's layout for a loop ``config`` (its ``learner_unroll`` and
    ``learner_microbatch``; 0 means automatic) on ``devices`` (default: JAX's first device).

    Automatic, for an image torso on XLA:CPU: gradient slices of ``CPU_IMAGE_MICROBATCH_STEPS``
    steps, because XLA:CPU takes a convolution's gradient faster over small slices than over a
    whole minibatch; and the epoch, minibatch and slice loops kept as loops for the IMPALA ResNet,
    whose convolutions' gradients :mod:`podracer.util.ops` writes so that XLA:CPU runs them at full
    speed in loops, but unrolled (``unroll=True``, straight-line code) for the Nature CNN, whose
    strided convolutions keep JAX's gradient, which XLA:CPU runs tens of times slower inside a
    loop (``docs/design.md``; straight-line code costs minutes of compilation and gigabytes of
    memory). Elsewhere the loops and one slice per minibatch."""
    platform = (devices[0] if devices else jax.devices()[0]).platform
    torso = getattr(agent_config, "torso", "mlp")
    cpu_image = platform == "cpu" and torso in IMAGE_TORSOS
    straight_line = cpu_image and torso not in LOOP_FRIENDLY_TORSOS
    return LearnerLayout(
        unroll=config.learner_unroll or (True if straight_line else 1),
        microbatch_steps=config.learner_microbatch
        or (CPU_IMAGE_MICROBATCH_STEPS if cpu_image else 0),
    )
