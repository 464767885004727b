"""Multi-stock trading: a portfolio of ``D`` assets traded once a day, in JAX.

FinRL's ``StockTradingEnv`` (Liu et al., 2020, https://arxiv.org/abs/2011.09607) and
ElegantRL-Podracer's trading showcase (Li et al., 2021, https://arxiv.org/abs/2112.05923) step
NumPy environments in lock-step over one shared day. Here every environment is an independent
portfolio with its own window of days, stepped inside the compiled program, so thousands of them
run on one device.

Ids: ``trading:synthetic`` (correlated geometric Brownian motion from a seed,
:func:`podracer.trading.market.synthetic`) and ``trading:PATH.csv`` (a file in FinRL's long
format, ``date,tic,close`` with optional ``open,high,low,volume``:
:func:`podracer.trading.market.load_csv`).

**The days.** The data's ``T`` days are cut in three periods: *train* (episodes are drawn
inside it), *validation* (its last ``validation`` fraction, held out to score members of a
population) and *test* (from ``split``: a fraction of the days or a date; only
``podracer backtest --period test`` reads it). An environment of one period never reads a price
or a feature of a day outside it: its day index stays in ``[lo, hi)``.

**A step** at day ``d``, with close prices ``p = close[d]``:

1. the action ``a`` in ``[-1, 1]^D`` (clipped) is an order of ``trunc(a * hmax)`` whole shares
   per asset; ``|a| < dead_zone`` is no order;
2. sells first: ``min(-order, held)`` shares of each asset, for ``p * n * (1 - cost_rate)``;
3. then buys, the largest order first: ``min(order, n_max)`` shares where ``n_max`` is the most
   whole shares the cash left pays for at ``p * (1 + cost_rate)`` each;
4. the day advances; the reward is the change of the portfolio's value
   ``cash + holdings . close[d + 1]`` over the step (costs included) times ``reward_scale``.

Cash and holdings never go below 0. An episode of ``window`` steps starts on a day drawn
uniformly from those that leave room for it (``window=0``: the whole period, from its first day,
as a backtest plays it) and ends as a *truncation* (the value of the portfolio goes on).

**The observation** at day ``d`` (f32, nothing from a day after ``d``): cash /
``initial_cash``; the close prices over the data's first day's; each position's value /
``initial_cash``; the ``K`` scale-free indicators of every asset
(:func:`podracer.trading.market.scaled_features`: MACD, Bollinger bands, RSI-30, CCI-30, DX-30,
SMA-30/60); with ``turbulence=true`` FinRL's turbulence index over ``D``.

Every field of :class:`TradingParams` (and :class:`SyntheticParams` for the generator) is set
by ``--env-param NAME=VALUE``; ``docs/trading.md`` has the task, the data format and the
pitfalls.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from podracer.errors import ConfigError
from podracer.types import BoundedActionSpec, ObservationSpec, TimeStep
from podracer.util.validation import check_fields

PERIODS = ("train", "validation", "test")


def _static(default):
    return struct.field(pytree_node=False, default=default)


@struct.dataclass
class TradingParams:
    """The task's settings (all static: a change recompiles)."""

    hmax: int = _static(100)
    """Most shares one order buys or sells of an asset (an action of 1 or -1)."""
    initial_cash: float = _static(1_000_000.0)
    """Cash at the start of an episode (no holdings)."""
    cost_rate: float = _static(0.001)
    """Cost per side, a fraction of the traded notional (0.1%)."""
    reward_scale: float = _static(1e-4)
    """Reward = change of the portfolio's value x reward_scale (FinRL's 1e-4)."""
    dead_zone: float = _static(0.1)
    """Actions with |a| below it are no order."""
    window: int = _static(256)
    """Steps (trading days) of an episode, from a random day; 0: the whole period from its start."""
    split: str = _static("0.8")
    """First day of the test period: a fraction of the days (0.8) or a date (2016-01-04)."""
    validation: float = _static(0.1)
    """Fraction of the days before the split held out at the end of training (0: none)."""
    period: str = _static("train")
    """The days episodes are drawn from: train, validation or test."""
    turbulence: bool = _static(False)
    """Add FinRL's turbulence index (over D) to the observation."""


@struct.dataclass
class SyntheticParams(TradingParams):
    """:class:`TradingParams` and the generator's (:func:`podracer.trading.market.synthetic`)."""

    num_assets: int = _static(30)
    days: int = _static(2520)
    drift: float = _static(0.05)
    """Annual drift of every asset's price."""
    volatility: float = _static(0.2)
    """Annual volatility of every asset's price."""
    correlation: float = _static(0.3)
    """Correlation of any two assets' daily log returns."""
    signal_drift: float = _static(0.0)
    """Added to asset 0's annual drift: a planted signal."""
    seed: int = _static(0)
    """The data's seed (the same seed gives the same prices)."""


SYNTHETIC_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(SyntheticParams)
    if f not in dataclasses.fields(TradingParams)
)
"""The generator's fields, in :func:`podracer.trading.market.synthetic`'s order."""


