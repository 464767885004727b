"""podracer.trading.market: the synthetic prices' statistics, the indicators against stockstats (the
library FinRL computes them with), turbulence against a plain per-day computation, no look-ahead,
the CSV loader's format and errors (on real index prices too) and the train/test split."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from price_files import real_index_prices

from podracer.errors import ConfigError
from podracer.trading import market
from podracer.trading.market import (
    INDICATORS,
    finrl_indicators,
    load_csv,
    market_data,
    scaled_features,
    split_index,
    synthetic,
    turbulence,
)


def random_ohlc(days=120, assets=2, seed=1):
    """A random walk's open, high, low and close, ``[days, assets]`` each."""
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0.0, 0.02, (days, assets)), axis=0))
    open_ = close * np.exp(rng.normal(0.0, 0.01, (days, assets)))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, 0.01, (days, assets))))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, 0.01, (days, assets))))
    return open_, high, low, close


def one_line_error(match_all, call, *args, **kwargs):
    """``call`` raises a one-line ConfigError whose message holds every string of match_all."""
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    for part in match_all:
        assert part in message, (part, message)
    return message


# --- synthetic prices -----------------------------------------------------------------------------


def test_synthetic_shapes_and_determinism():
    data = synthetic(num_assets=4, days=300, seed=3)
    assert data.close.shape == data.high.shape == data.low.shape == (300, 4)
    assert data.close.dtype == np.float64
    assert data.features.shape == (300, 4, len(INDICATORS))
    assert data.features.dtype == np.float32
    assert np.isfinite(data.features).all()
    assert data.feature_names == INDICATORS
    assert data.turbulence.shape == (300,)
    assert (data.turbulence[:252] == 0).all() and (data.turbulence[252:] > 0).all()
    assert data.tickers == ("A0", "A1", "A2", "A3")
    assert data.dates.dtype == np.dtype("datetime64[D]")
    assert data.dates[0] == np.datetime64("2000-01-03") and data.dates[4] == np.datetime64(
        "2000-01-07"
    )
    assert data.dates[5] == np.datetime64("2000-01-10")  # business days: the weekend skipped
    assert np.is_busday(data.dates).all() and (np.diff(data.dates) > np.timedelta64(0)).all()
    np.testing.assert_array_equal(data.high, data.close)
    np.testing.assert_array_equal(data.low, data.close)
    # Start prices 100 exp(U(-1, 1)).
    assert ((data.close[0] > 100 / math.e) & (data.close[0] < 100 * math.e)).all()

    again = synthetic(num_assets=4, days=300, seed=3)
    assert again.close.tobytes() == data.close.tobytes()
    assert again.features.tobytes() == data.features.tobytes()
    assert again.turbulence.tobytes() == data.turbulence.tobytes()
    other = synthetic(num_assets=4, days=300, seed=4)
    assert not np.array_equal(other.close, data.close)
    one = synthetic(num_assets=1, days=2, correlation=0.0)
    assert one.close.shape == (2, 1) and one.features.shape == (2, 1, len(INDICATORS))


@pytest.mark.parametrize(
    "drift,volatility,correlation",
    [(0.1, 0.1, 0.3), (-0.05, 0.3, -0.4)],
)
def test_synthetic_statistics(drift, volatility, correlation):
    """A long series' annual mean log return, volatility and correlation match the parameters
    (tolerances about 4 standard errors of the estimates)."""
    days, assets = 20_000, 3
    data = synthetic(assets, days, drift, volatility, correlation, seed=7)
    log_returns = np.diff(np.log(data.close), axis=0)
    n = len(log_returns)
    mean_error = volatility * math.sqrt(252 / n)
    np.testing.assert_allclose(
        log_returns.mean(0) * 252, drift - volatility**2 / 2, atol=4 * mean_error
    )
    np.testing.assert_allclose(
        log_returns.std(0) * math.sqrt(252), volatility, rtol=4 / math.sqrt(2 * n)
    )
    corr = np.corrcoef(log_returns, rowvar=False)[np.triu_indices(assets, 1)]
    np.testing.assert_allclose(corr, correlation, atol=4 * (1 - correlation**2) / math.sqrt(n))


