"""What both loops share and both import: the divergence checks, running members one program
(:func:`over_members`), the ``"train"`` record and the run's summary numbers.

Nothing here is jitted but one small reduction; ``podracer.loops.anakin`` and
``podracer.loops.sebulba`` import it, and it imports neither. The types both loops return and take
(:class:`~podracer.loops.base.RunResult`, :class:`~podracer.loops.base.RunHooks`,
:class:`~podracer.loops.base.Members`, :class:`~podracer.loops.base.Periodic`) are in
:mod:`podracer.loops.base`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.parallel import fetch


class Diverged(RuntimeError):
    """A learner metric or a parameter that is not finite: the run stops, and the state that
    holds it is not saved (:func:`check_finite`)."""


def check_finite(metrics: dict[str, Any], first_update: int) -> None:
    """Raises :class:`Diverged` naming the first update (``first_update + 1`` for the first
    entry), the metric, the member and the value when a learner metric is NaN or infinite.

    ``metrics``: name -> ``[members, updates]``, ``[updates]`` or a scalar (one update)."""
    first = None
    for name in sorted(metrics):
        values = np.asarray(metrics[name], dtype=np.float64)
        values = values.reshape(1, 1) if values.ndim == 0 else values.reshape(-1, values.shape[-1])
        members, updates = np.nonzero(~np.isfinite(values))
        if len(updates):
            i = int(np.argmin(updates))
            found = (int(updates[i]), name, int(members[i]), float(values[members[i], updates[i]]))
            first = found if first is None or found[0] < first[0] else first
    if first is not None:
        update, name, member, value = first
        who = f" (member {member} of {values.shape[0]})" if values.shape[0] > 1 else ""
        raise Diverged(
            f"the run diverged: {name} is {value} at update {first_update + update + 1}{who}"
        )


def params_finite(params) -> bool:
    """Whether every floating-point parameter is finite (one small compiled reduction; every
    process calls it together when the params span several)."""
    leaves = [x for x in jax.tree.leaves(params) if jnp.issubdtype(x.dtype, jnp.floating)]
    return not leaves or bool(fetch(_all_finite(leaves)))


@jax.jit
def _all_finite(leaves):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def over_members(fn: Callable, num_members: int, member_loop: str = "vmap") -> Callable:
    """``fn(*args)`` of one member over ``num_members`` members (every leaf of ``args`` with a
    leading member axis): vmapped, or one after another with ``member_loop="map"``
    (``lax.map``: each member computes what a run of its own computes, bit for bit); a single
    member without a batch dimension of size 1 in any op. Both loops run their members so."""

    def run(*args):
        if num_members == 1:
            out = fn(*jax.tree.map(lambda x: x[0], args))
            return jax.tree.map(lambda x: x[None], out)
        if member_loop == "map":
            return jax.lax.map(lambda a: fn(*a), args)
        return jax.vmap(fn)(*args)

    return run


def params_checksum(params) -> float:
    """The sum of every parameter (over every member), in float64: a cheap equivalence check.
    Members split over processes are gathered first (:func:`podracer.parallel.fetch`)."""
    return float(sum(np.sum(np.asarray(x, np.float64)) for x in jax.tree.leaves(fetch(params))))


def final_returns(history, steps_per_update: int, total_steps: int, fraction: float = 0.05):
    """Mean return per member ``[S]`` of the episodes that ended in the last ``fraction`` of the
    steps (NaN for a member with none)."""
    num_updates = history["episodes"].shape[1]
    end_step = steps_per_update * np.arange(1, num_updates + 1)
    last = end_step > (1.0 - fraction) * total_steps
    last[-1] = True
    episodes = history["episodes"][:, last].sum(axis=1)
    returns = history["return_sum"][:, last].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(episodes > 0, returns / np.maximum(episodes, 1), np.nan)


def nanmean_or_none(x) -> float | None:
    x = np.asarray(x, np.float64)
    return None if np.all(np.isnan(x)) else float(np.nanmean(x))


def summary(
    history: dict[str, np.ndarray],
    *,
    steps_per_update: int,
    num_updates: int,
    start_update: int,
    num_members: int,
    elapsed: float,
    compile_s: float,
    params: Any,
) -> dict[str, Any]:
    """The summary numbers every run reports (the final JSON line's common part)."""
    run_steps = (num_updates - start_update) * steps_per_update
    per_member = final_returns(history, steps_per_update, run_steps)
    return {
        "total_steps": num_updates * steps_per_update,
        "num_seeds": num_members,
        "num_updates": num_updates,
        "start_update": start_update,
        "sps": run_steps * num_members / elapsed,
        "compile_s": compile_s,
        "run_s": elapsed,
        "final_return": nanmean_or_none(per_member),
        "final_return_per_seed": [None if np.isnan(r) else float(r) for r in per_member],
        "params_checksum": params_checksum(params),
    }


def train_record(
    *,
    updates: int,
    num_updates: int,
    start_update: int,
    steps_per_update: int,
    num_members: int,
    start: float,
    returns: np.ndarray,
    episodes: np.ndarray,
    metrics: dict[str, float],
    **extra: Any,
) -> dict[str, Any]:
    """The ``"train"`` record (:mod:`podracer.runs.logging`, ``docs/metrics.md``): ``returns`` and
    ``episodes`` ``[members]`` are the sums over the episodes the record covers; ``metrics`` the
    learner's (means); ``extra`` the loop's own fields."""
    elapsed = time.perf_counter() - start
    total = episodes.sum()
    return {
        "kind": "train",
        "step": updates * steps_per_update,
        "updates": updates,
        "fraction": updates / num_updates,
        "sps": (updates - start_update) * steps_per_update * num_members / max(elapsed, 1e-9),
        "elapsed_s": elapsed,
        "episode_return": float(returns.sum() / total) if total else None,
        "episode_returns": [
            float(r / n) if n else None for r, n in zip(returns, episodes, strict=True)
        ],
        "episodes": int(total),
        **extra,
        **metrics,
    }
