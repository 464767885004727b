"""Daily prices, indicators and turbulence for the multi-stock trading environment.

The data of FinRL's multi-stock trading task (Liu et al., 2020, https://arxiv.org/abs/2011.09607,
https://github.com/AI4Finance-Foundation/FinRL): ``D`` stocks over ``T`` trading days, each day
its close (and high and low) prices, FinRL's default technical indicators per stock and the
market's turbulence index. Arrays are indexed ``[day, asset]``; :class:`MarketData` holds them.

Sources:

- :func:`synthetic`: correlated geometric Brownian motion, with a planted drift on asset 0;
- :func:`load_csv`: a file in FinRL's long format, one row per day and ticker;
- :func:`market_data`: arrays of prices from anywhere.

**Synthetic prices.** Annual drift ``mu`` and volatility ``sigma`` (252 trading days a year); day
``t``'s log return of asset ``i`` is ``(mu_i - sigma^2 / 2) / 252 + sigma / sqrt(252) * (L z_t)_i``
with ``z_t`` standard normal and ``L`` the Cholesky factor of the correlation matrix (1 on the
diagonal, ``correlation`` off it). Asset 0's drift is ``drift + signal_drift``, the others'
``drift``. Start prices are ``100 * exp(U(-1, 1))``, drawn once per asset, before the returns, from
``np.random.default_rng(seed)``. Dates are business days from 2000-01-03; high = low = close.

**CSV format** (FinRL's, as its ``YahooDownloader`` writes it): a header naming the columns
``date, tic, close`` (required) and ``open, high, low, volume`` (optional), in any order, names
case-insensitive; other columns are ignored, and so are ``open`` and ``volume``. Dates are ISO
``YYYY-MM-DD``. Rows may be sorted by date then ticker, or grouped by ticker, but each ticker's
dates must increase and every ticker must have the same dates. Tickers keep the order of their
first row. A missing ``high`` or ``low`` column reads as the close.

**Indicators** (:func:`finrl_indicators`): FinRL's default ``INDICATORS``, with the definitions of
``stockstats`` 0.6 (https://github.com/jealous/stockstats), which FinRL uses, per ticker:

- ``ema_n``: pandas' ``ewm(span=n, adjust=True, min_periods=1)``: on day ``t``,
  ``sum_s w^(t-s) x_s / sum_s w^(t-s)`` over days ``s <= t``, ``w = 1 - 2 / (n + 1)``;
  ``smma_n`` (Wilder's smoothing) is the same with ``w = 1 - 1 / n``;
- ``sma_n``, ``std_n``: mean and sample standard deviation (ddof 1) of the last ``n`` days, of the
  days so far during the first ``n - 1`` (``min_periods=1``; the std is NaN on day 0);
- ``macd = ema_12(close) - ema_26(close)``;
- ``boll_ub``, ``boll_lb = sma_20(close) +- 2 std_20(close)``;
- ``rsi_30 = 100 smma_30(up) / (smma_30(up) + smma_30(down))``, ``up`` and ``down`` the rise and
  the fall of the close since the day before (0 on day 0); 50 on day 0 and where both are 0;
- ``cci_30 = (tp - sma_30(tp)) / (0.015 mad_30(tp))``, ``tp = (high + low + close) / 3``, ``mad``
  the mean absolute deviation from the mean over a full 30-day window (0 before one is full); 0
  where ``mad`` is 0 (so the first 29 days), NaN on every day when there are fewer than 30;
- ``dx_30 = 100 |pdi - ndi| / (pdi + ndi)`` (0 where the sum is 0), ``pdi = 100 smma_30(+DM) /
  atr``, ``ndi = 100 smma_30(-DM) / atr``, ``atr = smma_30(tr)``; ``tr = max(high - low,
  |high - close'|, |low - close'|)`` with ``close'`` the day before's close (day 0's own); with
  ``dh``, ``dl`` the change of the high and the fall of the low since the day before (0 on day 0),
  ``+DM = dh`` where ``dh > max(dl, 0)``, ``-DM = dl`` where ``dl > max(dh, 0)``, else 0. NaN
  where ``atr`` is 0, as on day 0 when its high equals its low;
- ``close_30_sma``, ``close_60_sma``: ``sma_30(close)``, ``sma_60(close)``.

**Features** (:func:`scaled_features`): the indicators made scale-free, ``f32 [T, D, K]``: ``macd
/ close``, ``boll_ub / close - 1``, ``boll_lb / close - 1``, ``rsi_30 / 100``, ``cci_30 / 100``
clipped to ``[-5, 5]``, ``dx_30 / 100``, ``close_30_sma / close - 1``, ``close_60_sma / close -
1``; NaN (warm-up) is 0. Each uses day ``t`` and earlier days only, so an observation on day ``t``
sees nothing of later prices. (FinRL instead fills NaN with the next value and feeds the raw
indicators.)

**Turbulence** (:func:`turbulence`; Kritzman and Li, 2010, "Skulls, Financial Turbulence, and Risk
Management", and FinRL's ``FeatureEngineer.calculate_turbulence``): with ``r_t`` the assets' returns
``close_t / close_(t-1) - 1`` on day ``t``, and ``mu``, ``Sigma`` the mean and sample covariance
(ddof 1) of the returns of the days before ``t`` in the last ``window`` (252), day 0 having none,
``turbulence_t = (r_t - mu) pinv(Sigma) (r_t - mu)^T`` for ``t >= window``, 0 before. As in FinRL,
except that FinRL also sets its first two positive values to 0.

**Splits** (:func:`split_index`): a fraction (``"0.8"``: the first ``floor(0.8 T)`` days train,
the rest test) or an ISO date (the first test day is the first date on or after it).
"""