def test_signal_drift_raises_asset_0s_return():
    base = synthetic(num_assets=3, days=500, seed=5)
    signal = synthetic(num_assets=3, days=500, signal_drift=0.5, seed=5)
    # The same random numbers: asset 0's daily log return is 0.5 / 252 higher, the others equal.
    lift = np.diff(np.log(signal.close), axis=0) - np.diff(np.log(base.close), axis=0)
    np.testing.assert_allclose(lift[:, 0], 0.5 / 252, rtol=1e-9)
    np.testing.assert_array_equal(signal.close[:, 1:], base.close[:, 1:])
    assert signal.close[0, 0] == base.close[0, 0]


@pytest.mark.parametrize(
    "kwargs,parts",
    [
        ({"num_assets": 0}, ["num_assets=0 is not allowed: it must be >= 1"]),
        ({"num_assets": 2.5}, ["num_assets=2.5", "an integer"]),
        ({"days": 1}, ["days=1", ">= 2"]),
        ({"drift": float("nan")}, ["drift=nan", "finite"]),
        ({"signal_drift": float("inf")}, ["signal_drift=inf", "finite"]),
        ({"volatility": -0.1}, ["volatility=-0.1", ">= 0"]),
        ({"correlation": 1.0}, ["correlation=1.0", "< 1"]),
        ({"num_assets": 3, "correlation": -0.5}, ["correlation=-0.5", "> -0.5"]),
        ({"seed": -1}, ["seed=-1", ">= 0"]),
        ({"drift": 1e6, "days": 1000}, ["drift=1000000.0", "float64"]),
    ],
)
def test_synthetic_rejects(kwargs, parts):
    one_line_error(["trading:synthetic: ", *parts], synthetic, **kwargs)


def test_synthetic_single_asset_takes_any_correlation():
    assert synthetic(num_assets=1, days=10, correlation=-3.0).close.shape == (10, 1)


# --- indicators -----------------------------------------------------------------------------------


def test_indicators_match_stockstats():
    """Each indicator equals stockstats' on each ticker, NaN positions included (as FinRL calls
    it: one StockDataFrame per ticker)."""
    stockstats = pytest.importorskip("stockstats")
    import pandas as pd

    open_, high, low, close = random_ohlc()
    high[0, 1] = low[0, 1] = close[0, 1]  # a day-0 range of 0: dx_30 is NaN there
    ours = finrl_indicators(close, high, low)
    assert tuple(ours) == INDICATORS
    for asset in range(close.shape[1]):
        frame = pd.DataFrame(
            {
                "date": pd.bdate_range("2020-01-01", periods=len(close)),
                "open": open_[:, asset],
                "high": high[:, asset],
                "low": low[:, asset],
                "close": close[:, asset],
                "volume": 1e6,
            }
        )
        reference = stockstats.StockDataFrame.retype(frame)
        for name in INDICATORS:
            expected = reference[name].to_numpy(dtype=np.float64)
            assert ours[name].shape == close.shape and ours[name].dtype == np.float64
            np.testing.assert_allclose(
                ours[name][:, asset], expected, rtol=1e-9, atol=1e-9, err_msg=name
            )
    assert np.isnan(ours["boll_ub"][0]).all() and np.isfinite(ours["boll_ub"][1:]).all()
    assert np.isnan(ours["dx_30"][0, 1]) and ours["dx_30"][0, 0] == 0
    assert (ours["cci_30"][:29] == 0).all() and (ours["cci_30"][29:] != 0).all()


def test_indicators_short_series_match_stockstats():
    """Fewer days than the windows: stockstats' warm-up values (cci_30 NaN everywhere)."""
    stockstats = pytest.importorskip("stockstats")
    import pandas as pd

    open_, high, low, close = random_ohlc(days=12, assets=1, seed=2)
    ours = finrl_indicators(close, high, low)
    frame = pd.DataFrame(
        {"open": open_[:, 0], "high": high[:, 0], "low": low[:, 0], "close": close[:, 0]}
    )
    reference = stockstats.StockDataFrame.retype(frame)
    for name in INDICATORS:
        expected = reference[name].to_numpy(dtype=np.float64)
        np.testing.assert_allclose(ours[name][:, 0], expected, rtol=1e-9, atol=1e-9, err_msg=name)
    assert np.isnan(ours["cci_30"]).all()


