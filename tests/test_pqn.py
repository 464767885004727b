"""PQN: its lambda-returns against a NumPy recursion, the exploration schedule, the LayerNorm
network, and learning CartPole through the command line on both loops."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import PQNConfig, build
from podracer.agents.policy import epsilon_at
from podracer.agents.pqn import lambda_returns
from podracer.networks import QNetwork
from podracer.types import ActorOutput, DiscreteActionSpec, ObservationSpec, Trajectory


def numpy_lambda_returns(reward, terminated, truncated, q_next_max, gamma, lam):
    """G_t = r_t + gamma_t [(1 - lambda_t) q'_t + lambda_t G_{t+1}], G bootstrapped from q' at
    the last step; gamma_t = 0 at a termination, lambda_t = 0 at any episode end."""
    num_steps = reward.shape[0]
    out = np.zeros_like(reward, np.float64)
    g = q_next_max[-1]
    for t in reversed(range(num_steps)):
        discount = 0.0 if terminated[t] else gamma
        trace = 0.0 if (terminated[t] or truncated[t]) else lam
        nxt = g if t < num_steps - 1 else q_next_max[t]
        g = reward[t] + discount * ((1 - trace) * q_next_max[t] + trace * nxt)
        out[t] = g
    return out


def test_lambda_returns_equal_a_numpy_recursion():
    reward = np.array([1.0, 0.0, 2.0, 1.0, -1.0, 0.5], np.float32)
    terminated = np.array([0, 0, 1, 0, 0, 0], bool)
    truncated = np.array([0, 0, 0, 0, 1, 0], bool)
    q_next = np.array([3.0, 2.0, 7.0, 1.5, 4.0, 2.5], np.float32)
    got = lambda_returns(
        reward[:, None], terminated[:, None], truncated[:, None], q_next[:, None], 0.9, 0.5
    )
    expected = numpy_lambda_returns(reward, terminated, truncated, q_next, 0.9, 0.5)
    np.testing.assert_allclose(got[:, 0], expected, rtol=1e-6)
    # by hand at the ends: a termination takes its reward only; a truncation bootstraps from
    # its own final observation's value; the last step from its bootstrap value
    assert got[2, 0] == pytest.approx(2.0)
    assert got[4, 0] == pytest.approx(-1.0 + 0.9 * 4.0)
    assert got[5, 0] == pytest.approx(0.5 + 0.9 * 2.5)
    assert got[3, 0] == pytest.approx(1.0 + 0.9 * (0.5 * 1.5 + 0.5 * (-1.0 + 0.9 * 4.0)))


def test_prepare_targets_use_the_params_before_the_update():
    agent, _ = build(PQNConfig(q_lambda=0.7, gamma=0.95), DiscreteActionSpec(3), 10)
    params = agent.init(jax.random.key(0), jnp.zeros(4))
    rng = np.random.default_rng(0)
    num_steps, num_envs = 5, 2
    obs = rng.normal(size=(num_steps, num_envs, 4)).astype(np.float32)
    bootstrap = rng.normal(size=(num_steps, num_envs, 4)).astype(np.float32)
    traj = Trajectory(
        obs=obs,
        reward=rng.normal(size=(num_steps, num_envs)).astype(np.float32),
        terminated=np.array([[0, 0], [1, 0], [0, 0], [0, 0], [0, 0]], bool),
        truncated=np.array([[0, 0], [0, 0], [0, 1], [0, 0], [0, 0]], bool),
        bootstrap_obs=bootstrap,
        behaviour=ActorOutput(
            action=rng.integers(0, 3, size=(num_steps, num_envs)),
            log_prob=np.zeros((num_steps, num_envs), np.float32),
            value=np.zeros((num_steps, num_envs), np.float32),
        ),
    )
    batch = agent.prepare(params, jnp.int32(0), traj, jnp.mean)
    assert batch.obs.shape == (10, 4) and batch.target.shape == (10,)
    net = QNetwork(3, (128, 128), "relu", True)
    q_next = np.asarray(net.apply(params, bootstrap.reshape(-1, 4))).max(-1).reshape(5, 2)
    for env in range(num_envs):
        expected = numpy_lambda_returns(
            traj.reward[:, env],
            traj.terminated[:, env],
            traj.truncated[:, env],
            q_next[:, env],
            0.95,
            0.7,
        )
        np.testing.assert_allclose(batch.target.reshape(5, 2)[:, env], expected, rtol=1e-5)


def test_epsilon_decays_linearly_then_stays():
    config = PQNConfig(epsilon_start=1.0, epsilon_finish=0.1, epsilon_decay=0.5)
    values = [float(epsilon_at(config, jnp.int32(u), 100)) for u in (0, 25, 50, 80)]
    np.testing.assert_allclose(values, [1.0, 0.55, 0.1, 0.1], rtol=1e-6)
    agent, _ = build(config, DiscreteActionSpec(2), 100)
    params = agent.init(jax.random.key(0), jnp.zeros(3))
    state = agent.init_state(jax.random.key(1), params)
    for _ in range(25):
        state = agent.update_state(state, params, None, None)
    acting = agent.actor_params(params, state)
    assert float(acting.epsilon) == pytest.approx(0.55)
    # acting at epsilon 0.55 over 2 actions: the greedy action 1 - 0.55 / 2 of the time
    _, out = agent.act(acting, (), jnp.zeros((20000, 3)), jax.random.key(2))
    greedy = np.asarray(out.extras["logits"]).argmax(-1)
    assert np.mean(np.asarray(out.action) == greedy) == pytest.approx(1 - 0.55 / 2, abs=0.01)
    np.testing.assert_allclose(
        np.exp(out.log_prob), np.where(out.action == greedy, 1 - 0.55 / 2, 0.55 / 2), rtol=1e-5
    )


def test_the_network_has_a_layer_norm_after_each_dense_layer():
    agent, _ = build(PQNConfig(hidden_sizes=(16, 8)), DiscreteActionSpec(2), 1)
    params = agent.init(jax.random.key(0), jnp.zeros(3))
    names = sorted(params["params"]["MLP_0"])
    assert names == ["Dense_0", "Dense_1", "LayerNorm_0", "LayerNorm_1"]
    assert agent.init_state(jax.random.key(0), params) == 0
    assert build(
        PQNConfig(layer_norm=False), DiscreteActionSpec(2), 1, ObservationSpec((3,), np.float32)
    )


def podracer(*args, timeout=280):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_pqn_learns_cartpole_from_the_command_line(tmp_path):
    # Measured with these defaults, 5e5 steps, seeds 0 and 1 one at a time: 500 and 500.
    summary = podracer(
        "train",
        "--agent",
        "pqn",
        "--total-timesteps",
        "500000",
        "--quiet",
        "--no-tensorboard",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert summary["final_return"] >= 475.0, summary


@pytest.mark.slow
def test_sebulba_pqn_learns_envpool_cartpole_from_the_command_line(tmp_path):
    # Measured with the defaults (32 envs x 64 steps per update), 3e5 steps: 500 for seeds 0
    # and 1 in about 10 s. Deterministic mode (rollout k acts with the params of update k - 1):
    # in the default mode the actors' lag depends on timing, and the same command gave 456 or
    # 230 from one run to the next.
    summary = podracer(
        "train",
        "--agent",
        "pqn",
        "--arch",
        "sebulba",
        "--arch.deterministic",
        "True",
        "--env",
        "envpool:CartPole-v1",
        "--total-timesteps",
        "300000",
        "--quiet",
        "--no-tensorboard",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert summary["final_return"] >= 400.0, summary


@pytest.mark.slow
def test_minatar_gets_the_papers_network_and_settings_from_the_command_line(tmp_path):
    """``--env gymnax:*-MinAtar`` applies PQN's minatar preset (the MinAtar CNN over [H, W, C]
    frames, 128 envs x 32 steps, ...) under the user's flags, and says so."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    argv = ["train", "--agent", "pqn", "--env", "gymnax:Breakout-MinAtar", "--run-dir", str(run)]
    argv += ["--total-timesteps", str(2 * 128 * 32), "--agent.lr", "1e-3", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", *argv, "--no-tensorboard"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "preset 'minatar' for --agent pqn on gymnax:Breakout-MinAtar" in done.stderr
    config = json.loads((run / "config.json").read_text())
    agent, arch = config["agent_config"], config["arch_config"]
    assert agent["torso"] == "minatar_cnn" and agent["channels_first"] is False
    assert (agent["num_epochs"], agent["num_minibatches"], agent["lr"]) == (2, 32, 1e-3)
    assert (arch["num_envs"], arch["rollout_len"]) == (128, 32)
    assert json.loads(done.stdout.strip().splitlines()[-1])["num_updates"] == 2