@struct.dataclass
class TradingState:
    cash: jax.Array  # f32 []
    holdings: jax.Array  # i32 [D] shares held
    day: jax.Array  # i32 []: index of the current day in the data
    end: jax.Array  # i32 []: the day the episode ends on
    value: jax.Array  # f32 []: cash + holdings . close[day]


class Trading:
    """The trading environment (see the module docstring) on ``data`` (a
    :class:`~podracer.trading.market.MarketData`) with ``params``."""

    auto_reset = True
    """Whether ``step`` resets an episode that ends (as
    :attr:`podracer.envs.jax.base.Adapter.auto_reset`)."""

    def __init__(self, data, params: TradingParams, env_id: str):
        _check(env_id, params)
        self.id = env_id
        self.data = data
        self._params = params
        self.lo, self.hi, self.steps = episode_days(data.dates, params, env_id)
        self._close = jnp.asarray(data.close, jnp.float32)  # [T, D]
        self._close_ref = jnp.asarray(data.close[0], jnp.float32)
        self._features = jnp.asarray(data.features.reshape(data.features.shape[0], -1))
        self._turbulence = jnp.asarray(data.turbulence / data.close.shape[1], jnp.float32)

    @property
    def num_assets(self) -> int:
        return int(self.data.close.shape[1])

    @property
    def default_params(self) -> TradingParams:
        return self._params

    def with_params(self, params: TradingParams) -> Trading:
        """This task with ``params`` (``--env-param``): new data where a generator's field
        changed."""
        return build(self.id, params)

    def evaluation_params(self, params: TradingParams) -> TradingParams:
        """The params a run's evaluation and a population's scores play with: the whole
        validation period from its first day (the training period's when there is none), so
        members are ranked on days none of them trained on."""
        period = "validation" if params.validation > 0 else "train"
        return params.replace(period=period, window=0)

    @property
    def observation_spec(self) -> ObservationSpec:
        d, k = self.data.features.shape[1:]
        size = 1 + 2 * d + d * k + int(self._params.turbulence)
        return ObservationSpec((size,), jnp.dtype(jnp.float32))

    @property
    def action_spec(self) -> BoundedActionSpec:
        return BoundedActionSpec((self.num_assets,), -1.0, 1.0)

    # --- the dynamics -------------------------------------------------------------------------

    def _bounds(self, params: TradingParams) -> tuple[int, int, int]:
        if params is self._params:
            return self.lo, self.hi, self.steps
        return episode_days(self.data.dates, params, self.id)

    def _start(self, key, params: TradingParams) -> TradingState:
        lo, hi, steps = self._bounds(params)
        day = jax.random.randint(key, (), lo, hi - steps, dtype=jnp.int32)
        holdings = jnp.zeros(self.num_assets, jnp.int32)
        cash = jnp.asarray(params.initial_cash, jnp.float32)
        return TradingState(cash, holdings, day, day + steps, cash)

    def _observe(self, state: TradingState, params: TradingParams) -> jax.Array:
        close = self._close[state.day]
        parts = [
            (state.cash / params.initial_cash)[None],
            close / self._close_ref,
            state.holdings * close / params.initial_cash,
            self._features[state.day],
        ]
        if params.turbulence:
            parts.append(self._turbulence[state.day][None])
        return jnp.concatenate(parts).astype(jnp.float32)

    def reset(self, key, params: TradingParams):
        state = self._start(key, params)
        obs = self._observe(state, params)
        return state, TimeStep.first(obs)

    def step(self, key, state: TradingState, action, params: TradingParams):
        cash, holdings = trade(state.cash, state.holdings, self._close[state.day], action, params)
        day = state.day + 1
        value = cash + jnp.dot(holdings.astype(jnp.float32), self._close[day])
        reward = ((value - state.value) * params.reward_scale).astype(jnp.float32)
        stepped = TradingState(cash, holdings, day, state.end, value)
        truncated = day >= state.end
        final_obs = self._observe(stepped, params)
        if not self.auto_reset:
            terminated = jnp.zeros_like(truncated)
            return stepped, TimeStep(final_obs, reward, terminated, truncated, final_obs)
        fresh = self._start(key, params)
        state = jax.tree.map(lambda a, b: jnp.where(truncated, a, b), fresh, stepped)
        obs = jnp.where(truncated, self._observe(fresh, params), final_obs)
        terminated = jnp.zeros_like(truncated)
        return state, TimeStep(obs, reward, terminated, truncated, final_obs)

    def __repr__(self) -> str:
        return (
            f"Trading({self.id!r}, assets={self.num_assets}, period={self._params.period} "
            f"days {self.lo}..{self.hi - 1})"
        )


