"""Checkpoints of a run's whole state through orbax's ``CheckpointManager``.

A checkpoint is one step directory ``<run_dir>/checkpoints/<updates>/`` holding

- ``state``: the state pytree (Anakin's :class:`~podracer.anakin.AnakinState`, or Sebulba's
  :class:`~podracer.types.LearnerState`), typed PRNG keys stored as their raw ``uint32`` data;
- ``meta``: JSON — counters (updates, environment steps, wall time) and the run's identity.

The manager keeps the last ``keep`` checkpoints and, when evaluation returns are given, the best
one by ``eval_return``. Nothing is loaded with pickle: arrays come back through orbax's array
handlers into the shapes, dtypes and shardings of a template state.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

CHECKPOINT_DIR = "checkpoints"


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable or does not fit the run."""


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_raw(tree):
    """Typed PRNG keys replaced by their ``uint32`` key data (what orbax can store)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def from_raw(raw, template):
    """The inverse of :func:`to_raw`, reading the key implementations off ``template``."""
    return jax.tree.map(
        lambda r, t: jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t) else r,
        raw,
        template,
    )


def _abstract(tree):
    def leaf(x):
        sharding = getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)

    return jax.tree.map(leaf, to_raw(tree))


class Checkpointer:
    """Saves and restores ``(state, meta)`` under ``<run_dir>/checkpoints``."""

    def __init__(self, run_dir: str, *, keep: int = 3, keep_best: bool = True):
        if keep < 1:
            raise ValueError(f"Checkpointer: keep={keep} is not allowed: it must be >= 1")
        self.directory = os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR))
        policies: list[Any] = [checkpoint_managers.LatestN(n=keep)]
        if keep_best:
            policies.append(
                checkpoint_managers.BestN(
                    get_metric_fn=lambda metrics: metrics["eval_return"],
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies),
            enable_async_checkpointing=False,  # the next step donates the state's buffers
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )

    def steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def save(self, step: int, state, meta: dict[str, Any], eval_return: float | None = None):
        """Saves the checkpoint of ``step`` (updates done); a step already saved is kept."""
        if step in self._manager.all_steps():
            return
        metrics = None if eval_return is None else {"eval_return": float(eval_return)}
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(to_raw(state)),
                meta=ocp.args.JsonSave(meta),
            ),
            metrics=metrics,
            force=True,
        )
        self._manager.wait_until_finished()

    def restore(self, template, step: int | None = None):
        """``(state, meta)`` of ``step`` (default: the latest), shaped and placed like
        ``template``. An unreadable checkpoint raises :class:`CheckpointError` naming the
        checkpoints that remain."""
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        if step is None:
            step = steps[-1]
        if step not in steps:
            raise CheckpointError(
                f"no checkpoint of step {step} in {self.directory}: the steps saved are {steps}"
            )
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(_abstract(template)),
                    meta=ocp.args.JsonRestore(),
                ),
            )
        except Exception as error:  # orbax raises many kinds for a damaged directory
            earlier = [s for s in steps if s < step]
            hint = (
                f"resume from the previous one with --resume-step {earlier[-1]}"
                if earlier
                else "no earlier checkpoint remains"
            )
            raise CheckpointError(
                f"the checkpoint of step {step} in {self.directory} cannot be read "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                f"{hint}"
            ) from error
        return from_raw(restored.state, template), dict(restored.meta)

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