from __future__ import annotations

import csv
import datetime
import math
import numbers
import re
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from podracer.errors import ConfigError

__all__ = [
    "INDICATORS",
    "MarketData",
    "finrl_indicators",
    "load_csv",
    "market_data",
    "scaled_features",
    "split_index",
    "synthetic",
    "turbulence",
]

# FinRL's default technical indicators (finrl.config.INDICATORS), in its order.
INDICATORS = (
    "macd",
    "boll_ub",
    "boll_lb",
    "rsi_30",
    "cci_30",
    "dx_30",
    "close_30_sma",
    "close_60_sma",
)
TRADING_DAYS = 252  # a year of trading days: the synthetic prices' unit and turbulence's window
START_DATE = np.datetime64("2000-01-03", "D")  # the first business day of 2000
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class MarketData(NamedTuple):
    """Daily prices of ``D`` assets over ``T`` days, with their features and turbulence."""

    dates: np.ndarray  # datetime64[D] [T], strictly increasing
    tickers: tuple[str, ...]  # D names
    close: np.ndarray  # f64 [T, D]
    high: np.ndarray  # f64 [T, D]
    low: np.ndarray  # f64 [T, D]
    features: np.ndarray  # f32 [T, D, K]: see scaled_features
    feature_names: tuple[str, ...]  # K names
    turbulence: np.ndarray  # f64 [T]


# --- synthetic prices -----------------------------------------------------------------------------


def _check_synthetic(num_assets, days, drift, volatility, correlation, signal_drift, seed):
    """:func:`synthetic`'s arguments, each with a one-line error naming it."""

    def require(ok: bool, name: str, value, allowed: str) -> None:
        if not ok:
            raise ConfigError(
                f"trading:synthetic: {name}={value} is not allowed: it must be {allowed}"
            )

    def is_int(value) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)

    def is_real(value) -> bool:
        return (
            isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        )

    require(is_int(num_assets), "num_assets", num_assets, "an integer")
    require(num_assets >= 1, "num_assets", num_assets, ">= 1")
    require(is_int(days), "days", days, "an integer")
    require(days >= 2, "days", days, ">= 2")
    require(is_real(drift), "drift", drift, "a finite number")
    require(is_real(signal_drift), "signal_drift", signal_drift, "a finite number")
    require(is_real(volatility) and volatility >= 0, "volatility", volatility, "finite and >= 0")
    require(is_real(correlation), "correlation", correlation, "a finite number")
    if num_assets > 1:
        low = -1.0 / (num_assets - 1)
        require(
            low < correlation < 1,
            "correlation",
            correlation,
            f"> {low:.6g} and < 1 with num_assets={num_assets} (a positive definite matrix)",
        )
    require(is_int(seed) and seed >= 0, "seed", seed, "an integer >= 0")