def trade(cash, holdings, close, action, params: TradingParams):
    """One day's orders at ``close`` prices: ``(cash, holdings)`` after the sells, then the
    buys, largest first (see the module docstring). Unbatched: ``cash []``, ``holdings [D]``."""
    action = jnp.clip(action, -1.0, 1.0)
    order = jnp.where(jnp.abs(action) < params.dead_zone, 0.0, action * params.hmax)
    order = jnp.trunc(order).astype(jnp.int32)
    sold = jnp.minimum(jnp.maximum(-order, 0), holdings)
    cash = cash + jnp.sum(close * sold.astype(jnp.float32) * (1.0 - params.cost_rate))
    holdings = holdings - sold
    unit = close * (1.0 + params.cost_rate)  # the cash one share costs

    def buy(cash, i):
        wanted = jnp.maximum(order[i], 0)
        afford = jnp.floor(cash / unit[i]).astype(jnp.int32)
        afford = afford - (afford.astype(jnp.float32) * unit[i] > cash)  # rounding
        bought = jnp.minimum(wanted, jnp.maximum(afford, 0))
        return cash - bought.astype(jnp.float32) * unit[i], bought

    order_of_buys = jnp.argsort(-order, stable=True)
    cash, bought = jax.lax.scan(buy, cash, order_of_buys)
    holdings = holdings.at[order_of_buys].add(bought)
    return cash, holdings


# --- periods, ids and data --------------------------------------------------------------------


def period_days(dates, params: TradingParams) -> tuple[int, int]:
    """``(lo, hi)``: the days ``[lo, hi)`` of ``params.period`` among ``dates``."""
    from podracer.trading import market

    if params.period not in PERIODS:
        raise ConfigError(
            f"trading: period={params.period!r} is not allowed: choose one of {', '.join(PERIODS)}"
        )
    if not 0.0 <= params.validation < 1.0:
        raise ConfigError(
            f"trading: validation={params.validation} is not allowed: it is a fraction of the "
            "training days in [0, 1)"
        )
    test = market.split_index(dates, params.split)
    held = round(params.validation * test)
    if params.validation > 0 and (held < 2 or test - held < 2):
        raise ConfigError(
            f"trading: validation={params.validation} is not allowed with split="
            f"{params.split}: it holds {held} of the {test} training days; each part needs 2 "
            "or more"
        )
    bounds = {"train": (0, test - held), "validation": (test - held, test), "test": (test, None)}
    lo, hi = bounds[params.period]
    return lo, len(dates) if hi is None else hi


def episode_days(dates, params: TradingParams, env_id: str) -> tuple[int, int, int]:
    """``(lo, hi, steps)``: the period's days ``[lo, hi)`` (:func:`period_days`) and the steps
    of an episode in it (``window``, or the whole period's ``hi - lo - 1``)."""
    lo, hi = period_days(dates, params)
    length = hi - lo - 1
    if params.window < 0 or params.window > length:
        raise ConfigError(
            f"{env_id}: window={params.window} is not allowed: the {params.period} period has "
            f"{length + 1} days, so a window is 0 (the whole period) to {length} steps"
        )
    return lo, hi, params.window or length


def _check(env_id: str, params: TradingParams) -> None:
    for name in ("hmax",):
        if getattr(params, name) < 1:
            raise ConfigError(
                f"{env_id}: {name}={getattr(params, name)} is not allowed: it must be >= 1"
            )
    for name in ("initial_cash", "reward_scale"):
        if not getattr(params, name) > 0:
            raise ConfigError(
                f"{env_id}: {name}={getattr(params, name)} is not allowed: it must be > 0"
            )
    for name in ("cost_rate", "dead_zone"):
        if not 0.0 <= getattr(params, name) < 1.0:
            raise ConfigError(
                f"{env_id}: {name}={getattr(params, name)} is not allowed: it must be in [0, 1)"
            )


@functools.lru_cache(maxsize=8)
def _synthetic(*args):
    from podracer.trading import market

    return market.synthetic(*args)


@functools.lru_cache(maxsize=8)
def _csv(path: str, modified: float):
    from podracer.trading import market

    return market.load_csv(path)


def build(env_id: str, params: TradingParams) -> Trading:
    """The environment of ``env_id`` with ``params``; data are loaded (or generated) once per
    process and reused."""
    _check(env_id, params)
    if isinstance(params, SyntheticParams):
        data = _synthetic(*(getattr(params, name) for name in SYNTHETIC_FIELDS))
    else:
        path = env_id.removeprefix("trading:")
        modified = os.path.getmtime(path) if os.path.exists(path) else 0.0
        data = _csv(path, modified)
    return Trading(data, params, env_id)


def make(env_id: str, **kwargs: Any) -> Trading:
    """``trading:synthetic`` or ``trading:PATH.csv``; ``kwargs`` are fields of its params."""
    name = env_id.removeprefix("trading:")
    kind = SyntheticParams if name == "synthetic" else TradingParams
    if name != "synthetic" and not name.lower().endswith(".csv"):
        raise ConfigError(
            f"unknown environment id {env_id!r}: the trading ids are trading:synthetic and "
            "trading:PATH.csv (a file in FinRL's long format, docs/trading.md)"
        )
    check_fields(env_id, kind, kwargs, "the trading environment")
    return build(env_id, kind(**kwargs))


__all__ = [
    "PERIODS",
    "SyntheticParams",
    "Trading",
    "TradingParams",
    "TradingState",
    "episode_days",
    "make",
    "period_days",
    "trade",
]
