"""The trading environment (podracer/trading/environment.py): FinRL's rules against a NumPy
re-implementation, its periods (nothing read past the split, nothing from after day t in day
t's observation), its parameters and their errors, and both loops on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import envs
from podracer.errors import ConfigError
from podracer.trading import environment as trading
from podracer.trading import market
from podracer.trading.environment import Trading, TradingParams


def random_prices(days=300, assets=4, seed=0):
    rng = np.random.default_rng(seed)
    returns = rng.normal(0.0003, 0.015, (days, assets))
    return 100.0 * np.exp(rng.uniform(-1, 1, assets)) * np.exp(np.cumsum(returns, axis=0))


def environment(close, **params) -> Trading:
    dates = np.busday_offset("2010-01-04", np.arange(close.shape[0]), roll="forward")
    data = market.market_data(close, dates=dates)
    return Trading(data, TradingParams(**params), "trading:test")


def reference_trade(cash, holdings, close, action, p: TradingParams):
    """FinRL's StockTradingEnv rules, one asset at a time, in float32 as the environment."""
    f32 = np.float32
    cash, holdings = f32(cash), holdings.astype(np.int64).copy()
    action = np.clip(action, -1.0, 1.0)
    order = np.where(np.abs(action) < p.dead_zone, 0.0, action * p.hmax)
    order = np.trunc(order.astype(f32)).astype(np.int64)
    for i in range(len(order)):  # sells first
        if order[i] < 0:
            n = min(-order[i], holdings[i])
            cash = f32(cash + f32(close[i] * f32(n) * f32(1 - p.cost_rate)))
            holdings[i] -= n
    unit = (close * f32(1 + p.cost_rate)).astype(f32)
    for i in np.argsort(-order, kind="stable"):  # then buys, the largest first
        if order[i] > 0:
            n = min(order[i], int(np.floor(cash / unit[i])))
            n -= int(f32(n) * unit[i] > cash)
            cash = f32(cash - f32(n) * unit[i])
            holdings[i] += n
    return cash, holdings


def test_steps_match_finrl_rules_in_numpy():
    """200 random steps of 4 portfolios with little cash (buys are capped by it): cash,
    holdings and reward equal the NumPy re-implementation's; cash and holdings stay >= 0."""
    close = random_prices()
    env = environment(close, initial_cash=20_000.0, hmax=40, cost_rate=0.002, window=0)
    params = env.default_params
    num_envs, steps = 4, 200
    state, _ = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(jax.random.key(0), num_envs), params
    )
    actions = np.random.default_rng(1).uniform(-1.3, 1.3, (steps, num_envs, 4)).astype(np.float32)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    cash = np.full(num_envs, params.initial_cash, np.float32)
    holdings = np.zeros((num_envs, 4), np.int64)
    day = env.lo
    for t in range(steps):
        keys = jax.random.split(jax.random.key(t + 1), num_envs)
        state, ts = step(keys, state, jnp.asarray(actions[t]), params)
        for b in range(num_envs):
            before = cash[b] + holdings[b] @ close[day].astype(np.float32)
            cash[b], holdings[b] = reference_trade(
                cash[b], holdings[b], close[day].astype(np.float32), actions[t, b], params
            )
            after = cash[b] + holdings[b] @ close[day + 1].astype(np.float32)
            np.testing.assert_allclose(ts.reward[b], (after - before) * 1e-4, atol=2e-4)
        day += 1
        # to 1e-5 of the cash, 1e-6 of the initial cash where the cash is nearly spent (f32)
        np.testing.assert_allclose(np.asarray(state.cash), cash, rtol=1e-5, atol=0.02)
        np.testing.assert_array_equal(np.asarray(state.holdings), holdings)
        assert (np.asarray(state.cash) >= 0).all() and (np.asarray(state.holdings) >= 0).all()
    assert holdings.sum() > 0 and (cash < 0.5 * params.initial_cash).any()  # buys were capped


