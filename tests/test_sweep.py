"""Sweeps: members vmapped in one program equal separate runs; grid parsing and checks."""

import dataclasses

import jax
import numpy as np
import pytest

from podracer import agents, loops
from podracer.agents import PPOConfig
from podracer.errors import ConfigError
from podracer.experiments import sweep as sweeps
from podracer.loops.anakin import AnakinConfig, train
from podracer.util import stats

PPO = PPOConfig(num_epochs=2, num_minibatches=2, hidden_sizes=(32, 32))
CONFIG = AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=3)
TOTAL = 6 * 64  # 6 updates


def separate(seed, agent_config=PPO):
    result = train(
        "gymnax:CartPole-v1",
        agent_config,
        CONFIG,
        seed=seed,
        total_timesteps=TOTAL,
        devices=jax.devices()[:1],
    )
    return result


def member_params(result, i):
    return [np.asarray(x[i]) for x in jax.tree.leaves(result.state.learner.params)]


def assert_close(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6)


@pytest.mark.slow
def test_four_seed_sweep_equals_four_separate_runs():
    grid = sweeps.Grid(values={}, seeds=4)
    result, rows = sweeps.sweep_in_one_program(
        loops.get("anakin"),
        "gymnax:CartPole-v1",
        agents.get("ppo"),
        PPO,
        CONFIG,
        grid,
        seed=10,
        total_timesteps=TOTAL,
        devices=jax.devices()[:1],
    )
    assert [r["seed"] for r in rows] == [10, 11, 12, 13]
    curves = result.history["return_sum"] / np.maximum(result.history["episodes"], 1)
    assert curves.shape == (4, 6)
    assert len({tuple(np.round(c, 4)) for c in curves}) == 4  # four distinct curves
    for i in range(4):
        alone = separate(10 + i)
        assert_close(member_params(result, i), member_params(alone, 0))
        np.testing.assert_array_equal(result.history["episodes"][i], alone.history["episodes"][0])


@pytest.mark.slow
def test_hyper_parameters_are_traced_per_member():
    grid = sweeps.Grid(values={"lr": (1e-3, 3e-4), "ent_coef": (0.0, 0.05)}, seeds=1)
    result, rows = sweeps.sweep_in_one_program(
        loops.get("anakin"),
        "gymnax:CartPole-v1",
        agents.get("ppo"),
        PPO,
        CONFIG,
        grid,
        seed=0,
        total_timesteps=TOTAL,
        devices=jax.devices()[:1],
    )
    assert [(r["lr"], r["ent_coef"]) for r in rows] == [
        (1e-3, 0.0),
        (1e-3, 0.05),
        (3e-4, 0.0),
        (3e-4, 0.05),
    ]
    np.testing.assert_allclose(result.state.hparams["lr"], [1e-3, 1e-3, 3e-4, 3e-4])
    # Member 3 is the run with lr=3e-4 and ent_coef=0.05, seed 0; member 0 differs from it.
    alone = separate(0, dataclasses.replace(PPO, lr=3e-4, ent_coef=0.05))
    assert_close(member_params(result, 3), member_params(alone, 0))
    assert not np.allclose(member_params(result, 0)[0], member_params(alone, 0)[0])


def test_table_summarizes_each_combination_over_its_seeds():
    grid = sweeps.Grid(values={"lr": (1e-3, 3e-4)}, seeds=3)
    rows = sweeps.member_rows(grid, 0, [1.0, 2.0, 9.0, 4.0, None, 6.0])
    table = sweeps.table(grid, rows)
    assert [r["lr"] for r in table] == [1e-3, 3e-4]
    assert table[0] == {"lr": 1e-3, **stats.summarize([1.0, 2.0, 9.0])}
    assert table[1]["n"] == 2 and table[1]["mean"] == 5.0


def test_sweep_flags_and_checks():
    values, rest = sweeps.parse_sweep_flags(
        ["--sweep.lr", "1e-3,3e-4", "--agent.num-epochs", "2", "--sweep.ent-coef=0,0.01"]
    )
    assert values == {"lr": (1e-3, 3e-4), "ent_coef": (0.0, 0.01)}
    assert rest == ["--agent.num-epochs", "2"]
    with pytest.raises(ConfigError, match=r"--sweep.lr='fast' is not allowed"):
        sweeps.parse_sweep_flags(["--sweep.lr", "fast"])
    with pytest.raises(ConfigError, match=r"--sweep.max-grad-norm is not allowed.*lr, gamma"):
        sweeps.check_grid(agents.get("ppo"), PPO, sweeps.Grid({"max_grad_norm": (0.5,)}))
    with pytest.raises(ConfigError, match=r"PPOConfig.gamma=1.5 is not allowed"):
        sweeps.check_grid(agents.get("ppo"), PPO, sweeps.Grid({"gamma": (0.9, 1.5)}))
