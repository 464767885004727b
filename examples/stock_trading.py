"""Stock trading: train on a portfolio of assets, backtest on held-out days, draw the curves.

    python examples/stock_trading.py                          # PPO, 30 assets, 1e6 steps
    python examples/stock_trading.py --agent sac
    python examples/stock_trading.py --population 8           # the tournament (ElegantRL)
    python examples/stock_trading.py --csv prices.csv         # your data (FinRL's long format)

The data are ``trading:synthetic`` (correlated geometric Brownian motion; ``--signal-drift``
plants one asset that rises faster) or a CSV file. Training draws episodes of ``--window`` days
from the training period; the backtest then plays the greedy policy over the test period (the
days after ``--split``, never seen in training) from its first day, next to buy-and-hold, equal
weight rebalanced daily and minimum variance, all paying the same costs. It prints the table and
one JSON line, and writes ``backtest_test.png`` and ``backtest_test.json`` in the run directory.
The same as commands::

    podracer train --agent ppo --env trading:synthetic --total-timesteps 1000000 --run-dir runs/t
    podracer backtest runs/t

See docs/trading.md.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import tyro

from podracer.cli import backtest
from podracer.cli import main as cli
from podracer.trading import portfolio


@dataclasses.dataclass(frozen=True)
class Args:
    agent: str = "ppo"
    """ppo or sac (each with its trading preset, podracer/loops/presets.py)."""
    csv: str = ""
    """A price file in FinRL's long format (date,tic,close[,open,high,low,volume]); empty: the
    synthetic data."""
    num_assets: int = 30
    """Assets of the synthetic data."""
    days: int = 2520
    """Days of the synthetic data (10 years of trading days)."""
    signal_drift: float = 0.0
    """Added to asset 0's annual drift in the synthetic data (0: no planted signal)."""
    split: str = "0.8"
    """The first test day: a fraction of the days or a date (YYYY-MM-DD)."""
    window: int = 256
    """Days of a training episode."""
    initial_cash: float = 1_000_000.0
    cost_rate: float = 0.001
    total_timesteps: int = 1_000_000
    population: int = 0
    """Members of a tournament (0: one agent); members are ranked on the validation period."""
    seed: int = 0
    run_dir: str = "runs/stock_trading"


def env_params(args: Args) -> dict:
    params = {
        "split": args.split,
        "window": args.window,
        "initial_cash": args.initial_cash,
        "cost_rate": args.cost_rate,
    }
    if not args.csv:
        params.update(num_assets=args.num_assets, days=args.days, signal_drift=args.signal_drift)
    return params


def main(args: Args, extra: tuple[str, ...] = (), cpu_cores: bool = False) -> dict:
    """Trains (``extra``: more ``podracer train`` flags; ``cpu_cores``: one XLA device per CPU
    core, before JAX starts, as the command line does), backtests, prints; returns the
    backtest's record."""
    env_id = f"trading:{args.csv}" if args.csv else "trading:synthetic"
    argv = ["train", "--agent", args.agent, "--env", env_id, "--seed", str(args.seed)]
    for name, value in env_params(args).items():
        argv += ["--env-param", f"{name}={value}"]
    argv += ["--total-timesteps", str(args.total_timesteps), "--run-dir", args.run_dir]
    if args.population:
        argv += ["--population", str(args.population)]
    code = cli.main([*argv, *extra], cpu_cores=cpu_cores)
    if code != 0:
        raise SystemExit(code)
    record = backtest.backtest_run(args.run_dir, period="test")
    table = {name: record[name] for name in ("agent", *backtest.BASELINES)}
    print(portfolio.format_table(table), file=sys.stderr)
    print(f"equity curves: {args.run_dir}/backtest_test.png", file=sys.stderr)
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main(tyro.cli(Args), cpu_cores=True)