def test_episode_is_a_window_of_days_ending_in_truncation():
    close = random_prices(days=200)
    env = environment(close, window=10)
    params = env.default_params
    state, ts = env.reset(jax.random.key(3), params)
    start = int(state.day)
    assert env.lo <= start <= env.hi - 1 - 10
    for t in range(10):
        stepped, ts = env.step(jax.random.key(t), state, jnp.full(4, 0.5), params)
        assert bool(ts.truncated) == (t == 9) and not bool(ts.terminated)
        if t < 9:
            state = stepped
    assert int(state.day) == start + 9
    assert float(stepped.cash) == params.initial_cash and int(stepped.holdings.sum()) == 0
    # the last observation is of the day the episode ended on, before the reset
    np.testing.assert_allclose(ts.final_obs[1:5], close[start + 10] / close[0], rtol=1e-6)


def test_observation_has_nothing_from_after_its_day():
    """Prices after day t changed: every observation up to day t is unchanged."""
    close = random_prices(days=260)
    changed = close.copy()
    t = 150
    changed[t + 1 :] *= np.random.default_rng(5).uniform(0.5, 2.0, changed[t + 1 :].shape)
    observations = []
    for prices in (close, changed):
        env = environment(prices, window=0, split="0.99", validation=0.0, turbulence=True)
        params = env.default_params
        state, ts = env.reset(jax.random.key(0), params)

        def one(state, key, env=env, params=params):
            state, ts = env.step(key, state, jnp.full(4, 0.3), params)
            return state, ts.obs

        _, seen = jax.lax.scan(one, state, jax.random.split(jax.random.key(1), t))
        observations.append(np.concatenate([ts.obs[None], seen]))
    np.testing.assert_array_equal(observations[0], observations[1])


def test_training_reads_nothing_past_the_split():
    """The days from the validation period on are changed: training episodes (random windows,
    many resets) are the same, rewards and observations; the test period's are not."""
    close = random_prices(days=400)
    lo_validation, _ = trading.period_days(
        market.market_data(close).dates, TradingParams(period="validation")
    )
    changed = close.copy()
    changed[lo_validation:] *= 3.0
    runs, num_envs = [], 8
    for prices in (close, changed):
        env = environment(prices, window=30)
        params = env.default_params
        state, _ = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(jax.random.key(0), num_envs), params
        )

        def one(state, key, env=env, params=params, num_envs=num_envs):
            keys = jax.random.split(key, num_envs)
            action = jax.random.uniform(key, (num_envs, 4), minval=-1, maxval=1)
            state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
            return state, (ts.reward, ts.obs, state.day)

        _, out = jax.lax.scan(one, state, jax.random.split(jax.random.key(1), 300))
        runs.append(jax.device_get(out))
    for a, b in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert runs[0][2].max() < lo_validation


def test_periods_split_the_days():
    close = random_prices(days=500)
    data = market.market_data(close)
    train = trading.period_days(data.dates, TradingParams(period="train"))
    validation = trading.period_days(data.dates, TradingParams(period="validation"))
    test = trading.period_days(data.dates, TradingParams(period="test"))
    assert train == (0, 360) and validation == (360, 400) and test == (400, 500)
    env = environment(close, period="test", window=0)
    assert (env.lo, env.hi, env.steps) == (400, 500, 99)
    params = env.default_params
    assert env.evaluation_params(params).period == "validation"
    assert env.evaluation_params(params.replace(validation=0.0)).period == "train"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"hmax": 0}, "hmax=0 is not allowed"),
        ({"cost_rate": 1.5}, "cost_rate=1.5 is not allowed"),
        ({"initial_cash": -1.0}, "initial_cash=-1.0 is not allowed"),
        ({"window": 10_000}, "window=10000 is not allowed"),
        ({"period": "future"}, "period='future' is not allowed"),
        ({"validation": 0.999}, "validation=0.999 is not allowed"),
        ({"split": "tomorrow"}, "tomorrow"),
    ],
)
def test_bad_params_get_one_line_errors(params, message):
    with pytest.raises(ConfigError, match=message) as error:
        environment(random_prices(days=300), **{"window": 10, **params})
    assert "\n" not in str(error.value)


