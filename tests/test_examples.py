"""The extension examples: an agent in one file (A2C) and an environment of one's own (the
corridor), each used through the library as the docs describe."""

import importlib.util
import json
import pathlib
import sys

import jax
import numpy as np
import pytest

from podracer import agents, envs
from podracer.loops.anakin import AnakinConfig, train

pytestmark = pytest.mark.slow  # the full tier (docs/design.md, "Tests")

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def load():
    """Imports an example module (which registers its agent or environment); afterwards the
    registrations are undone, so the other tests see the library's own registries."""
    from podracer import agents

    loaded = []

    def load(name):
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    agents.AGENTS.pop("a2c", None)
    envs.factory._REGISTRY.pop("corridor", None)
    for name in loaded:
        sys.modules.pop(name, None)


def test_corridor_dynamics_and_registration(load):
    load("custom_env")
    env = envs.make("corridor", length=3, max_steps=3)
    params = env.default_params
    state, ts = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(ts.obs, [1, 0, 0])
    state, ts = env.step(jax.random.key(1), state, 0, params)  # left at the wall: stays
    assert float(ts.reward) == pytest.approx(-0.01) and not ts.terminated and not ts.truncated
    state, ts = env.step(jax.random.key(2), state, 1, params)  # to the middle
    np.testing.assert_array_equal(ts.obs, ts.final_obs)
    state, ts = env.step(jax.random.key(3), state, 1, params)  # the goal, at step 3: terminated
    assert bool(ts.terminated) and not bool(ts.truncated)
    assert float(ts.reward) == pytest.approx(0.99)
    np.testing.assert_array_equal(ts.final_obs, [0, 0, 1])
    np.testing.assert_array_equal(ts.obs, [1, 0, 0])  # auto-reset
    for action in (0, 0, 0):  # three steps at the left wall: the time limit truncates
        state, ts = env.step(jax.random.key(4), state, action, params)
    assert bool(ts.truncated) and not bool(ts.terminated)
    with pytest.raises(ValueError, match="already registered"):
        envs.register("corridor", object)
    with pytest.raises(ValueError, match="built-in id"):
        envs.register("gymnax:CartPole-v1", object)
    with pytest.raises(ValueError, match=r"unknown environment id 'coridor'.*'corridor'"):
        envs.make("coridor")


def test_ppo_learns_the_registered_corridor(load):
    load("custom_env")
    from podracer.agents import PPOConfig

    result = train(
        "corridor",
        PPOConfig(),
        AnakinConfig(num_envs=8, rollout_len=64),
        total_timesteps=60_000,
        devices=jax.devices()[:1],
    )
    # The optimum is 1 - 0.01 x 7 = 0.93 (7 steps right); a random walk mostly hits the limit.
    assert result.summary["final_return"] >= 0.83


@pytest.mark.slow
def test_a2c_in_one_file_learns_with_anakin_and_runs_with_sebulba(two_devices, load):
    a2c = load("a2c_agent")
    agents.register(a2c.SPEC)
    from podracer.loops import sebulba
    from podracer.loops.sebulba import SebulbaConfig

    config = a2c.A2CConfig()
    result = train(
        "gymnax:CartPole-v1",
        config,
        AnakinConfig(num_envs=16, rollout_len=16, num_seeds=2),
        total_timesteps=100_000,
        devices=two_devices[:1],
    )
    assert min(result.summary["final_return_per_seed"]) >= 100  # random play: about 22
    run = sebulba.train(
        "envpool:CartPole-v1",
        config,
        SebulbaConfig(learner_device_ids=(1,), envs_per_actor=8, rollout_len=16),
        total_timesteps=3 * 8 * 16,
        devices=two_devices,
    )
    assert run.summary["num_updates"] == 3 and np.isfinite(run.summary["params_checksum"])


def test_tournament_example_trains_a_tiny_population(load, tmp_path, capsys):
    """examples/tournament_ppo.py end to end on a tiny budget: 4 members, 4 updates, a leaderboard
    and a tournament every 2 updates, in a run directory."""
    from podracer.agents import PPOConfig
    from podracer.population.ensemble import PopulationConfig

    example = load("tournament_ppo")
    run_dir = tmp_path / "run"
    example.main(
        example.Args(
            total_timesteps=4 * 16,  # 4 updates of 2 envs x 8 steps per member
            run_dir=str(run_dir),
            anakin=AnakinConfig(num_envs=2, rollout_len=8),
            population=PopulationConfig(
                size=4, interval=2, init=("lr=1e-4:1e-2",), eval_episodes=1, eval_max_steps=50
            ),
            ppo=PPOConfig(anneal_lr=False, num_epochs=1, num_minibatches=1, hidden_sizes=(8, 8)),
        )
    )
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["population"] == 4 and summary["num_updates"] == 4
    scores = summary["final_scores"]
    # Acrobot costs -1 a step until the goal; evaluation episodes end at 50 steps, before which
    # no member reaches the goal after 4 tiny updates: every score is -50.
    assert scores == [-50.0] * 4
    assert summary["final_best_score"] == summary["final_median_score"] == -50.0
    boards = [json.loads(line) for line in (run_dir / "leaderboard.jsonl").read_text().splitlines()]
    assert [b["updates"] for b in boards] == [2, 4]
    assert all(len(b["members"]) == 4 and len(b["replaced"]) == 1 for b in boards)
    assert boards[1]["scores"] == scores
    # The member replaced at update 2 shows its lineage at update 4.
    first = boards[0]["replaced"][0]
    copy = next(m for m in boards[1]["members"] if m["member"] == first["member"])
    assert copy["parent"] == first["parent"] and copy["copies"] == 1
    assert copy["since"] == 2 and copy["age"] == 2
    console = " ".join(err.split())  # rich wraps long lines
    assert console.count("leaderboard steps") == 2
    assert f"replaced {first['member']}<-{first['parent']}" in console
    assert console.count("; age ") == 6  # the 3 best members of each leaderboard


