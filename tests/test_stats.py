"""IQM, bootstrap intervals, summaries and tables, checked against hand-computed numbers."""

import math

import numpy as np
import pytest

from podracer.util.stats import SUMMARY_KEYS, bootstrap_ci, format_table, iqm, summarize


def trim_mean_reference(x, proportion=0.25):
    """scipy.stats.trim_mean's definition, written out with a loop."""
    values = sorted(float(v) for v in x)
    n = len(values)
    cut = int(proportion * n)
    total, count = 0.0, 0
    for i in range(cut, n - cut):
        total += values[i]
        count += 1
    return total / count


def test_iqm_hand_examples():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # keeps 3, 4, 5, 6
    # n = 5: int(1.25) = 1 dropped from each end; sorted 1, 2, 7, 10, 40 keeps 2, 7, 10.
    assert iqm([10, 1, 40, 7, 2]) == pytest.approx(19 / 3)
    # n = 3: int(0.75) = 0, so the plain mean.
    assert iqm([3.0, -1.0, 10.0]) == pytest.approx(4.0)
    assert iqm([7.0]) == 7.0
    # n = 4: one dropped from each end, outliers do not matter.
    assert iqm([-1000.0, 2.0, 4.0, 1000.0]) == pytest.approx(3.0)


@pytest.mark.parametrize("n", range(1, 21))
def test_iqm_equals_trim_mean_definition(n):
    rng = np.random.default_rng(n)
    x = rng.standard_cauchy(n)
    assert iqm(x) == pytest.approx(trim_mean_reference(x), rel=1e-12, abs=1e-12)


def test_iqm_along_axis():
    x = np.random.default_rng(0).normal(size=(6, 9))
    row_iqms = iqm(x, axis=-1)
    assert row_iqms.shape == (6,)
    np.testing.assert_allclose(row_iqms, [trim_mean_reference(r) for r in x])
    np.testing.assert_allclose(iqm(x, axis=0), [trim_mean_reference(c) for c in x.T])


def test_iqm_empty_is_a_clear_error():
    with pytest.raises(ValueError, match="iqm: x has no values"):
        iqm([])


def test_bootstrap_ci_contains_statistic_and_is_deterministic():
    x = np.random.default_rng(1).normal(loc=3.0, size=20)
    low, high = bootstrap_ci(x, seed=7)
    assert low < iqm(x) < high
    assert (low, high) == bootstrap_ci(x, seed=7)
    assert (low, high) != bootstrap_ci(x, seed=8)
    mean_low, mean_high = bootstrap_ci(x, np.mean, seed=7)
    assert mean_low < x.mean() < mean_high


def test_bootstrap_ci_narrows_with_more_samples():
    rng = np.random.default_rng(2)
    widths = []
    for n in (10, 100, 1000):
        low, high = bootstrap_ci(rng.normal(size=n), np.mean)
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # The mean's 95% interval is about 2 * 1.96 / sqrt(n) wide for unit variance.
    assert widths[2] == pytest.approx(2 * 1.96 / math.sqrt(1000), rel=0.15)


def test_bootstrap_ci_wider_with_more_confidence():
    x = np.random.default_rng(3).normal(size=30)
    low90, high90 = bootstrap_ci(x, confidence=0.9)
    low99, high99 = bootstrap_ci(x, confidence=0.99)
    assert low99 <= low90 and high90 <= high99


def test_bootstrap_ci_one_value():
    assert bootstrap_ci([5.0]) == (5.0, 5.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x": []}, "bootstrap_ci: x is empty"),
        ({"x": [1.0, 2.0], "confidence": 1.5}, r"confidence=1.5 is not allowed: .*\(0, 1\)"),
        ({"x": [1.0, 2.0], "confidence": 0.0}, r"confidence=0.0 is not allowed"),
        ({"x": [1.0, 2.0], "num_resamples": 0}, r"num_resamples=0 is not allowed: .*>= 1"),
        (
            {"x": [1.0, 2.0], "statistic": lambda v, axis: v},
            "must reduce axis=-1",
        ),
    ],
)
def test_bootstrap_ci_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_ci(**kwargs)


def test_summarize_hand_example():
    summary = summarize([4.0, 1.0, np.nan, 3.0, 2.0, 10.0])
    assert list(summary) == list(SUMMARY_KEYS)
    assert summary["n"] == 5
    assert summary["mean"] == pytest.approx(4.0)
    # deviations from 4: 0, -3, -1, -2, 6 -> squares sum to 50; ddof=1 -> 50 / 4.
    assert summary["std"] == pytest.approx(math.sqrt(12.5))
    assert summary["median"] == 3.0
    assert summary["iqm"] == pytest.approx(3.0)  # sorted 1, 2, 3, 4, 10 keeps 2, 3, 4
    assert summary["iqm_ci_low"] <= summary["iqm"] <= summary["iqm_ci_high"]
    assert summary["min"] == 1.0 and summary["max"] == 10.0


def test_summarize_empty_and_single():
    assert summarize([np.nan, np.nan]) == {"n": 0, **{k: None for k in SUMMARY_KEYS[1:]}}
    assert summarize([]) == {"n": 0, **{k: None for k in SUMMARY_KEYS[1:]}}
    single = summarize([2.5])
    assert single["n"] == 1 and single["std"] is None
    assert single["iqm"] == single["iqm_ci_low"] == single["iqm_ci_high"] == 2.5


def test_format_table():
    rows = [
        {"run": "ppo", "n": 3, "iqm": 123.456789, "std": None},
        {"run": "impala-long", "n": 12, "iqm": 0.000123456},
    ]
    table = format_table(rows, ["run", "n", "iqm", "std"])
    assert table.splitlines() == [
        "run           n        iqm  std",
        "-----------  --  ---------  ---",
        "ppo           3      123.5  -",
        "impala-long  12  0.0001235  -",
    ]


def test_format_table_bad_input():
    with pytest.raises(ValueError, match=r"columns=\[\] is not allowed"):
        format_table([{"a": 1}], [])
    with pytest.raises(ValueError, match=r"rows\[1\] is a list"):
        format_table([{"a": 1}, [1]], ["a"])
