"""podracer.trading.portfolio: backtest metrics against hand computations and empyrical, and
baselines."""

import json
import math

import numpy as np
import pytest

from podracer.trading import portfolio
from podracer.trading.portfolio import (
    METRICS,
    buy_and_hold,
    equal_weight,
    format_table,
    metrics,
    min_variance,
    min_variance_weights,
    plot_equity,
    rebalance,
)


def random_close(seed, num_days=120, num_assets=4, vol=0.02):
    rng = np.random.default_rng(seed)
    returns = rng.normal(0.0005, vol, size=(num_days - 1, num_assets))
    start = rng.uniform(10.0, 200.0, size=num_assets)
    return start * np.vstack([np.ones(num_assets), np.cumprod(1.0 + returns, axis=0)])


def holdings_after(values, close, weights):
    """The holdings each close's rebalance leaves: w_i V'_t / p_t,i."""
    return weights * values[:, None] / close


# ----------------------------------------------------------------------------- metrics


def test_metrics_constant_growth():
    values = 100.0 * 1.01 ** np.arange(11)
    m = metrics(values)
    assert set(m) == set(METRICS)
    assert m["cumulative_return"] == pytest.approx(1.01**10 - 1, rel=1e-12)
    assert m["annual_return"] == pytest.approx(1.01**252 - 1, rel=1e-9)
    assert m["annual_volatility"] == 0.0
    assert m["sharpe"] is None  # zero volatility: undefined
    assert m["max_drawdown"] == 0.0
    assert m["calmar"] is None  # no drawdown: undefined
    assert m["final_value"] == pytest.approx(100.0 * 1.01**10, rel=1e-12)
    json.dumps(m, allow_nan=False)


def test_metrics_double_then_halve():
    m = metrics(np.array([1.0, 2.0, 1.0]))
    # r = [1, -0.5]: mean 0.25, sample std sqrt(2 * 0.75^2) = 0.75 sqrt(2)
    assert m["max_drawdown"] == pytest.approx(-0.5, rel=1e-12)
    assert m["cumulative_return"] == 0.0
    assert m["annual_return"] == 0.0
    assert m["calmar"] == 0.0
    assert m["annual_volatility"] == pytest.approx(0.75 * math.sqrt(2) * math.sqrt(252), rel=1e-12)
    assert m["sharpe"] == pytest.approx(0.25 / (0.75 * math.sqrt(2)) * math.sqrt(252), rel=1e-12)


def test_metrics_two_steps_by_hand():
    m = metrics(np.array([100.0, 110.0, 99.0]), periods_per_year=12)
    # r = [0.1, -0.1]: mean 0, sample std 0.1 sqrt(2); n = 2 returns
    assert m["cumulative_return"] == pytest.approx(-0.01, rel=1e-12)
    assert m["annual_return"] == pytest.approx(0.99**6 - 1, rel=1e-12)
    assert m["annual_volatility"] == pytest.approx(0.1 * math.sqrt(2) * math.sqrt(12), rel=1e-12)
    assert m["sharpe"] == pytest.approx(0.0, abs=1e-12)
    assert m["max_drawdown"] == pytest.approx(99.0 / 110.0 - 1, rel=1e-12)
    assert m["calmar"] == pytest.approx((0.99**6 - 1) / (1 - 99.0 / 110.0), rel=1e-12)
    assert m["final_value"] == 99.0
    assert all(type(v) is float for v in m.values())


def test_metrics_single_return_and_overflow():
    m = metrics([100.0, 90.0])
    assert m["annual_volatility"] is None and m["sharpe"] is None
    assert m["max_drawdown"] == pytest.approx(-0.1)
    assert m["annual_return"] == pytest.approx(0.9**252 - 1)
    m = metrics([1.0, 1e4])  # 10^(4 * 252): beyond a float
    assert m["annual_return"] is None and m["calmar"] is None and m["max_drawdown"] == 0.0
    json.dumps(m, allow_nan=False)


@pytest.mark.parametrize(
    "values",
    [
        np.ones((3, 2)),
        [1.0],
        [1.0, np.nan, 2.0],
        [1.0, np.inf],
        [1.0, 0.0, 2.0],
        [1.0, -1.0],
        ["a", "b"],
    ],
)
def test_metrics_rejects_bad_values(values):
    with pytest.raises(ValueError) as info:
        metrics(values)
    assert "\n" not in str(info.value)


def test_metrics_rejects_bad_periods():
    for periods in (0, -252, 252.0, True):
        with pytest.raises(ValueError):
            metrics([1.0, 2.0, 3.0], periods_per_year=periods)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("periods_per_year", [252, 52])