def test_scaled_features():
    _, high, low, close = random_ohlc(days=80, assets=3, seed=4)
    raw = finrl_indicators(close, high, low)
    raw["cci_30"][40, 0] = 900.0  # clipped to 5
    features, names = scaled_features(raw, close)
    assert names == INDICATORS
    assert features.shape == (80, 3, 8) and features.dtype == np.float32
    expected = {
        "macd": raw["macd"] / close,
        "boll_ub": raw["boll_ub"] / close - 1,
        "boll_lb": raw["boll_lb"] / close - 1,
        "rsi_30": raw["rsi_30"] / 100,
        "cci_30": np.clip(raw["cci_30"] / 100, -5, 5),
        "dx_30": raw["dx_30"] / 100,
        "close_30_sma": raw["close_30_sma"] / close - 1,
        "close_60_sma": raw["close_60_sma"] / close - 1,
    }
    for k, name in enumerate(names):
        want = np.nan_to_num(expected[name], nan=0.0, posinf=0.0, neginf=0.0)
        np.testing.assert_allclose(features[..., k], want, rtol=1e-6, atol=1e-7, err_msg=name)
    assert features[40, 0, names.index("cci_30")] == 5.0
    assert (features[0, :, names.index("boll_ub")] == 0).all()  # NaN on day 0 -> 0
    assert np.isfinite(features).all()
    assert np.abs(features).max() <= 5.0
    # Only the names given, in their order.
    two, two_names = scaled_features({"rsi_30": raw["rsi_30"], "macd": raw["macd"]}, close)
    assert two_names == ("rsi_30", "macd") and two.shape == (80, 3, 2)
    with pytest.raises(ValueError, match="unknown indicator 'volume'"):
        scaled_features({"volume": close}, close)


# --- turbulence -----------------------------------------------------------------------------------


def direct_turbulence(close, window):
    """Day by day: returns, then the mean and covariance of the last `window` days' returns
    before day t (day 0 has none), and the Mahalanobis distance of day t's returns."""
    returns = np.full(close.shape, np.nan)
    returns[1:] = close[1:] / close[:-1] - 1
    out = np.zeros(len(close))
    for t in range(window, len(close)):
        history = returns[t - window : t]
        history = history[~np.isnan(history).any(axis=1)]
        mean = history.mean(axis=0)
        cov = np.atleast_2d(np.cov(history, rowvar=False))
        deviation = returns[t] - mean
        out[t] = deviation @ np.linalg.pinv(cov) @ deviation
    return out


def test_turbulence_matches_direct_computation():
    _, _, _, close = random_ohlc(days=90, assets=3, seed=6)
    close[60] *= [1.08, 0.93, 1.0]  # a turbulent day
    ours = turbulence(close, window=20)
    expected = direct_turbulence(close, 20)
    assert (ours[:20] == 0).all()
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-12)
    assert ours.argmax() in (60, 61)
    # One asset, and the default (FinRL's 252-day) window.
    np.testing.assert_allclose(
        turbulence(close[:, :1], window=5), direct_turbulence(close[:, :1], 5), rtol=1e-9
    )
    _, _, _, long_close = random_ohlc(days=300, assets=4, seed=8)
    np.testing.assert_allclose(
        turbulence(long_close), direct_turbulence(long_close, 252), rtol=1e-9, atol=1e-12
    )
    # Fewer days than the window: all 0.
    assert (turbulence(close[:20], window=20) == 0).all()


@pytest.mark.parametrize("window", [2, 0, 2.5])
def test_turbulence_rejects_a_short_window(window):
    one_line_error([f"window={window}", ">= 3"], turbulence, np.ones((30, 2)), window=window)


