"""Evaluation on host environments (Sebulba's path): evaluate_host against a hand-rolled
envpool loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import host_envs
from podracer.evaluation import evaluate_host, summarize_returns
from podracer.types import ActorOutput, Agent


def linear_act(params, obs, key):
    """A linear CartPole controller as an agent: logits ``[-s, s]`` with ``s = obs @ params``,
    so the greedy action is 1 (push right) when ``s > 0``."""
    score = obs @ params
    logits = jnp.stack([-score, score], axis=-1)
    zeros = jnp.zeros(obs.shape[0], jnp.float32)
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    return ActorOutput(action=action, log_prob=zeros, value=zeros, logits=logits)


AGENT = Agent(init=None, act=linear_act, prepare=None, loss=None)


def hand_rolled_returns(weights, num_envs, seed):
    """The first episode's return of each env, with envpool stepped directly (gymnasium API)."""
    import envpool

    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, seed=seed)
    obs, _ = env.reset()
    done = np.zeros(num_envs, bool)
    returns = np.zeros(num_envs)
    while not done.all():
        obs, reward, terminated, truncated, _ = env.step((obs @ weights > 0).astype(np.int32))
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    env.close()
    return returns


@pytest.mark.parametrize(
    "weights, expected",
    [
        # velocity only: falls after 100-300 steps, a different length in each env
        ([0.0, 0.0, 0.0, 1.0], [214, 159, 137, 237, 151, 259, 149, 156]),
        # angle and angular velocity: balances until the 500-step time limit
        ([0.0, 0.0, 1.0, 0.5], [500] * 8),
    ],
)
def test_greedy_evaluate_host_equals_a_hand_rolled_envpool_loop(weights, expected):
    weights = np.asarray(weights, np.float32)
    env = host_envs.make("envpool:CartPole-v1", num_envs=8, seed=5)
    try:
        returns = evaluate_host(env, AGENT, jnp.asarray(weights), jax.random.key(0))
    finally:
        env.close()
    assert returns.shape == (8,)
    np.testing.assert_array_equal(returns, hand_rolled_returns(weights, 8, seed=5))
    np.testing.assert_array_equal(returns, expected)  # as recorded: envpool's seed 5


def test_stochastic_evaluate_host_samples_with_its_key():
    """The controller that balances for 500 steps when greedy, sampled: its logits are small
    (|s| ~ 0.05), so it plays almost at random and falls early."""
    weights = jnp.asarray([0.0, 0.0, 1.0, 0.5])

    def run(seed):
        env = host_envs.make("envpool:CartPole-v1", num_envs=8, seed=5)
        try:
            return evaluate_host(env, AGENT, weights, jax.random.key(seed), greedy=False)
        finally:
            env.close()

    first, again, other = run(0), run(0), run(1)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    summary = summarize_returns(first)
    assert summary["episodes"] == 8
    assert summary["min"] >= 8 and summary["max"] < 200, first