def synthetic(
    num_assets: int = 30,
    days: int = 2520,
    drift: float = 0.05,
    volatility: float = 0.2,
    correlation: float = 0.3,
    signal_drift: float = 0.0,
    seed: int = 0,
) -> MarketData:
    """Correlated geometric Brownian motion (see the module docstring).

    Args:
        num_assets: ``D``, the number of assets, >= 1.
        days: ``T``, the number of trading days, >= 2.
        drift: annual drift of every asset.
        volatility: annual volatility, >= 0.
        correlation: the correlation of every two assets' daily log returns, in
            ``(-1 / (D - 1), 1)`` (where the correlation matrix is positive definite).
        signal_drift: added to asset 0's drift: a signal for an agent to learn.
        seed: seed of ``np.random.default_rng``; the same arguments give the same prices.

    Returns:
        The prices, named ``A0`` ... ``A{D-1}``, with their features and turbulence.
    """

    _check_synthetic(num_assets, days, drift, volatility, correlation, signal_drift, seed)
    rng = np.random.default_rng(seed)
    start = 100.0 * np.exp(rng.uniform(-1.0, 1.0, num_assets))
    z = rng.standard_normal((days - 1, num_assets))
    corr = np.full((num_assets, num_assets), float(correlation))
    np.fill_diagonal(corr, 1.0)
    try:
        chol = np.linalg.cholesky(corr)
    except np.linalg.LinAlgError:  # within rounding of the bound checked above
        raise ConfigError(
            f"trading:synthetic: correlation={correlation} is not allowed: it is too close to "
            f"-1 / (num_assets - 1) for a Cholesky factor with num_assets={num_assets}"
        ) from None
    mu = np.full(num_assets, float(drift))
    mu[0] += signal_drift
    sigma = float(volatility)
    log_returns = (mu - sigma**2 / 2) / TRADING_DAYS + sigma / math.sqrt(TRADING_DAYS) * (
        z @ chol.T
    )
    log_prices = np.log(start) + np.concatenate([np.zeros((1, num_assets)), log_returns]).cumsum(0)
    with np.errstate(over="ignore", under="ignore"):
        close = np.exp(log_prices)
    if not (np.isfinite(close).all() and (close > 0).all()):
        raise ConfigError(
            f"trading:synthetic: drift={drift}, signal_drift={signal_drift}, "
            f"volatility={volatility} over days={days} are not allowed: the prices leave float64's "
            "range"
        )
    return market_data(close)


# --- CSV files ------------------------------------------------------------------------------------