def test_no_look_ahead():
    """Changing the prices after day t changes no feature and no turbulence of days <= t, and
    neither does dropping them."""
    _, high, low, close = random_ohlc(days=320, assets=3, seed=9)
    full = market_data(close, high, low)
    rng = np.random.default_rng(0)
    for t in (0, 10, 40, 100, 260, 300):
        factor = np.exp(rng.normal(0, 0.1, close[t + 1 :].shape))
        changed_close, changed_high, changed_low = close.copy(), high.copy(), low.copy()
        changed_close[t + 1 :] *= factor
        changed_high[t + 1 :] *= factor * 1.01
        changed_low[t + 1 :] *= factor * 0.99
        changed = market_data(changed_close, changed_high, changed_low)
        np.testing.assert_array_equal(changed.features[: t + 1], full.features[: t + 1])
        np.testing.assert_array_equal(changed.turbulence[: t + 1], full.turbulence[: t + 1])
        assert not np.array_equal(changed.features[t + 1 :], full.features[t + 1 :])
        if t >= 1:
            cut = market_data(close[: t + 1], high[: t + 1], low[: t + 1])
            np.testing.assert_array_equal(cut.features, full.features[: t + 1])
            np.testing.assert_array_equal(cut.turbulence, full.turbulence[: t + 1])
    assert (full.turbulence[253:] > 0).all()


def test_market_data_checks_its_arrays():
    close = np.full((5, 2), 10.0)
    with pytest.raises(ValueError, match="close must be"):
        market_data(close[:1])
    with pytest.raises(ValueError, match="finite and > 0"):
        market_data(np.where(np.eye(5, 2) > 0, -1.0, 10.0))
    with pytest.raises(ValueError, match="high has shape"):
        market_data(close, high=close[:, :1])
    with pytest.raises(ValueError, match="strictly increasing"):
        market_data(close, dates=np.array(["2020-01-02"] * 5, dtype="datetime64[D]"))
    with pytest.raises(ValueError, match="3 tickers for 2 assets"):
        market_data(close, tickers=("a", "b", "c"))
    data = market_data(close, tickers=["x", "y"])
    assert data.tickers == ("x", "y") and data.dates[0] == np.datetime64("2000-01-03")


# --- CSV files ------------------------------------------------------------------------------------

PRICES = {  # date -> {ticker: (open, high, low, close, volume)}
    "2021-01-04": {
        "AAPL": (133.5, 133.6, 126.8, 129.4, 143e6),
        "MSFT": (222.5, 223.0, 214.8, 217.7, 37e6),
    },
    "2021-01-05": {
        "AAPL": (128.9, 131.7, 128.4, 131.0, 97e6),
        "MSFT": (217.3, 218.5, 215.7, 218.0, 23e6),
    },
    "2021-01-06": {
        "AAPL": (127.7, 131.0, 126.4, 126.6, 155e6),
        "MSFT": (212.2, 216.5, 211.9, 212.3, 35e6),
    },
}


def price_rows(order="date"):
    """``[date, tic, open, high, low, close, volume]`` rows of PRICES, by date then ticker or
    grouped by ticker."""
    rows = [
        [date, tic, *values] for date, by_tic in PRICES.items() for tic, values in by_tic.items()
    ]
    return sorted(rows, key=lambda row: (row[1], row[0])) if order == "tic" else rows


