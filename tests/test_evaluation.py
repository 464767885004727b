"""Evaluation on host environments (Sebulba's path): evaluate_host against a hand-rolled
envpool loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.core.evaluation import evaluate_host, summarize_returns
from podracer.envs import host as host_envs
from podracer.types import ActorOutput, Agent


def linear_act(params, actor_state, obs, key):
    """A linear CartPole controller as an agent: logits ``[-s, s]`` with ``s = obs @ params``,
    so the greedy action is 1 (push right) when ``s > 0``."""
    score = obs @ params
    logits = jnp.stack([-score, score], axis=-1)
    zeros = jnp.zeros(obs.shape[0], jnp.float32)
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    out = ActorOutput(action=action, log_prob=zeros, value=zeros, extras={"logits": logits})
    return actor_state, out


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
    "weights, ends_by",
    [
        # velocity only: falls (terminates) after a different number of steps in each env
        ([0.0, 0.0, 0.0, 1.0], "termination"),
        # angle and angular velocity: balances until CartPole-v1's 500-step time limit
        ([0.0, 0.0, 1.0, 0.5], "truncation"),
    ],
)
def test_greedy_evaluate_host_equals_a_hand_rolled_envpool_loop(weights, ends_by):
    weights = np.asarray(weights, np.float32)
    env = host_envs.make("envpool:CartPole-v1", num_envs=8, seed=5)
    try:
        returns = evaluate_host(env, AGENT, jnp.asarray(weights), jax.random.key(0))
    finally:
        env.close()
    expected = hand_rolled_returns(weights, 8, seed=5)
    assert returns.shape == (8,)
    np.testing.assert_array_equal(returns, expected)
    # What each case is there for, so the comparison is not between two trivial runs: episodes
    # that end at different steps (each env's first episode alone is counted), and episodes cut
    # by the time limit (truncation ends an episode as termination does).
    if ends_by == "termination":
        assert len(set(expected.tolist())) > 1 and expected.max() < 500, expected
    else:
        np.testing.assert_array_equal(expected, 500)


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
