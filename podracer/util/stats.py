"""Results over seeds and population members: IQM, bootstrap confidence intervals, tables.

Pure NumPy, host side. The aggregate follows Agarwal et al., 2021, "Deep reinforcement learning
at the edge of the statistical precipice", https://arxiv.org/abs/2108.13411 (rliable): report
the interquartile mean (IQM) of the runs with a percentile-bootstrap confidence interval rather
than a mean and a standard deviation over a handful of seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SUMMARY_KEYS = ("n", "mean", "std", "median", "iqm", "iqm_ci_low", "iqm_ci_high", "min", "max")


def _as_samples(x: Any, name: str, func: str) -> np.ndarray:
    """``x`` as a non-empty 1-D float array (any shape is flattened)."""
    array = np.asarray(x, dtype=np.float64).reshape(-1)
    if array.size == 0:
        raise ValueError(f"{func}: {name} is empty: give at least one value")
    return array


def iqm(x: Any, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean: the mean of the middle 50% of the values.

    With ``n`` values sorted, ``k = int(0.25 * n)`` values are dropped from each end and the
    remaining ``n - 2k`` averaged — exactly ``scipy.stats.trim_mean(x, 0.25)``, the statistic
    rliable reports. ``[1, ..., 8]`` keeps ``3, 4, 5, 6`` (4.5); five values keep the middle three;
    fewer than four values keep them all.

    Args:
      x: values; flattened when ``axis`` is None.
      axis: the axis to reduce (the others are kept), e.g. ``-1`` for ``[R, n]`` resamples.

    Returns:
      a float when ``axis`` is None, else an array without ``axis``. NaNs are not dropped (they
      sort last and so propagate like ``trim_mean``'s); :func:`summarize` drops them first.
    """
    array = np.asarray(x, dtype=np.float64)
    if axis is None:
        array, axis = array.reshape(-1), 0
    n = array.shape[axis]
    if n == 0:
        raise ValueError(f"iqm: x has no values along axis {axis} (shape {array.shape})")
    cut = int(0.25 * n)
    middle = np.take(np.sort(array, axis=axis), np.arange(cut, n - cut), axis=axis)
    result = middle.mean(axis=axis)
    return float(result) if result.ndim == 0 else result


def bootstrap_ci(
    x: Any,
    statistic: Callable[..., Any] = iqm,
    *,
    num_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of ``statistic`` over the samples ``x``.

    One resample matrix ``idx [num_resamples, n]`` of indices drawn with replacement; the
    statistic of every resample ``statistic(x[idx], axis=-1) -> [num_resamples]``; the interval
    is that distribution's ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles
    (Efron & Tibshirani, 1993; the interval rliable reports, arXiv 2108.13411).

    Args:
      x: the samples (e.g. one final return per seed); flattened.
      statistic: a reduction taking ``axis=-1`` (:func:`iqm`, ``np.mean``, ``np.median``, ...).
      num_resamples: bootstrap resamples (memory is ``num_resamples * n`` floats).
      confidence: coverage of the interval, in ``(0, 1)``.
      seed: seed of the resampling; the same seed gives the same interval.

    Returns:
      ``(low, high)`` as floats.
    """
    samples = _as_samples(x, "x", "bootstrap_ci")
    if not 0.0 < confidence < 1.0:
        raise ValueError(
            f"bootstrap_ci: confidence={confidence!r} is not allowed: it must be in (0, 1), "
            "e.g. 0.95"
        )
    if int(num_resamples) != num_resamples or num_resamples < 1:
        raise ValueError(
            f"bootstrap_ci: num_resamples={num_resamples!r} is not allowed: it must be an "
            "integer >= 1"
        )
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, samples.size, size=(int(num_resamples), samples.size))
    stats = np.asarray(statistic(samples[idx], axis=-1), dtype=np.float64)
    if stats.shape != (int(num_resamples),):
        raise ValueError(
            f"bootstrap_ci: statistic={getattr(statistic, '__name__', statistic)!r} returned "
            f"shape {stats.shape} for resamples of shape {idx.shape}: it must reduce axis=-1 to "
            f"shape ({int(num_resamples)},)"
        )
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


def summarize(values: Any, *, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Summary of values over seeds or members, NaNs dropped.

    Keys (:data:`SUMMARY_KEYS`): ``n`` (values left after dropping NaNs), ``mean``, ``std``
    (sample standard deviation, ``ddof=1``; None for fewer than two values), ``median``, ``iqm``,
    ``iqm_ci_low`` / ``iqm_ci_high`` (:func:`bootstrap_ci` of the IQM), ``min``, ``max``. With no
    value left, ``n`` is 0 and every other key is None.
    """
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    array = array[~np.isnan(array)]
    n = int(array.size)
    if n == 0:
        return {"n": 0, **{key: None for key in SUMMARY_KEYS[1:]}}
    low, high = bootstrap_ci(array, iqm, confidence=confidence, seed=seed)
    return {
        "n": n,
        "mean": float(array.mean()),
        "std": float(array.std(ddof=1)) if n > 1 else None,
        "median": float(np.median(array)),
        "iqm": iqm(array),
        "iqm_ci_low": low,
        "iqm_ci_high": high,
        "min": float(array.min()),
        "max": float(array.max()),
    }


def _cell(value: Any) -> tuple[str, bool]:
    """A table cell's text and whether it is a number (right-aligned)."""
    if value is None:
        return "-", False
    if isinstance(value, bool | np.bool_):
        return str(bool(value)), False
    if isinstance(value, int | np.integer):
        return str(int(value)), True
    if isinstance(value, float | np.floating):
        value = float(value)
        return ("nan" if math.isnan(value) else f"{value:.4g}"), True
    return str(value), False


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table of ``rows`` restricted to ``columns``.

    Floats are written to 4 significant digits, integers in full, None or a missing key as
    ``-``. Columns holding numbers are right-aligned, the others left-aligned; a dashed line
    follows the header.
    """
    columns = list(columns)
    if not columns:
        raise ValueError("format_table: columns=[] is not allowed: give one or more column names")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(
                f"format_table: rows[{i}] is a {type(row).__name__}: every row must be a dict"
            )
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [
        max([len(column), *(len(line[j][0]) for line in cells)]) for j, column in enumerate(columns)
    ]
    numeric = [any(line[j][1] for line in cells) for j in range(len(columns))]
    header = (
        c.rjust(w) if num else c.ljust(w)
        for c, w, num in zip(columns, widths, numeric, strict=True)
    )
    lines = ["  ".join(header).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for line in cells:
        text = (
            t.rjust(w) if num else t.ljust(w)
            for (t, _), w, num in zip(line, widths, numeric, strict=True)
        )
        lines.append("  ".join(text).rstrip())
    return "\n".join(lines)


def nan_as_lowest(score: float) -> float:
    """``score`` as a float, NaN (no finished episode) as ``-inf``: a key that ranks a member
    without a score below every member with one."""
    return -math.inf if np.isnan(score) else float(score)


__all__ = ["SUMMARY_KEYS", "bootstrap_ci", "format_table", "iqm", "nan_as_lowest", "summarize"]