def write(tmp_path, text, name="prices.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def check_prices(data, high=True, low=True):
    assert data.tickers == ("AAPL", "MSFT")
    np.testing.assert_array_equal(data.dates, np.array(list(PRICES), dtype="datetime64[D]"))
    close = np.array([[PRICES[d][tic][3] for tic in data.tickers] for d in PRICES])
    np.testing.assert_array_equal(data.close, close)
    want_high = np.array([[PRICES[d][tic][1] for tic in data.tickers] for d in PRICES])
    want_low = np.array([[PRICES[d][tic][2] for tic in data.tickers] for d in PRICES])
    np.testing.assert_array_equal(data.high, want_high if high else close)
    np.testing.assert_array_equal(data.low, want_low if low else close)
    assert data.features.shape == (3, 2, len(INDICATORS)) and np.isfinite(data.features).all()


@pytest.mark.parametrize("order", ["date", "tic"])
def test_load_csv_row_orders(tmp_path, order):
    lines = ["date,tic,open,high,low,close,volume"]
    lines += [",".join(map(str, row)) for row in price_rows(order)]
    check_prices(load_csv(write(tmp_path, "\n".join(lines) + "\n")))


def test_load_csv_column_order_case_and_extras(tmp_path):
    # Columns in another order, names in upper case with spaces, an extra column, no open or
    # volume, CRLF line ends, a blank line.
    lines = [" Close ,TIC,Low,Date,High,day"]
    for date, tic, _open, high, low, close, _volume in price_rows():
        lines.append(f"{close},{tic},{low},{date},{high},1")
    lines.insert(3, "")
    check_prices(load_csv(write(tmp_path, "\r\n".join(lines))))


def test_load_csv_without_high_and_low(tmp_path):
    lines = ["date,tic,close"]
    lines += [f"{row[0]},{row[1]},{row[5]}" for row in price_rows("tic")]
    check_prices(load_csv(write(tmp_path, "\n".join(lines))), high=False, low=False)
    lines = ["date,tic,close,high"]
    lines += [f"{row[0]},{row[1]},{row[5]},{row[3]}" for row in price_rows()]
    check_prices(load_csv(write(tmp_path, "\n".join(lines))), low=False)


GOOD = "date,tic,close\n2021-01-04,A,10\n2021-01-04,B,20\n2021-01-05,A,11\n2021-01-05,B,21\n"


@pytest.mark.parametrize(
    "text,parts",
    [
        ("", ["line 1", "empty", "date, tic and close"]),
        ("\n\n", ["line 1", "empty"]),
        ("date,tic,open\n2021-01-04,A,10\n", ["line 1, column close: missing", "date, tic, open"]),
        ("Date,ticker,close\n", ["line 1, column tic: missing", "date, ticker, close"]),
        ("date,tic,close,Close\n", ["line 1, column close: named twice"]),
        (GOOD.replace("2021-01-05,A", "2021/01/05,A"), ["line 4, column date", "'2021/01/05'"]),
        (GOOD.replace("2021-01-05,A", "2021-02-30,A"), ["line 4, column date", "'2021-02-30'"]),
        (GOOD.replace("A,11", "A,abc"), ["line 4, column close: 'abc' is not a number"]),
        (GOOD.replace("B,20", "B,-3"), ["line 3, column close: '-3'", "must be > 0"]),
        (GOOD.replace("B,20", "B,0"), ["line 3, column close: '0'", "must be > 0"]),
        (GOOD.replace("A,11", "A,nan"), ["line 4, column close: 'nan' is not finite"]),
        (GOOD.replace("A,11", "A,inf"), ["line 4, column close: 'inf' is not finite"]),
        (GOOD.replace("A,11", "A"), ["line 4, column close: the value is missing"]),
        (GOOD.replace("A,11", "A,"), ["line 4, column close: the value is missing"]),
        (GOOD.replace("2021-01-05,A,", ",A,"), ["line 4, column date: the value is missing"]),
        (GOOD.replace(",B,20", ", ,20"), ["line 3, column tic: the value is missing"]),
        (
            "date,tic,close,high\n2021-01-04,A,10,x\n",
            ["line 2, column high: 'x' is not a number"],
        ),
        (
            GOOD + "2021-01-05,A,12\n",
            ["line 6, column date", "A's 2021-01-05 repeats its 2021-01-05 of line 4"],
        ),
        (
            GOOD + "2021-01-03,B,12\n",
            ["line 6, column date", "B's 2021-01-03 comes before its 2021-01-05 of line 5"],
        ),
        (
            GOOD + "2021-01-06,A,12\n",
            ["line 6, column date: A has 2021-01-06 but B has no row for it"],
        ),
        (
            GOOD + "2021-01-06,B,12\n",
            ["line 6, column date: B has 2021-01-06 but A has no row for it"],
        ),
        ("date,tic,close\n2021-01-04,A,10\n", ["1 day(s) of prices; at least 2"]),
        ("date,tic,close\n", ["0 day(s) of prices; at least 2"]),
        ('date,tic,close\n2021-01-04,"A,10\n', ["line 2: not CSV"]),
    ],
)
def test_load_csv_rejects(tmp_path, text, parts):
    path = write(tmp_path, text)
    one_line_error([path, *parts], load_csv, path)


def test_load_csv_missing_file(tmp_path):
    path = str(tmp_path / "absent.csv")
    one_line_error([path, "no such file"], load_csv, path)
    one_line_error([str(tmp_path), "cannot be read"], load_csv, str(tmp_path))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"date,tic,close\n\xff\xfe\n")
    one_line_error([str(binary), "not UTF-8"], load_csv, str(binary))