def test_env_params_reach_the_synthetic_environment():
    env = envs.make_with_options(
        "trading:synthetic",
        envs.EnvOptions(params={"num_assets": "3", "days": "300", "hmax": "7", "window": "20"}),
    )
    assert env.num_assets == 3 and env.default_params.hmax == 7
    assert env.observation_spec.shape == (1 + 2 * 3 + 3 * len(env.data.feature_names),)
    assert env.action_spec.shape == (3,)
    with pytest.raises(ConfigError, match=r"has no parameter 'hmx'.*did you mean hmax"):
        envs.make_with_options("trading:synthetic", envs.EnvOptions(params={"hmx": 1}))
    with pytest.raises(ConfigError, match=r"trading:PATH\.csv"):
        envs.make("trading:prices.parquet")


SMALL = envs.EnvOptions(params={"num_assets": 3, "days": 300, "window": 16})


def test_evaluations_play_the_validation_period_on_both_loops():
    """Anakin's evaluator (and a population's scores) and Sebulba's evaluation environment
    play the whole validation period from its first day, not training windows."""
    from podracer import agents
    from podracer.core.evaluation import make_evaluator
    from podracer.loops.sebulba import SebulbaConfig
    from podracer.loops.sebulba.loop import env_factory

    env = envs.make_with_options("trading:synthetic", SMALL)
    validation = env.default_params.replace(period="validation", window=0)
    spec = agents.get("ppo")
    agent = spec.make_agent(spec.config_cls(), env.action_spec)
    params = agent.init(jax.random.key(0), jnp.zeros((1, *env.observation_spec.shape)))
    key = jax.random.key(1)
    sampled = {"num_episodes": 2, "greedy": False}  # a fresh policy's means are in the dead zone
    default = make_evaluator(env, agent, **sampled)(params, key)
    explicit = make_evaluator(env, agent, **sampled, env_params=validation)(params, key)
    training = make_evaluator(env, agent, **sampled, env_params=env.default_params)
    np.testing.assert_array_equal(default, explicit)
    assert not np.allclose(default, training(params, key))
    config = SebulbaConfig(envs_per_actor=2, rollout_len=4)
    host = env_factory("trading:synthetic", config, 0, SMALL, evaluation=True)(0)
    actor = env_factory("trading:synthetic", config, 0, SMALL)(0)
    assert host._params == validation and actor._params == env.default_params
    host.close()
    actor.close()


def test_sebulba_trains_on_trading_and_its_run_backtests(tmp_path, capsys):
    """The JAX environment stepped on Sebulba's host: PPO trains from the command line, and
    ``podracer backtest`` plays its learner's params over the test period."""
    import json

    from podracer.cli import main as cli

    run_dir = str(tmp_path / "run")
    params = [f"--env-param={k}={v}" for k, v in SMALL.params]
    argv = ["train", "--arch", "sebulba", "--agent", "ppo", "--env", "trading:synthetic"]
    sizes = ["--arch.envs-per-actor", "4", "--arch.rollout-len", "8", "--total-timesteps", "96"]
    assert cli.main([*argv, *params, *sizes, "--run-dir", run_dir, "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["total_steps"] == 96 and np.isfinite(summary["params_checksum"])
    assert cli.main(["backtest", run_dir, "--no-plot"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["days"] == 60 and record["member"] == 0 and record["step"] == 96


def test_backtest_takes_a_populations_best_member(tmp_path):
    """The best member of the last leaderboard record (members are listed best first)."""
    import json

    from podracer.cli import backtest

    assert backtest.best_member(str(tmp_path)) is None
    records = [
        {"kind": "leaderboard", "members": [{"member": 2, "score": 5.0}]},
        {"kind": "leaderboard", "members": [{"member": 6, "score": 9.0}, {"member": 1}]},
    ]
    path = tmp_path / "leaderboard.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert backtest.best_member(str(tmp_path)) == 6