def test_locomotion_tournament_example_on_brax(load, tmp_path, capsys):
    """examples/tournament_locomotion.py as a smoke run: Anakin PPO with the brax preset
    (Gaussian policy, normalisation), 2 members, 4 updates, a tournament at update 2. On
    brax:inverted_pendulum, whose reward is a constant (a carry typing case inside shard_map
    that ant does not reach), rather than the example's default ant."""
    pytest.importorskip("brax")
    from podracer.population.ensemble import PopulationConfig

    example = load("tournament_locomotion")
    run_dir = tmp_path / "run"
    summary = example.main(
        example.Args(
            env="brax:inverted_pendulum?backend=positional&episode_length=16",
            total_timesteps=4 * 4 * 8,  # 4 updates of 4 envs x 8 steps per member
            run_dir=str(run_dir),
            population=PopulationConfig(
                size=2,
                interval=2,
                fraction=0.5,
                hparams=("lr", "init_log_std"),
                init=("lr=1e-4:1e-3", "init_log_std=-1.0:0.0"),
                eval_episodes=1,
                eval_max_steps=16,
            ),
            ppo={"num_minibatches": 2, "num_epochs": 1, "hidden_sizes": (16, 16)},
            anakin={"num_envs": 4, "rollout_len": 8},
        )
    )
    assert summary["population"] == 2 and summary["num_updates"] == 4
    assert all(np.isfinite(score) for score in summary["final_scores"])
    boards = [json.loads(line) for line in (run_dir / "leaderboard.jsonl").read_text().splitlines()]
    assert [b["updates"] for b in boards] == [2, 4]
    first = {m["member"]: m["hparams"] for m in boards[0]["members"]}
    assert sorted(h["init_log_std"] for h in first.values()) == pytest.approx([-1.0, 0.0])
    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent_config"]["normalize_observations"] is True  # the brax preset
    assert np.isfinite(summary["params_checksum"])


def test_memory_chain_example_trains_and_evaluates_greedily_with_carries(load, capsys):
    """examples/memory_chain.py on a tiny budget: a recurrent PPO run on MemoryChain with its
    memory length set, then a greedy evaluation whose returns are MemoryChain's +1 or -1."""
    from podracer.agents import PPOConfig

    example = load("memory_chain")
    args = example.Args(  # on the test's 2 devices: 2 sequences each, 2 minibatches of 1
        memory_length=3,
        total_timesteps=4 * 4 * 32,
        num_envs=4,
        rollout_len=32,
        ppo=PPOConfig(memory="gru", num_minibatches=2),
    )
    summary = example.main(args)
    assert summary["num_updates"] == 4 and summary["memory"] == "gru"
    assert summary["env"] == "gymnax:MemoryChain-bsuite"
    assert -1.0 <= summary["eval_return"] <= 1.0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary


def test_stock_trading_example_trains_and_backtests_a_real_price_file(load, tmp_path, capsys):
    """examples/stock_trading.py on a tiny budget with a real daily price file (the NASDAQ
    Composite and the S&P 500, 1999-2018, in FinRL's long format): PPO with its trading preset,
    then the backtest over the days from 2016: the JSON line, the file, the PNG, and
    buy-and-hold equal to the direct computation from the file's prices."""
    from price_files import real_index_prices

    path, tables = real_index_prices(tmp_path)
    example = load("stock_trading")
    args = example.Args(
        csv=str(path),
        split="2016-01-04",
        window=32,
        initial_cash=100_000,
        total_timesteps=4096,
        run_dir=str(tmp_path / "run"),
    )
    small = ("--arch.num-envs", "8", "--arch.rollout-len", "16", "--agent.num-epochs", "1")
    record = example.main(args, small)
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1]) == record
    assert set(record) >= {"agent", "buy_and_hold", "equal_weight", "min_variance"}
    assert "preset 'trading'" in err and "equity curves" in err
    assert (tmp_path / "run" / "backtest_test.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "run" / "backtest_test.json").read_text()) == record
    assert record["first_day"] == "2016-01-04" and record["last_day"] == "2018-12-31"
    close = np.array([[float(row["Close"]) for row in tables[tic]] for tic in ("NASDAQ", "SP500")])
    first = [row["Date"] for row in tables["NASDAQ"]].index("1/4/2016")
    assert record["days"] == close.shape[1] - first
    shares = 100_000 / 2 / (close[:, first] * 1.001)  # equal cash, the 0.1% cost paid
    assert record["buy_and_hold"]["final_value"] == pytest.approx(shares @ close[:, -1], rel=1e-9)
    assert record["agent"]["final_value"] > 0
