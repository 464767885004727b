"""``podracer backtest RUN_DIR``: a trained trading agent against the baselines, with costs.

The greedy policy of a run's checkpoint plays one environment over a whole period of the data
(``--period test``, the default: the days from the split on, which training never read; or
``validation`` or ``train``), from the period's first day with the run's initial cash, costs
and every other ``--env-param``. Buy-and-hold and equal weight rebalanced daily (and long-only
minimum variance) run on the same days, cash and cost rate (:mod:`podracer.trading.portfolio`). Each
gets the metrics of :func:`podracer.trading.portfolio.metrics`.

Output: a table on stderr; ``backtest_<period>.json`` and ``backtest_<period>.png`` (the equity
curves) in the run directory; the JSON as one line on stdout::

    {"period": "test", "days": ..., "first_day": ..., "last_day": ..., "member": 0, "step": ...,
     "agent": {...}, "buy_and_hold": {...}, "equal_weight": {...}, "min_variance": {...}}

A run of several members (``--num-seeds``, ``--population``) backtests one: ``--member`` or,
for a population, the best of its last leaderboard.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from podracer.errors import ConfigError
from podracer.runs.rundir import LEADERBOARD_FILE
from podracer.util.validation import ArgumentParser

PERIODS = ("test", "validation", "train")
BASELINES = ("buy_and_hold", "equal_weight", "min_variance")


def agent_values(env, env_params, agent, actor_params, key=None) -> np.ndarray:
    """The portfolio's value ``[steps + 1]`` (day 0 included) of ``agent``'s greedy policy
    over one whole episode of ``env`` (a trading environment whose ``default_params`` are
    ``env_params``; ``window=0``: a whole period), from the rewards."""
    from podracer.core.acting import batched_env_step, greedy_agent, reset_and_act, step_and_record
    from podracer.core.rollout import reset_envs

    steps = env.steps  # the episode's: the whole period with window=0
    act = reset_and_act(greedy_agent(agent))
    env_step = batched_env_step(env, env_params, 1)
    key = jax.random.key(0) if key is None else key

    @jax.jit
    def play(actor_params, key):
        reset_key, key = jax.random.split(key)
        state = reset_envs(env, reset_key[None], env_params, agent.initial_actor_state)

        def body(state, key):
            act_key, step_key = jax.random.split(key)
            state, step, _ = step_and_record(act, env_step, actor_params, state, act_key, step_key)
            return state, step.reward[0]

        _, rewards = jax.lax.scan(body, state, jax.random.split(key, steps))
        return rewards

    rewards = np.asarray(play(actor_params, key), np.float64)
    changes = rewards / env_params.reward_scale
    return env_params.initial_cash + np.concatenate([[0.0], np.cumsum(changes)])


def baselines(close: np.ndarray, initial_cash: float, cost_rate: float) -> dict[str, np.ndarray]:
    """The baselines' values ``[T]`` on prices ``close [T, D]``."""
    from podracer.trading import portfolio

    return {
        "buy_and_hold": portfolio.buy_and_hold(close, initial_cash, cost_rate),
        "equal_weight": portfolio.equal_weight(close, initial_cash, cost_rate),
        "min_variance": portfolio.min_variance(close, initial_cash, cost_rate),
    }


def best_member(run_dir: str) -> int | None:
    """The best member of a population's last leaderboard (``leaderboard.jsonl``), or None."""
    path = os.path.join(run_dir, LEADERBOARD_FILE)
    if not os.path.isfile(path):
        return None
    last = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                last = json.loads(line)
    if not last or not last.get("members"):
        return None
    return int(last["members"][0]["member"])


def policy_of(system, state, member: int):
    """``(agent, actor_params)`` of one member of a restored state: the members are the
    leading axis of its ``learner`` (every loop's state)."""
    from podracer.core.learner.skeleton import one_device

    agent = system.recipe.agent
    learner = state.learner
    members = jax.tree.leaves(learner.params)[0].shape[0]
    if not 0 <= member < members:
        raise ConfigError(
            f"--member {member} is not allowed: the run has {members} member(s), 0 to {members - 1}"
        )
    learner = jax.tree.map(lambda x: x[member], learner)
    learner = jax.device_get(learner)
    return agent, agent.actor_params(learner.params, one_device(agent, learner.agent_state))