def test_metrics_match_empyrical(seed, periods_per_year):
    empyrical = pytest.importorskip("empyrical")
    rng = np.random.default_rng(seed)
    returns = rng.normal(0.0004 * (seed - 1), 0.015, size=250 + 100 * seed)
    values = 1e6 * np.concatenate([[1.0], np.cumprod(1.0 + returns)])
    m = metrics(values, periods_per_year=periods_per_year)
    r = values[1:] / values[:-1] - 1.0  # the returns metrics sees
    kw = {"annualization": periods_per_year}
    expected = {
        "cumulative_return": empyrical.cum_returns_final(r),
        "annual_return": empyrical.annual_return(r, **kw),
        "annual_volatility": empyrical.annual_volatility(r, **kw),
        "sharpe": empyrical.sharpe_ratio(r, **kw),
        "max_drawdown": empyrical.max_drawdown(r),
        "calmar": empyrical.calmar_ratio(r, **kw),
    }
    for name, value in expected.items():
        assert m[name] == pytest.approx(float(value), rel=1e-9), name
    assert m["max_drawdown"] < 0
    assert m["final_value"] == values[-1]


# ----------------------------------------------------------------------------- baselines


def test_buy_and_hold_direct():
    close = random_close(0)
    cash, cost = 1e6, 0.001
    shares = (cash / close.shape[1]) / (close[0] * (1 + cost))
    expected = np.array([sum(shares[i] * close[t, i] for i in range(4)) for t in range(len(close))])
    expected[0] = cash  # the value before the day-0 purchase
    values = buy_and_hold(close, cash, cost)
    assert values.shape == (len(close),)
    np.testing.assert_allclose(values, expected, rtol=1e-12)


def test_buy_and_hold_one_asset_no_cost():
    close = random_close(1, num_assets=1)
    np.testing.assert_allclose(buy_and_hold(close, 5e4, 0.0), close[:, 0] / close[0, 0] * 5e4)
    np.testing.assert_allclose(buy_and_hold(close[:, 0], 5e4, 0.0), close[:, 0] / close[0, 0] * 5e4)


def test_equal_weight_without_cost_is_the_mean_return_product():
    close = random_close(2)
    asset_returns = close[1:] / close[:-1] - 1.0
    expected = 1e6 * np.concatenate([[1.0], np.cumprod(1.0 + asset_returns.mean(axis=1))])
    np.testing.assert_allclose(equal_weight(close, 1e6, 0.0), expected, rtol=1e-12)


@pytest.mark.slow
def test_equal_weight_with_cost_solves_the_fixed_point():
    close = random_close(3, num_assets=5, vol=0.03)
    cash, cost = 1e6, 0.01
    weights = np.full(close.shape, 1 / 5)
    values = rebalance(close, weights, cash, cost, after_trades=True)
    free = equal_weight(close, cash, 0.0)
    assert np.all(values < free)
    assert values[0] == pytest.approx(cash / (1 + cost), rel=1e-12)
    before = equal_weight(close, cash, cost)  # what the day's trades start from
    assert before[0] == cash and np.all(before[1:] < free[1:])
    held = holdings_after(values, close, weights)
    for t in range(1, len(close)):
        positions = held[t - 1] * close[t]  # yesterday's holdings at today's prices
        before = positions.sum()
        paid = cost * np.abs(values[t] / 5 - positions).sum()
        assert values[t] == pytest.approx(before - paid, rel=1e-12), t
        assert before - values[t] > 0  # prices moved, so it traded and paid


def test_equal_weight_one_asset_is_buy_and_hold():
    close = random_close(4, num_assets=1)
    np.testing.assert_allclose(equal_weight(close, 1e5, 0.0), buy_and_hold(close, 1e5, 0.0))
    # one asset never trades after day 0, so the cost is paid once, as by buy and hold
    np.testing.assert_allclose(equal_weight(close, 1e5, 0.01), buy_and_hold(close, 1e5, 0.01))


def test_constant_prices_trade_only_on_day_zero():
    close = np.full((10, 3), 20.0)
    values = equal_weight(close, 300.0, 0.002)
    assert values[0] == 300.0
    np.testing.assert_allclose(values[1:], 300.0 / 1.002, rtol=1e-14)


def test_rebalance_matches_fixed_point_iteration():
    rng = np.random.default_rng(5)
    close = random_close(5, num_days=40, num_assets=3, vol=0.05)
    weights = rng.dirichlet(np.ones(3), size=len(close))
    weights[7] = [1.0, 0.0, 0.0]  # a weight of 0: a term without a breakpoint
    cost = 0.05
    values = rebalance(close, weights, 1e4, cost, after_trades=True)
    held = holdings_after(values, close, weights)
    for t in range(1, len(close)):
        positions = held[t - 1] * close[t]
        x = positions.sum()
        for _ in range(200):  # a contraction with constant cost < 1
            x = positions.sum() - cost * np.abs(weights[t] * x - positions).sum()
        assert values[t] == pytest.approx(x, rel=1e-12), t


@pytest.mark.parametrize(
    "args",
    [
        (np.ones((5, 2)), 0.0, 0.001),
        (np.ones((5, 2)), 1e3, 1.0),
        (np.ones((5, 2)), 1e3, -0.1),
        (np.zeros((5, 2)), 1e3, 0.001),
        (np.ones((5, 2, 1)), 1e3, 0.001),
    ],
)
def test_baselines_reject_bad_inputs(args):
    for baseline in (buy_and_hold, equal_weight, min_variance):
        with pytest.raises(ValueError):
            baseline(*args)