def test_load_csv_real_index_prices(tmp_path):
    """The NASDAQ Composite's and the S&P 500's daily prices, 1999-2018 (shipped by arch), in
    FinRL's long format."""
    path, tables = real_index_prices(tmp_path)
    data = load_csv(str(path))
    days = len(tables["NASDAQ"])
    assert days > 5000
    assert data.tickers == ("NASDAQ", "SP500")
    assert data.close.shape == (days, 2) and data.features.shape == (days, 2, len(INDICATORS))
    assert data.dates[0] == np.datetime64("1999-01-04") and data.dates[-1] == np.datetime64(
        "2018-12-31"
    )
    for k, tic in enumerate(data.tickers):
        np.testing.assert_array_equal(data.close[:, k], [float(r["Close"]) for r in tables[tic]])
        np.testing.assert_array_equal(data.high[:, k], [float(r["High"]) for r in tables[tic]])
        np.testing.assert_array_equal(data.low[:, k], [float(r["Low"]) for r in tables[tic]])
    assert np.isfinite(data.features).all()
    assert np.isfinite(data.turbulence).all() and (data.turbulence[:252] == 0).all()
    assert data.turbulence[252:].mean() > 0
    # 2008-10: the crisis month is turbulent.
    october_2008 = (data.dates >= np.datetime64("2008-10-01")) & (
        data.dates < np.datetime64("2008-11-01")
    )
    assert data.turbulence[october_2008].mean() > 3 * np.median(data.turbulence[252:])
    rsi = data.features[..., data.feature_names.index("rsi_30")]
    assert ((rsi >= 0) & (rsi <= 1)).all() and 0.4 < rsi[300:].mean() < 0.7


# --- splits ---------------------------------------------------------------------------------------


def test_split_index():
    dates = np.busday_offset(np.datetime64("2020-01-01"), np.arange(100), roll="forward")
    assert split_index(dates, "0.8") == 80
    assert split_index(dates, " 0.57 ") == 57  # exact: 0.57 * 100 is not floored to 56
    assert split_index(dates, "0.333") == 33
    assert split_index(dates, "1/2") == 50
    assert split_index(dates, 0.25) == 25
    assert split_index(dates, str(dates[30])) == 30  # the first test day is that date
    assert split_index(dates, "2020-01-04") == 3  # a Saturday: the Monday after is day 3
    assert split_index(dates, "2020-01-03") == 2


@pytest.mark.parametrize(
    "split,parts",
    [
        ("abc", ["split='abc'", "a fraction in (0, 1)", "YYYY-MM-DD"]),
        ("2020-02-30", ["split='2020-02-30'", "YYYY-MM-DD"]),
        ("1.0", ["split='1.0'", "> 0 and < 1"]),
        ("0", ["split='0'", "> 0 and < 1"]),
        ("-0.5", ["split='-0.5'", "> 0 and < 1"]),
        ("nan", ["split='nan'"]),
        ("0.01", ["leaves 1 train and 99 test days"]),
        ("0.99", ["leaves 99 train and 1 test days"]),
        ("2019-06-01", ["leaves 0 train and 100 test days"]),
        ("2030-01-01", ["leaves 100 train and 0 test days"]),
    ],
)
def test_split_index_rejects(split, parts):
    dates = np.busday_offset(np.datetime64("2020-01-01"), np.arange(100), roll="forward")
    span = "the dates run from 2020-01-01 to 2020-05-19, 100 days"
    one_line_error(["trading: ", *parts, span], split_index, dates, split)


def test_module_imports_only_numpy():
    """At import the module needs NumPy and the standard library only (pandas and stockstats are
    test dependencies)."""
    source = Path(market.__file__).read_text()
    imports = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports - set(sys.stdlib_module_names) == {"numpy", "podracer"}