def trading_spec(run_dir: str):
    """The :class:`~podracer.runs.RunSpec` of ``run_dir``; a run that did not train on a
    trading environment is a :class:`ConfigError`."""
    from podracer.runs import load_spec

    spec = load_spec(run_dir)
    if not spec.env.startswith("trading:"):
        raise ConfigError(
            f"podracer backtest: {run_dir!r} trained on {spec.env}, not a trading environment "
            "(trading:synthetic, trading:PATH.csv)"
        )
    return spec


def backtest_run(
    run_dir: str,
    *,
    period: str = "test",
    member: int | None = None,
    step: int | None = None,
    best: bool = False,
    plot: bool = True,
) -> dict[str, Any]:
    """Backtests a trading run's checkpoint (see the module docstring); returns the JSON
    record (also written to ``backtest_<period>.json`` in ``run_dir``)."""
    from podracer.envs import make_with_options
    from podracer.runs import restore_run
    from podracer.trading import portfolio

    if period not in PERIODS:
        raise ConfigError(f"--period {period!r} is not allowed: choose one of {', '.join(PERIODS)}")
    spec = trading_spec(run_dir)
    env = make_with_options(
        spec.env, spec.env_options.merged(params={"period": period, "window": 0})
    )
    env_params = env.default_params
    if member is None:
        member = (best_member(run_dir) if spec.population is not None else None) or 0
    system, state, meta = restore_run(spec, run_dir, step=step, best=best)
    agent, actor_params = policy_of(system, state, member)
    values = {"agent": agent_values(env, env_params, agent, actor_params)}
    close = np.asarray(env.data.close[env.lo : env.hi], np.float64)
    values.update(baselines(close, env_params.initial_cash, env_params.cost_rate))
    dates = env.data.dates[env.lo : env.hi]
    record = {
        "period": period,
        "days": int(close.shape[0]),
        "first_day": str(dates[0]),
        "last_day": str(dates[-1]),
        "member": member,
        "step": int(meta["step"]),
        **{name: portfolio.metrics(curve) for name, curve in values.items()},
    }
    stem = os.path.join(run_dir, f"backtest_{period}")
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    if plot:
        title = f"{spec.agent} on {spec.env}, {period} period ({dates[0]} to {dates[-1]})"
        portfolio.plot_equity(dates, values, stem + ".png", title=title)
    return record


def main(argv: Sequence[str]) -> dict[str, Any]:
    """The ``podracer backtest`` command."""
    from podracer.trading import portfolio

    parser = ArgumentParser(
        prog="podracer backtest",
        description="Backtest a trading run's greedy policy against buy-and-hold and equal "
        "weight, with costs (docs/trading.md).",
    )
    parser.add_argument("run_dir", help="a run directory (podracer train --run-dir)")
    parser.add_argument(
        "--period", default="test", choices=PERIODS, help="the days played (default: test)"
    )
    parser.add_argument(
        "--member",
        type=int,
        help="the member of a run of several (default: a population's "
        "best on its last leaderboard, else 0)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="the checkpoint to backtest (the latest)")
    which.add_argument("--best", action="store_true", help="the best evaluation's checkpoint")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the flags and the run directory's config, then exit: nothing computed",
    )
    args = parser.parse_args(list(argv))
    if args.dry_run:
        from podracer.runs import dry_run_saved

        return dry_run_saved("backtest", args.run_dir, step=args.step, check=trading_spec)
    record = backtest_run(
        args.run_dir,
        period=args.period,
        member=args.member,
        step=args.step,
        best=args.best,
        plot=not args.no_plot,
    )
    table = {name: record[name] for name in ("agent", *BASELINES)}
    print(
        f"backtest of {args.run_dir}, member {record['member']}, {record['period']} period: "
        f"{record['days']} days, {record['first_day']} to {record['last_day']}",
        file=sys.stderr,
    )
    print(portfolio.format_table(table), file=sys.stderr)
    print(json.dumps(record), flush=True)
    return record


__all__ = [
    "agent_values",
    "backtest_run",
    "baselines",
    "best_member",
    "main",
    "policy_of",
    "trading_spec",
]