def test_min_variance_weights_are_long_only():
    rng = np.random.default_rng(6)
    for _ in range(20):
        w = min_variance_weights(rng.normal(0, rng.uniform(0.005, 0.05, 6), size=(30, 6)))
        assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
    # two strongly correlated assets of different volatility: the unconstrained optimum shorts
    # the volatile one, which the projection clips to 0
    common = rng.normal(0, 0.01, size=200)
    returns = np.stack([common + rng.normal(0, 0.001, 200), 3 * common], axis=1)
    raw = np.linalg.pinv(np.cov(returns, rowvar=False)) @ np.ones(2)
    assert (raw / raw.sum())[1] < 0
    np.testing.assert_allclose(min_variance_weights(returns), [1.0, 0.0])
    # fewer returns than assets (singular covariance), and all-constant returns
    w = min_variance_weights(rng.normal(0, 0.01, size=(5, 10)))
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(min_variance_weights(np.zeros((10, 4))), 0.25)


def test_min_variance_weights_two_independent_assets():
    rng = np.random.default_rng(7)
    returns = rng.normal(0, 1, size=(500, 2)) * [0.01, 0.02]
    s = np.cov(returns, rowvar=False)
    inverse = np.linalg.inv(s)
    np.testing.assert_allclose(min_variance_weights(returns), inverse.sum(1) / inverse.sum())


@pytest.mark.slow
def test_min_variance_beats_equal_weight_on_variance():
    rng = np.random.default_rng(8)
    returns = rng.normal(0.0003, 1.0, size=(399, 3)) * [0.01, 0.012, 0.08]
    close = 50.0 * np.vstack([np.ones(3), np.cumprod(1.0 + returns, axis=0)])
    lookback = 60
    mv = min_variance(close, 1e6, 0.001, lookback=lookback)
    ew = equal_weight(close, 1e6, 0.001)
    np.testing.assert_array_equal(mv[:lookback], ew[:lookback])  # equal weight until then
    realised = [np.var(np.diff(v[lookback:]) / v[lookback:-1]) for v in (mv, ew)]
    assert realised[0] < 0.25 * realised[1]


def test_min_variance_has_no_look_ahead():
    close = random_close(9, num_days=100, num_assets=3)
    values = min_variance(close, 1e6, 0.001, lookback=20)
    changed = close.copy()
    changed[50:] *= np.random.default_rng(0).uniform(0.5, 1.5, size=changed[50:].shape)
    np.testing.assert_array_equal(min_variance(changed, 1e6, 0.001, lookback=20)[:50], values[:50])
    with pytest.raises(ValueError):
        min_variance(close, 1e6, 0.001, lookback=1)


# ----------------------------------------------------------------------------- output


def test_format_table():
    close = random_close(10)
    results = {
        "agent": metrics(min_variance(close, 1e6, 0.001, lookback=20)),
        "buy_and_hold": metrics(buy_and_hold(close, 1e6, 0.001)),
        "equal_weight": metrics(equal_weight(close, 1e6, 0.001)),
        "flat": metrics(np.full(5, 1234567.0)),
    }
    table = format_table(results)
    lines = table.splitlines()
    assert len(lines) == 2 + len(results)
    for name in METRICS:
        assert name in lines[0]
    for line, name in zip(lines[2:], results, strict=True):
        assert line.startswith(name)
    flat = lines[-1].split()
    assert flat[1:] == ["0.00%", "0.00%", "0.00%", "n/a", "0.00%", "n/a", "1,234,567.00"]
    bh = results["buy_and_hold"]
    assert f"{100 * bh['annual_volatility']:.2f}%" in lines[3]
    assert f"{bh['sharpe']:.2f}" in lines[3]
    assert f"{bh['final_value']:,.2f}" in lines[3]


def test_plot_equity(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    backend = matplotlib.get_backend()
    close = random_close(11, num_days=30)
    curves = {
        "buy_and_hold": buy_and_hold(close, 1e6, 0.0),
        "equal_weight": equal_weight(close, 1e6, 0.0),
    }
    dates = np.datetime64("2021-01-04") + np.arange(30)
    out = plot_equity([str(d) for d in dates], curves, str(tmp_path / "sub" / "equity.png"), "t")
    assert out == str(tmp_path / "sub" / "equity.png")
    assert (tmp_path / "sub" / "equity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = plot_equity(None, {"short": np.ones(5), **curves}, tmp_path / "day.png")
    assert (tmp_path / "day.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot_equity(dates[:10], curves, tmp_path / "bad.png")
    assert matplotlib.get_backend() == backend  # drawn on its own Agg canvas


def test_module_documents_the_metrics():
    for name in ("cum_returns_final", "annual_return", "sharpe_ratio", "max_drawdown", "calmar"):
        assert name in portfolio.__doc__