def load_csv(path: str) -> MarketData:
    """Read daily prices from a CSV file in FinRL's long format (see the module docstring).

    Raises:
        ConfigError: one line naming the file, the line (the header is line 1) and the column of
            the first problem found.
    """
    name = str(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            return _read_csv(csv.reader(file, strict=True), name)
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such file") from None
    except (IsADirectoryError, PermissionError) as error:
        raise ConfigError(f"{name}: cannot be read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{name}: not UTF-8 text (byte {error.start}: {error.reason})") from None


def _read_csv(reader, name: str) -> MarketData:
    columns = ("date", "tic", "close", "high", "low")
    try:
        header = next((row for row in reader if any(cell.strip() for cell in row)), None)
        if header is None:
            raise ConfigError(
                f"{name} line 1: the file is empty; it needs a header naming the columns date, "
                "tic and close"
            )
        header_line = reader.line_num
        found = [cell.strip().lower() for cell in header]
        index = {}
        for column in columns:
            if found.count(column) > 1:
                raise ConfigError(f"{name} line {header_line}, column {column}: named twice")
            if column in found:
                index[column] = found.index(column)
        for column in ("date", "tic", "close"):
            if column not in index:
                raise ConfigError(
                    f"{name} line {header_line}, column {column}: missing (the columns found: "
                    f"{', '.join(found)}; date, tic and close are required)"
                )
        rows: dict[str, list[tuple]] = {}  # ticker -> [(date, close, high, low, line)]
        for row in reader:
            if any(cell.strip() for cell in row):
                _add_row(rows, row, index, name, reader.line_num)
    except csv.Error as error:
        raise ConfigError(f"{name} line {reader.line_num}: not CSV ({error})") from None

    tickers = tuple(rows)
    first = rows[tickers[0]] if tickers else []
    for ticker in tickers[1:]:
        _same_dates(name, tickers[0], first, ticker, rows[ticker])
    if len(first) < 2:
        raise ConfigError(f"{name}: {len(first)} day(s) of prices; at least 2 are needed")
    dates = np.array([entry[0] for entry in first], dtype="datetime64[D]")
    close, high, low = (
        np.array([[entry[k] for entry in rows[ticker]] for ticker in tickers]).T for k in (1, 2, 3)
    )
    return market_data(close, high, low, dates, tickers)


def _cell(row: list[str], index: dict[str, int], column: str, name: str, line: int) -> str:
    i = index[column]
    if i >= len(row) or not row[i].strip():
        raise ConfigError(f"{name} line {line}, column {column}: the value is missing")
    return row[i].strip()


def _add_row(rows, row, index, name: str, line: int) -> None:
    ticker = _cell(row, index, "tic", name, line)
    date = _cell(row, index, "date", name, line)
    try:
        ok = bool(_ISO_DATE.fullmatch(date)) and datetime.date.fromisoformat(date) is not None
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{name} line {line}, column date: {date!r} is not a date YYYY-MM-DD")
    prices = {}
    for column in ("close", "high", "low"):
        if column not in index:
            continue
        text = _cell(row, index, column, name, line)
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(
                f"{name} line {line}, column {column}: {text!r} is not a number"
            ) from None
        if not math.isfinite(value):
            raise ConfigError(f"{name} line {line}, column {column}: {text!r} is not finite")
        if value <= 0:
            raise ConfigError(
                f"{name} line {line}, column {column}: {text!r} is not allowed: a price must be > 0"
            )
        prices[column] = value
    close = prices["close"]
    entries = rows.setdefault(ticker, [])
    if entries and date <= entries[-1][0]:  # ISO dates order as text
        before, before_line = entries[-1][0], entries[-1][4]
        what = "repeats" if date == before else "comes before"
        raise ConfigError(
            f"{name} line {line}, column date: {ticker}'s {date} {what} its {before} of line "
            f"{before_line}; each ticker's dates must increase"
        )
    entries.append((date, close, prices.get("high", close), prices.get("low", close), line))


def _same_dates(name: str, ticker_a: str, rows_a: list, ticker_b: str, rows_b: list) -> None:
    """A one-line error naming a date one ticker has and the other lacks, if there is one."""
    dates_a = {entry[0]: entry[4] for entry in rows_a}
    dates_b = {entry[0]: entry[4] for entry in rows_b}
    for has, lacks, dates, other in (
        (ticker_a, ticker_b, dates_a, dates_b),
        (ticker_b, ticker_a, dates_b, dates_a),
    ):
        missing = [date for date in dates if date not in other]
        if missing:
            date = missing[0]
            raise ConfigError(
                f"{name} line {dates[date]}, column date: {has} has {date} but {lacks} has no "
                "row for it; every ticker must have the same dates"
            )


# --- indicators -----------------------------------------------------------------------------------


def _ewm_mean(x: np.ndarray, alpha: float) -> np.ndarray:
    """pandas' ``ewm(alpha=alpha, adjust=True).mean()`` along axis 0 (no NaN in ``x``)."""
    decay = 1.0 - alpha
    out = np.empty_like(x)
    total = np.zeros_like(x[0])
    weight = 0.0
    for t in range(len(x)):
        total = x[t] + decay * total
        weight = 1.0 + decay * weight
        out[t] = total / weight
    return out


def _counts(x: np.ndarray, window: int) -> np.ndarray:
    """How many days each day's trailing window holds, shaped to broadcast against ``x``."""
    count = np.minimum(np.arange(1, len(x) + 1), window).astype(np.float64)
    return count.reshape((-1,) + (1,) * (x.ndim - 1))


def _rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` days along axis 0, of the days so far before that."""
    total = x.copy()
    for k in range(1, window):
        total[k:] += x[:-k]
    return total / _counts(x, window)


def _rolling_std(x: np.ndarray, window: int, mean: np.ndarray) -> np.ndarray:
    """Sample standard deviation (ddof 1) over the windows of :func:`_rolling_mean`; NaN on day 0.

    Args:
        mean: ``_rolling_mean(x, window)``.
    """
    squares = (x - mean) ** 2
    for k in range(1, window):
        squares[k:] += (x[:-k] - mean[k:]) ** 2
    count = _counts(x, window)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(squares / (count - 1))


def _mean_abs_dev(x: np.ndarray, window: int, mean: np.ndarray) -> np.ndarray:
    """Mean absolute deviation from ``mean`` over full windows of ``window`` days along axis 0;
    0 before the first full window, NaN everywhere when there are fewer than ``window`` days.

    Args:
        mean: ``_rolling_mean(x, window)``.
    """
    if len(x) < window:
        return np.full_like(x, np.nan)
    deviation = np.abs(x - mean)
    for k in range(1, window):
        deviation[k:] += np.abs(x[:-k] - mean[k:])
    deviation /= window
    deviation[: window - 1] = 0.0
    return deviation


def _change(x: np.ndarray) -> np.ndarray:
    """The change since the day before along axis 0, 0 on day 0."""
    out = np.zeros_like(x)
    out[1:] = x[1:] - x[:-1]
    return out


def finrl_indicators(close: np.ndarray, high: np.ndarray, low: np.ndarray) -> dict[str, np.ndarray]:
    """FinRL's default indicators, as stockstats 0.6 computes them (see the module docstring).

    Args:
        close: close prices, ``[T, D]``.
        high: high prices, ``[T, D]``.
        low: low prices, ``[T, D]``.

    Returns:
        ``{name: f64 [T, D]}`` for each name of :data:`INDICATORS`, in that order: raw values, NaN
        where stockstats gives NaN.
    """
    close, high, low = (np.asarray(a, dtype=np.float64) for a in (close, high, low))
    out = {}
    out["macd"] = _ewm_mean(close, 2 / 13) - _ewm_mean(close, 2 / 27)

    mean_20 = _rolling_mean(close, 20)
    width = 2.0 * _rolling_std(close, 20, mean_20)
    out["boll_ub"] = mean_20 + width
    out["boll_lb"] = mean_20 - width

    change = _change(close)
    high_change, low_fall = _change(high), -_change(low)
    previous_close = np.concatenate([close[:1], close[:-1]])
    true_range = np.maximum(
        high - low, np.maximum(np.abs(high - previous_close), np.abs(low - previous_close))
    )
    plus_dm = np.where((high_change > 0) & (high_change > low_fall), high_change, 0.0)
    minus_dm = np.where((low_fall > 0) & (low_fall > high_change), low_fall, 0.0)
    # The smoothed moving averages of RSI and DX share their window: one pass for the five.
    smoothed = _ewm_mean(
        np.stack(
            [np.maximum(change, 0.0), np.maximum(-change, 0.0), plus_dm, minus_dm, true_range],
            axis=1,
        ),
        1 / 30,
    )
    up, down, plus_dm, minus_dm, atr = (smoothed[:, i] for i in range(5))

    with np.errstate(divide="ignore", invalid="ignore"):
        total = up + down
        rsi = np.where(total != 0, 100.0 * up / total, 50.0)
        rsi[0] = 50.0
        out["rsi_30"] = rsi

        typical = (high + low + close) / 3.0
        typical_mean = _rolling_mean(typical, 30)
        divisor = 0.015 * _mean_abs_dev(typical, 30, typical_mean)
        out["cci_30"] = np.where(divisor != 0, (typical - typical_mean) / divisor, 0.0)

        plus_di = plus_dm / atr * 100.0
        minus_di = minus_dm / atr * 100.0
        di_sum = plus_di + minus_di
        out["dx_30"] = np.where(di_sum != 0, np.abs(plus_di - minus_di) / di_sum, 0.0) * 100.0

    out["close_30_sma"] = _rolling_mean(close, 30)
    out["close_60_sma"] = _rolling_mean(close, 60)
    return {key: out[key] for key in INDICATORS}


def scaled_features(
    indicators: dict[str, np.ndarray], close: np.ndarray
) -> tuple[np.ndarray, tuple[str, ...]]:
    """The indicators made scale-free for an observation (see the module docstring).

    Args:
        indicators: ``{name: [T, D]}``, names among :data:`INDICATORS` (as
            :func:`finrl_indicators` returns them).
        close: the close prices, ``[T, D]``.

    Returns:
        ``f32 [T, D, K]`` features, in the order of ``indicators``, NaN and inf set to 0, and
        their ``K`` names.
    """
    close = np.asarray(close, dtype=np.float64)
    columns = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for key, value in indicators.items():
            value = np.asarray(value, dtype=np.float64)
            if key == "macd":
                column = value / close
            elif key in ("boll_ub", "boll_lb", "close_30_sma", "close_60_sma"):
                column = value / close - 1.0
            elif key in ("rsi_30", "dx_30"):
                column = value / 100.0
            elif key == "cci_30":
                column = np.clip(value / 100.0, -5.0, 5.0)
            else:
                raise ValueError(f"scaled_features: unknown indicator {key!r}; known: {INDICATORS}")
            columns.append(np.where(np.isfinite(column), column, 0.0))
    features = np.stack(columns, axis=-1).astype(np.float32)
    return features, tuple(indicators)


# --- turbulence -----------------------------------------------------------------------------------


def turbulence(close: np.ndarray, window: int = TRADING_DAYS) -> np.ndarray:
    """FinRL's turbulence index (see the module docstring), from days before ``t`` only.

    Args:
        close: close prices, ``[T, D]``.
        window: how many days before ``t`` give the returns' mean and covariance, >= 3.

    Returns:
        ``f64 [T]``, 0 on the first ``window`` days.
    """
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 3:
        raise ConfigError(f"trading:turbulence: window={window} is not allowed: it must be >= 3")
    close = np.asarray(close, dtype=np.float64)
    if close.ndim != 2:
        raise ValueError(f"turbulence: close must be [T, D], got shape {close.shape}")
    num_days, num_assets = close.shape
    out = np.zeros(num_days)
    if num_days <= window:
        return out
    returns = np.zeros_like(close)
    returns[1:] = close[1:] / close[:-1] - 1.0
    has_return = np.ones(num_days)
    has_return[0] = 0.0  # day 0 has no return: day `window`'s history holds window - 1 returns
    # history[s] is returns[s : s + window] as [D, window]: day t's history is history[t - window].
    history = np.lib.stride_tricks.sliding_window_view(returns, window, axis=0)
    weights = np.lib.stride_tricks.sliding_window_view(has_return, window)
    chunk = max(1, 2**21 // (window * num_assets))  # days a pass, to bound the copies' memory
    for start in range(window, num_days, chunk):
        days = np.arange(start, min(start + chunk, num_days))
        hist, weight = history[days - window], weights[days - window][:, None, :]
        count = weight.sum(-1)  # [n, 1]
        mean = (hist * weight).sum(-1) / count
        centred = (hist - mean[..., None]) * weight
        cov = centred @ centred.transpose(0, 2, 1) / (count - 1)[..., None]
        deviation = returns[days] - mean
        distance = np.einsum("ni,nij,nj->n", deviation, np.linalg.pinv(cov), deviation)
        out[days] = np.maximum(distance, 0.0)
    return out


# --- assembly and splits --------------------------------------------------------------------------


def market_data(
    close: np.ndarray,
    high: np.ndarray | None = None,
    low: np.ndarray | None = None,
    dates: np.ndarray | None = None,
    tickers: tuple[str, ...] | None = None,
) -> MarketData:
    """:class:`MarketData` from prices: their features and turbulence (a 252-day window).

    Args:
        close: close prices, ``[T, D]``, finite and > 0, ``T >= 2``.
        high: ``[T, D]``; the close where None.
        low: ``[T, D]``; the close where None.
        dates: ``[T]``, strictly increasing; business days from 2000-01-03 where None.
        tickers: ``D`` names; ``A0`` ... ``A{D-1}`` where None.
    """
    close = np.array(close, dtype=np.float64)
    if close.ndim != 2 or close.shape[0] < 2 or close.shape[1] < 1:
        raise ValueError(f"market_data: close must be [T >= 2, D >= 1], got shape {close.shape}")
    if not (np.isfinite(close).all() and (close > 0).all()):
        raise ValueError("market_data: every close price must be finite and > 0")
    num_days, num_assets = close.shape
    high = close.copy() if high is None else np.array(high, dtype=np.float64)
    low = close.copy() if low is None else np.array(low, dtype=np.float64)
    for label, array in (("high", high), ("low", low)):
        if array.shape != close.shape:
            raise ValueError(f"market_data: {label} has shape {array.shape}, close {close.shape}")
    if dates is None:
        dates = np.busday_offset(START_DATE, np.arange(num_days), roll="forward")
    dates = np.asarray(dates, dtype="datetime64[D]")
    if dates.shape != (num_days,) or not (dates[1:] > dates[:-1]).all():
        raise ValueError(f"market_data: dates must be [{num_days}] and strictly increasing")
    tickers = tuple(f"A{i}" for i in range(num_assets)) if tickers is None else tuple(tickers)
    if len(tickers) != num_assets:
        raise ValueError(f"market_data: {len(tickers)} tickers for {num_assets} assets")
    features, names = scaled_features(finrl_indicators(close, high, low), close)
    return MarketData(
        dates=dates,
        tickers=tickers,
        close=close,
        high=high,
        low=low,
        features=features,
        feature_names=names,
        turbulence=turbulence(close),
    )


def split_index(dates: np.ndarray, split: str) -> int:
    """The index of the first test day of a train/test split of ``dates``.

    Args:
        dates: ``[T]`` increasing dates.
        split: a fraction in (0, 1) (``"0.8"``: the first ``floor(0.8 T)`` days train) or an ISO
            date ``YYYY-MM-DD`` (the first test day is the first date on or after it).

    Raises:
        ConfigError: the text is neither, or a side would have fewer than 2 days.
    """
    dates = np.asarray(dates, dtype="datetime64[D]")
    text = str(split).strip()
    span = f"the dates run from {dates[0]} to {dates[-1]}, {len(dates)} days"
    prefix = f"trading: split={text!r} is not allowed:"
    try:
        fraction = Fraction(text)
    except (ValueError, ZeroDivisionError):
        fraction = None
    if fraction is not None:
        if not 0 < fraction < 1:
            raise ConfigError(f"{prefix} a fraction must be > 0 and < 1 ({span})")
        index = math.floor(fraction * len(dates))
    else:
        try:
            first_test = datetime.date.fromisoformat(text) if _ISO_DATE.fullmatch(text) else None
        except ValueError:
            first_test = None
        if first_test is None:
            raise ConfigError(
                f"{prefix} it must be a fraction in (0, 1) such as 0.8, or the first test date "
                f"YYYY-MM-DD ({span})"
            )
        index = int(np.searchsorted(dates, np.datetime64(first_test, "D"), side="left"))
    if index < 2 or len(dates) - index < 2:
        raise ConfigError(
            f"{prefix} it leaves {index} train and {len(dates) - index} test days ({span}); each "
            "needs at least 2"
        )
    return index
