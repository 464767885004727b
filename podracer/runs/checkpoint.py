"""Checkpoints of a run's whole state through orbax's ``CheckpointManager``.

A checkpoint is one step directory ``<run_dir>/checkpoints/<updates>/`` holding

- ``state``: the loop's state pytree, whole (every loop's holds ``learner``, ``hparams`` and
  ``periodic``), typed PRNG keys stored as their raw ``uint32`` data;
- ``meta``: JSON — counters (updates, environment steps, wall time), the run's identity and the
  evaluation return when there was one.

The manager keeps the last ``keep`` checkpoints and, when evaluation returns are given, the best
one by ``eval_return`` (:meth:`Checkpointer.best_step`; a checkpoint saved without one, as on
Ctrl-C, is kept only while it is among the last ``keep``). Nothing is loaded with pickle: arrays
come back through orbax's array handlers into the shapes, dtypes and shardings of a template
state.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from podracer.errors import CheckpointError
from podracer.parallel import fetch
from podracer.runs.rundir import CHECKPOINT_DIR


def _orbax_without_tensorstore_leaks() -> None:
    """Keeps orbax from two TensorStore calls that leak on every save (TensorStore 0.1.86, the
    only release the registry has; ``benchmarks/memory_flat.py``: a run checkpointing twice a
    second grew 6.7% in 10 minutes, ``docs/design.md``):

    - ``tensorstore.experimental_collect_matching_metrics``, which orbax (0.12) calls before and
      after each array save and restore only to log a raw-throughput line; each call keeps
      about 3 KB (20,000 calls: +61 MB). With the count reported as 0 orbax skips that line.
    - ``tensorstore.KvStore.Spec(spec).to_json()``, which orbax calls for every array it saves,
      and twice more per save, only to resolve the spec of the checkpoint's local directory,
      ``{"driver": "file", "path": ...}``; each call keeps about 260 bytes. For that spec the
      JSON is the spec itself (``tests/test_runs.py`` checks it against TensorStore's), so
      orbax's module is given a ``tensorstore`` whose ``KvStore.Spec`` answers it without
      TensorStore; every other spec, and everything else, is TensorStore's own.

    Nothing is replaced when orbax's module or functions are not where this version keeps them.
    """
    try:
        from orbax.checkpoint._src.serialization import tensorstore_utils
    except ImportError:
        return
    if callable(getattr(tensorstore_utils, "get_tensorstore_raw_bytes", None)):
        tensorstore_utils.get_tensorstore_raw_bytes = _no_raw_bytes
    real = getattr(tensorstore_utils, "ts", None)
    if real is not None and hasattr(getattr(real, "KvStore", None), "Spec"):
        tensorstore_utils.ts = _TensorStore(real)


def _no_raw_bytes(direction=None) -> int:
    del direction
    return 0


def local_file_spec(spec) -> bool:
    """``spec`` is TensorStore's plain local-file kvstore spec: ``{"driver": "file", "path": P}``
    with ``P`` an absolute path (what orbax builds for a checkpoint directory)."""
    return (
        isinstance(spec, dict)
        and set(spec) == {"driver", "path"}
        and spec["driver"] == "file"
        and isinstance(spec["path"], str)
        and os.path.isabs(spec["path"])
    )


class _LocalFileSpec:
    """``KvStore.Spec(spec)`` of a local-file ``spec``: its ``to_json()`` is the spec, and
    :meth:`_KvStore.open` opens TensorStore's own spec of it."""

    def __init__(self, spec: dict):
        self.spec = dict(spec)

    def to_json(self) -> dict:
        return dict(self.spec)


class _KvStore:
    def __init__(self, real):
        self._real = real

    def Spec(self, spec, *args, **kwargs):
        if local_file_spec(spec) and not args and not kwargs:
            return _LocalFileSpec(spec)
        return self._real.Spec(spec, *args, **kwargs)

    def open(self, spec, *args, **kwargs):
        if isinstance(spec, _LocalFileSpec):
            spec = self._real.Spec(spec.spec)
        return self._real.open(spec, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _TensorStore:
    """The ``tensorstore`` module with :class:`_KvStore` as ``KvStore``."""

    def __init__(self, real):
        self._real = real
        self.KvStore = _KvStore(real.KvStore)

    def __getattr__(self, name):
        return getattr(self._real, name)


_orbax_without_tensorstore_leaks()


def _gist(error: BaseException, limit: int = 160) -> str:
    """The first sentence of a library's error, short: TensorStore's carry their whole spec."""
    text = str(error).splitlines()[0] if str(error) else ""
    text = text.split(" See full TensorStore details")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _os_error(error: BaseException) -> OSError | None:
    """The ``OSError`` (a full disk, a directory made read-only) behind ``error``, if any:
    orbax wraps it, sometimes more than once."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _is_empty(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and math.prod(np.shape(x)) == 0


def to_raw(tree):
    """Typed PRNG keys replaced by their ``uint32`` key data, and arrays of no elements (MJX's
    ``act`` of a model without activations, ``[0]``) by ``None``: what orbax can store."""

    def raw(x):
        if _is_empty(x):
            return None
        return jax.random.key_data(x) if _is_key(x) else x

    return jax.tree.map(raw, tree)


def from_raw(raw, template):
    """The inverse of :func:`to_raw`, reading the key implementations, and the shapes, dtypes
    and placements of the arrays of no elements, off ``template``."""

    def restore(t, r):
        if _is_empty(t):
            empty = np.zeros(np.shape(t), t.dtype)
            sharding = getattr(t, "sharding", None)
            return jax.device_put(empty, sharding) if sharding is not None else empty
        return jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t) else r

    return jax.tree.map(restore, template, raw)


def _replay_in_agent_slot(raw: Any) -> bool:
    """Whether a raw restored state keeps a replay buffer under ``agent_state.buffer`` (the
    layout of checkpoints written before ``LearnerState.replay``)."""

    def find(tree) -> bool:
        if isinstance(tree, dict):
            agent_state = tree.get("agent_state")
            if isinstance(agent_state, dict) and "buffer" in agent_state:
                return True
            return any(find(value) for value in tree.values())
        if isinstance(tree, list | tuple):
            return any(find(value) for value in tree)
        return False

    return find(raw)


def _abstract(tree):
    def leaf(x):
        sharding = getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)

    return jax.tree.map(leaf, to_raw(tree))


def _by_name(saved, abstract):
    """The leaves of ``saved`` (a checkpoint restored as nested dicts and lists) found by the
    names on the paths of ``abstract``'s leaves, shaped and placed like them; a leaf that is
    missing or of another shape raises ``ValueError``."""

    def find(path, spec):
        node = saved
        try:
            for key in path:
                if isinstance(key, jax.tree_util.SequenceKey):
                    node = node[key.idx]
                else:
                    node = node[getattr(key, "name", getattr(key, "key", None))]
        except (KeyError, IndexError, TypeError) as missing:
            raise ValueError(f"{jax.tree_util.keystr(path)}: not in the checkpoint") from missing
        value = np.asarray(fetch(node), spec.dtype)  # gathered when split over processes
        if value.shape != spec.shape:
            raise ValueError(f"{jax.tree_util.keystr(path)}: saved {value.shape}, not {spec.shape}")
        if spec.sharding is None:
            return value
        return jax.make_array_from_callback(spec.shape, spec.sharding, lambda index: value[index])

    return jax.tree_util.tree_map_with_path(find, abstract)


def _best(returns: dict[int, float], steps) -> int | None:
    """The step of the largest return among ``steps`` (the latest of equal ones)."""
    known = [step for step in steps if step in returns]
    return max(known, key=lambda step: (returns[step], step)) if known else None


class _LatestAndBest(checkpoint_managers.PreservationPolicy):
    """Keeps the last ``keep`` checkpoints and the one of the best evaluation return, read from
    the Checkpointer's ``returns`` (orbax's own metrics would be read back from every step
    when a manager opens the directory, and one damaged step would make it fail to open)."""

    def __init__(self, keep: int, returns: dict[int, float] | None):
        self.keep = keep
        self.returns = returns  # None: no best kept

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        steps = [info.step for info in checkpoints]
        latest = set(sorted(steps)[-self.keep :])
        best = None if self.returns is None else _best(self.returns, steps)
        return [step in latest or step == best for step in steps]


class Checkpointer:
    """Saves and restores ``(state, meta)`` under ``<run_dir>/checkpoints``.

    ``meta`` of a checkpoint saved with an ``eval_return`` holds it too; the returns of the
    checkpoints already in the directory are read from their ``meta`` when it is opened, so a
    resumed run keeps the best one.
    """

    def __init__(self, run_dir: str, *, keep: int = 3, keep_best: bool = True):
        if keep < 1:
            raise ValueError(f"Checkpointer: keep={keep} is not allowed: it must be >= 1")
        self.directory = os.path.abspath(os.path.join(run_dir, CHECKPOINT_DIR))
        self._returns: dict[int, float] = {}
        options = ocp.CheckpointManagerOptions(
            preservation_policy=_LatestAndBest(keep, self._returns if keep_best else None),
            enable_async_checkpointing=False,  # the next step donates the state's buffers
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )
        for step in self.steps():
            try:
                meta = self._manager.restore(
                    step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
                ).meta
            except Exception:  # a damaged step: restore() reports it when it is asked for
                continue
            if meta and meta.get("eval_return") is not None:
                self._returns[step] = float(meta["eval_return"])

    def steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def eval_returns(self) -> dict[int, float]:
        """``{step: eval_return}`` of the saved steps that were saved with one."""
        return {step: self._returns[step] for step in self.steps() if step in self._returns}

    def best_step(self) -> int | None:
        """The saved step with the largest evaluation return (the latest of equal ones); None
        when no saved step has one (a run without ``--eval-interval``)."""
        return _best(self._returns, self.steps())

    def save(self, step: int, state, meta: dict[str, Any], eval_return: float | None = None):
        """Saves the checkpoint of ``step`` (updates done), with ``eval_return`` in its meta
        when given; a step already saved is kept."""
        if step in self._manager.all_steps():
            return
        if eval_return is not None:
            meta = {**meta, "eval_return": float(eval_return)}
            self._returns[step] = float(eval_return)  # before the save prunes older steps
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(to_raw(state)),
                    meta=ocp.args.JsonSave(meta),
                ),
                force=True,
            )
        except Exception as error:
            cause = _os_error(error)
            if cause is None:
                raise
            latest = [s for s in self.steps() if s != step]
            kept = f"update {latest[-1]}" if latest else "none"
            raise CheckpointError(
                f"the checkpoint of update {step} cannot be written to {self.directory} "
                f"({cause}); the latest complete checkpoint: {kept}"
            ) from error
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
            try:
                restored = self._manager.restore(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(_abstract(template)),
                        meta=ocp.args.JsonRestore(),
                    ),
                )
                state = restored.state
            except ValueError as mismatch:
                if "tree structures do not match" not in str(mismatch):
                    raise
                # Saved before a container of the state gained an empty field (the agent's
                # slot, the actor state): the same leaves under the same names.
                restored = self._manager.restore(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()
                    ),
                )
                try:
                    state = _by_name(restored.state, _abstract(template))
                except (KeyError, IndexError, TypeError, ValueError) as missing:
                    meta = restored.meta or {}
                    saved_by = (
                        f"saved by --agent {meta['agent']} on --env {meta['env']}; "
                        if "agent" in meta and "env" in meta
                        else ""
                    )
                    if _replay_in_agent_slot(restored.state):
                        raise CheckpointError(
                            f"the checkpoint of step {step} in {self.directory} holds its "
                            "replay buffer in the agent's slot, where podracer kept it before "
                            "the buffer moved to LearnerState.replay; it cannot be restored "
                            "by this version (train the run again, or resume it with the "
                            "version that wrote it)"
                        ) from mismatch
                    raise CheckpointError(
                        f"the checkpoint of step {step} in {self.directory} does not fit this "
                        f"run: its state differs from what the run's config builds ({saved_by}"
                        f"{missing})"
                    ) from mismatch
        except CheckpointError:
            raise
        except Exception as error:  # orbax raises many kinds for a damaged directory
            earlier = [s for s in steps if s < step]
            hint = (
                f"resume from the previous one with --resume-step {earlier[-1]}"
                if earlier
                else "no earlier checkpoint remains"
            )
            raise CheckpointError(
                f"the checkpoint of step {step} in {self.directory} cannot be read "
                f"({type(error).__name__}: {_gist(error)}); "
                f"{hint}"
            ) from error
        return from_raw(state, template), dict(restored.meta)

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
