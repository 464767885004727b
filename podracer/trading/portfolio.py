"""Backtest metrics and baseline strategies for the multi-stock portfolio task.

``podracer backtest`` scores a trained agent's portfolio values next to the baselines below, with
:func:`metrics`, prints them with :func:`format_table` and draws the equity curves with
:func:`plot_equity`. Everything here is host-side NumPy; matplotlib is imported only to plot.

Metrics
-------
``values`` is the portfolio value ``v_0, ..., v_T`` on each trading day, ``v_0`` the initial
value, and ``r_t = v_t / v_{t-1} - 1`` (``t = 1..T``) the ``n = T`` daily returns; ``ppy`` is
``periods_per_year`` (252 trading days). The definitions are empyrical's, with the risk-free rate
0, and the tests check them against empyrical-reloaded:

- ``cumulative_return = v_T / v_0 - 1`` (``empyrical.cum_returns_final``);
- ``annual_return = (v_T / v_0) ** (ppy / n) - 1``, the compound annual growth rate
  (``empyrical.annual_return``);
- ``annual_volatility = std(r, ddof=1) * sqrt(ppy)`` (``empyrical.annual_volatility``);
- ``sharpe = mean(r) / std(r, ddof=1) * sqrt(ppy)`` (``empyrical.sharpe_ratio``);
- ``max_drawdown = min_t(v_t / max_{s<=t} v_s - 1)``, a fraction ``<= 0`` (``-0.5``: half the
  peak lost), ``v_0`` included as a peak (``empyrical.max_drawdown``);
- ``calmar = annual_return / |max_drawdown|`` (``empyrical.calmar_ratio``);
- ``final_value = v_T``.

Every value is a plain Python ``float``, or ``None`` where the metric is undefined, so that the
dict goes to JSON as it is (empyrical returns ``nan`` or ``inf`` there):

- returns that are all equal (within ``1e-12``, which absorbs the rounding of ``v_t / v_{t-1}``
  on a constant-growth series) have ``annual_volatility = 0.0`` and ``sharpe = None``;
- a single return (two values) has ``annual_volatility = sharpe = None`` (no sample deviation);
- a series that never falls below a previous peak has ``max_drawdown = 0.0`` and
  ``calmar = None``;
- an ``annual_return`` that overflows a float (a huge gain over a few days) is ``None``, and so
  is the ``calmar`` computed from it.

Baselines
---------
Each baseline takes the closing prices ``close`` ``[T, D]`` of ``D`` assets on ``T`` days, the
initial cash and a proportional cost rate ``c`` (``0 <= c < 1``; FinRL's is 0.001), and returns the
portfolio value ``[T]`` at each day's close, before that day's trades, as the trading environment
counts it (:mod:`podracer.trading.environment`: a day's trades and their costs show in the next
day's value). Shares are fractional and every trade pays ``c`` times its notional, on buys and on
sells alike; the cost is paid from the portfolio's value. On day 0 the value is the cash, and every
baseline spends it: ``w_i * cash / (close[0, i] * (1 + c))`` shares of asset ``i`` for target
weights ``w``.

- :func:`buy_and_hold`: equal cash in each asset on day 0, then no trades.
- :func:`equal_weight`: rebalanced at every close to ``1 / D`` of the value in each asset.
- :func:`min_variance`: rebalanced at every close to long-only minimum-variance weights of the
  previous ``lookback`` daily returns (:func:`min_variance_weights`), equal weight until
  ``lookback`` returns exist.

The rebalancing rule (:func:`rebalance`): with holdings ``h`` bought at the previous close and
prices ``p`` at today's, the value before trading is ``V = sum_i h_i p_i`` and the value after
trading ``V'`` is the value left once this rebalance's cost is paid, the targets being ``w_i V'``:

    V' = V - c * sum_i |w_i V' - h_i p_i|.

The right side is Lipschitz in ``V'`` with constant ``c < 1``, so the fixed point is unique. It
is solved exactly rather than iterated: ``g(x) = x + c * sum_i |w_i x - h_i p_i| - V`` is
piecewise linear and increasing (slope ``>= 1 - c``), negative at 0 and non-negative at ``V``,
so the root is interpolated on the linear piece between the breakpoints ``h_i p_i / w_i`` that
brackets it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path

import numpy as np

METRICS = (
    "cumulative_return",
    "annual_return",
    "annual_volatility",
    "sharpe",
    "max_drawdown",
    "calmar",
    "final_value",
)
"""The keys of :func:`metrics`, in the column order of :func:`format_table`."""

_CONSTANT_RETURNS_TOL = 1e-12
"""Returns whose range is at most this are one constant (zero volatility, undefined Sharpe)."""

_PERCENT_METRICS = frozenset(
    {"cumulative_return", "annual_return", "annual_volatility", "max_drawdown"}
)


def metrics(values: np.ndarray, periods_per_year: int = 252) -> dict[str, float | None]:
    """The backtest metrics of one portfolio-value series (definitions in the module docstring).

    Args:
      values: ``[T]`` portfolio values, ``T >= 2``, all finite and positive; ``values[0]`` is the
        initial value.
      periods_per_year: periods of ``values`` in a year (252 for trading days).

    Returns:
      ``{name: float or None}`` for every name of :data:`METRICS`; ``None`` where undefined.
    """
    v = _as_values(values)
    if isinstance(periods_per_year, bool) or not isinstance(periods_per_year, int | np.integer):
        raise ValueError(f"periods_per_year must be an int, got {periods_per_year!r}")
    if periods_per_year <= 0:
        raise ValueError(f"periods_per_year must be positive, got {periods_per_year}")
    returns = v[1:] / v[:-1] - 1.0
    n = returns.size
    growth = float(v[-1] / v[0])
    try:
        annual_return = growth ** (periods_per_year / n) - 1.0
    except OverflowError:
        annual_return = None
    if n < 2:
        volatility = sharpe = None
    elif returns.max() - returns.min() <= _CONSTANT_RETURNS_TOL:
        volatility, sharpe = 0.0, None
    else:
        std = float(np.std(returns, ddof=1))
        volatility = std * math.sqrt(periods_per_year)
        sharpe = float(np.mean(returns)) / std * math.sqrt(periods_per_year)
    max_drawdown = float(np.min(v / np.maximum.accumulate(v) - 1.0))
    calmar = None
    if max_drawdown < 0 and annual_return is not None:
        calmar = annual_return / abs(max_drawdown)
    return {
        "cumulative_return": growth - 1.0,
        "annual_return": annual_return,
        "annual_volatility": volatility,
        "sharpe": sharpe,
        "max_drawdown": max_drawdown,
        "calmar": calmar,
        "final_value": float(v[-1]),
    }


def buy_and_hold(close: np.ndarray, initial_cash: float, cost_rate: float) -> np.ndarray:
    """Equal cash in each asset on day 0, held to the end.

    ``shares_i = (initial_cash / D) / (close[0, i] * (1 + cost_rate))`` and
    ``value_t = sum_i shares_i * close[t, i]`` from day 1 (day 0: ``initial_cash``).

    Args:
      close: ``[T, D]`` closing prices (``[T]``: one asset), finite and positive.
      initial_cash: the cash on day 0, positive.
      cost_rate: the cost of a trade as a fraction of its notional, in ``[0, 1)``.

    Returns:
      ``[T]`` the portfolio value at each close.
    """
    close = _as_close(close)
    _check_cash_and_cost(initial_cash, cost_rate)
    shares = (initial_cash / close.shape[1]) / (close[0] * (1.0 + cost_rate))
    values = close @ shares
    values[0] = initial_cash  # before the day-0 purchase
    return values


def equal_weight(close: np.ndarray, initial_cash: float, cost_rate: float) -> np.ndarray:
    """Rebalanced at every close to ``1 / D`` of the value in each asset (:func:`rebalance`).

    Args and Returns: as :func:`buy_and_hold`, whose value it has on day 0.
    """
    close = _as_close(close)
    weights = np.full(close.shape, 1.0 / close.shape[1])
    return rebalance(close, weights, initial_cash, cost_rate)


def min_variance(
    close: np.ndarray, initial_cash: float, cost_rate: float, lookback: int = 60
) -> np.ndarray:
    """Rebalanced at every close to long-only minimum-variance weights (:func:`rebalance`).

    Day ``t``'s weights are :func:`min_variance_weights` of the daily returns of days
    ``t - lookback + 1 .. t``: known at day ``t``'s close, when the trades are made, and nothing
    later. Until ``lookback`` returns exist (``t < lookback``) the weights are ``1 / D``.

    Args:
      close: as :func:`buy_and_hold`.
      initial_cash: as :func:`buy_and_hold`.
      cost_rate: as :func:`buy_and_hold`.
      lookback: the number of daily returns the covariance is estimated from, at least 2.

    Returns:
      ``[T]`` the portfolio value at each close.
    """
    close = _as_close(close)
    if isinstance(lookback, bool) or not isinstance(lookback, int | np.integer) or lookback < 2:
        raise ValueError(f"lookback must be an int >= 2, got {lookback!r}")
    returns = close[1:] / close[:-1] - 1.0  # returns[t - 1]: day t's return
    weights = np.full(close.shape, 1.0 / close.shape[1])
    for t in range(lookback, close.shape[0]):
        weights[t] = min_variance_weights(returns[t - lookback : t])
    return rebalance(close, weights, initial_cash, cost_rate)


def min_variance_weights(returns: np.ndarray) -> np.ndarray:
    """Long-only minimum-variance weights of a window of returns.

    A projection, not an exact quadratic program: the unconstrained minimum-variance portfolio
    ``w = pinv(S) 1 / (1' pinv(S) 1)`` of the sample covariance ``S`` (``ddof=1``), its negative
    weights set to 0 and the rest renormalised to sum to 1. ``pinv`` makes a singular ``S``
    (fewer returns than assets, or an asset whose returns are constant) well defined; an asset
    with constant returns lies in its null space and gets weight 0. Where no positive weight is
    left (all returns constant) the weights are ``1 / D``.

    Args:
      returns: ``[N, D]`` daily returns of ``D`` assets, ``N >= 2``, finite.

    Returns:
      ``[D]`` non-negative weights summing to 1.
    """
    returns = np.asarray(returns, dtype=np.float64)
    if returns.ndim != 2 or returns.shape[0] < 2 or returns.shape[1] < 1:
        raise ValueError(f"returns must be [N >= 2, D >= 1], got shape {returns.shape}")
    if not np.all(np.isfinite(returns)):
        raise ValueError("returns must be finite")
    num_assets = returns.shape[1]
    covariance = np.atleast_2d(np.cov(returns, rowvar=False, ddof=1))
    raw = np.linalg.pinv(covariance, hermitian=True) @ np.ones(num_assets)
    total = raw.sum()
    weights = np.clip(raw / total, 0.0, None) if total > 0 else np.zeros(num_assets)
    total = weights.sum()
    if not np.isfinite(total) or total <= 0:
        return np.full(num_assets, 1.0 / num_assets)
    return weights / total


def rebalance(
    close: np.ndarray,
    weights: np.ndarray,
    initial_cash: float,
    cost_rate: float,
    after_trades: bool = False,
) -> np.ndarray:
    """Rebalanced at every close to the day's target weights, paying the cost of each trade.

    Day 0 spends ``initial_cash``; on every day the value after trading solves
    ``V' = V - cost_rate * sum_i |w_i V' - h_i p_i|`` exactly (module docstring).

    Args:
      close: ``[T, D]`` closing prices (``[T]``: one asset), finite and positive.
      weights: ``[T, D]`` day ``t``'s target weights, non-negative, each row summing to 1.
      initial_cash: the cash on day 0, positive.
      cost_rate: the cost of a trade as a fraction of its notional, in ``[0, 1)``.
      after_trades: return the values after each day's rebalance (its cost paid) instead.

    Returns:
      ``[T]`` the portfolio value at each close, before that day's rebalance.
    """
    close = _as_close(close)
    _check_cash_and_cost(initial_cash, cost_rate)
    weights = np.asarray(weights, dtype=np.float64).reshape(close.shape)
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("weights must be finite and non-negative")
    if not np.allclose(weights.sum(axis=1), 1.0, rtol=0.0, atol=1e-9):
        raise ValueError("each row of weights must sum to 1")
    values, afters = np.empty(close.shape[0]), np.empty(close.shape[0])
    holdings = np.zeros(close.shape[1])
    value = float(initial_cash)  # day 0: the cash, nothing held
    for t in range(close.shape[0]):
        positions = holdings * close[t]
        if t > 0:
            value = float(positions.sum())
        values[t] = value
        afters[t] = _value_after_rebalance(value, weights[t], positions, cost_rate)
        holdings = weights[t] * afters[t] / close[t]
    return afters if after_trades else values


def _value_after_rebalance(
    value: float, weights: np.ndarray, positions: np.ndarray, cost_rate: float
) -> float:
    """The root of ``g(x) = x + c * sum_i |w_i x - a_i| - V`` in ``(0, V]``.

    ``g`` is piecewise linear with breakpoints ``a_i / w_i`` and slope ``>= 1 - c > 0``;
    ``g(0) = c * sum(a) - V < 0`` (``sum(a) <= V``: the positions are worth ``V``, or nothing is
    held yet) and ``g(V) >= 0``, so the root lies between two consecutive points of
    ``{0, V} + breakpoints`` and is interpolated there exactly.
    """
    if cost_rate == 0:
        return value

    def g(x: np.ndarray) -> np.ndarray:
        trades = np.abs(weights * x[:, None] - positions)
        return x + cost_rate * trades.sum(axis=1) - value

    held = weights > 0
    breaks = positions[held] / weights[held]
    points = np.unique(np.concatenate([[0.0, value], breaks[(breaks > 0) & (breaks < value)]]))
    residuals = g(points)
    k = int(np.argmax(residuals >= 0))  # the first point at or past the root; k >= 1
    if residuals[k] == 0:
        return float(points[k])
    x0, x1, g0, g1 = points[k - 1], points[k], residuals[k - 1], residuals[k]
    return float(x0 - g0 * (x1 - x0) / (g1 - g0))


def format_table(results: Mapping[str, Mapping[str, float | None]]) -> str:
    """A plain-text table of :func:`metrics` results: one row per strategy, one column per metric.

    Returns, volatility and drawdown are percents with 2 decimals, ``sharpe`` and ``calmar`` have
    2 decimals, ``final_value`` has thousands separators and 2 decimals; an undefined (``None``)
    or missing metric shows as ``n/a``. Rows keep the order of ``results``.

    Args:
      results: ``{strategy name: metrics dict}``, e.g. ``{"agent": ..., "buy_and_hold": ...}``.

    Returns:
      the table, its lines joined by newlines (no trailing newline).
    """
    header = ["strategy", *METRICS]
    rows = [
        [str(name), *(_format_metric(k, m.get(k)) for k in METRICS)] for name, m in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def _format_metric(name: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if name in _PERCENT_METRICS:
        return f"{100.0 * value:.2f}%"
    if name == "final_value":
        return f"{value:,.2f}"
    return f"{value:.2f}"


def plot_equity(
    dates: Sequence | np.ndarray | None,
    curves: Mapping[str, np.ndarray],
    path: str | PathLike,
    title: str = "",
) -> str:
    """Draws each strategy's value over time in one PNG, with a legend.

    The figure is drawn on a :class:`matplotlib.figure.Figure` with the Agg canvas, never
    through ``pyplot``, so no global backend is changed and no display is needed.

    Args:
      dates: the x axis, one date per value (``datetime64``, ``datetime`` or ISO strings such as
        ``"2021-01-04"``); ``None``: the day index, and the curves may differ in length.
      curves: ``{label: [T] values}``.
      path: the PNG to write; its parent directories are created.
      title: the figure's title, none when empty.

    Returns:
      ``path``, as a string.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    if not curves:
        raise ValueError("curves is empty: nothing to plot")
    arrays = {str(label): np.asarray(curve, dtype=np.float64) for label, curve in curves.items()}
    for label, curve in arrays.items():
        if curve.ndim != 1:
            raise ValueError(f"curve {label!r} must be 1-D, got shape {curve.shape}")
    x = None
    if dates is not None:
        x = np.asarray(dates)
        if x.dtype.kind in "USO":
            try:
                x = x.astype("datetime64[ns]")
            except (ValueError, TypeError) as error:
                raise ValueError(f"dates are not dates: {error}") from error
        for label, curve in arrays.items():
            if curve.shape[0] != x.shape[0]:
                raise ValueError(
                    f"curve {label!r} has {curve.shape[0]} values but there are {x.shape[0]} dates"
                )
    figure = Figure(figsize=(9, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, curve in arrays.items():
        axes.plot(np.arange(curve.shape[0]) if x is None else x, curve, label=label, linewidth=1.2)
    if x is not None and x.dtype.kind == "M":
        locator = AutoDateLocator()
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.set_xlabel("day" if x is None else "date")
    axes.set_ylabel("portfolio value")
    if title:
        axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=150)
    return str(path)


def _as_values(values: np.ndarray) -> np.ndarray:
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"values must be numbers: {error}") from error
    if v.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {v.shape}")
    if v.size < 2:
        raise ValueError(f"values needs at least 2 entries (a start and an end), got {v.size}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite (found nan or inf)")
    if np.any(v <= 0):
        raise ValueError(f"values must be positive, got a minimum of {v.min()}")
    return v


def _as_close(close: np.ndarray) -> np.ndarray:
    try:
        prices = np.asarray(close, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"close must be numbers: {error}") from error
    if prices.ndim == 1:
        prices = prices[:, None]
    if prices.ndim != 2 or prices.shape[0] < 1 or prices.shape[1] < 1:
        raise ValueError(f"close must be [T, D] with T, D >= 1, got shape {prices.shape}")
    if not np.all(np.isfinite(prices)) or np.any(prices <= 0):
        raise ValueError("close prices must be finite and positive")
    return prices


def _check_cash_and_cost(initial_cash: float, cost_rate: float) -> None:
    if not (math.isfinite(initial_cash) and initial_cash > 0):
        raise ValueError(f"initial_cash must be finite and positive, got {initial_cash}")
    if not (math.isfinite(cost_rate) and 0 <= cost_rate < 1):
        raise ValueError(f"cost_rate must be in [0, 1), got {cost_rate}")
