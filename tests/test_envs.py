import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from podracer import envs
from podracer.envs.catch import CatchState
from podracer.envs.gymnax import DISCRETE_IDS


def run_episode(env, policy, seed=0, max_steps=2000):
    """Steps one environment until an episode ends; returns the steps and the last TimeStep."""
    params = env.default_params
    step = jax.jit(env.step)
    state, ts = env.reset(jax.random.key(seed), params)
    for t in range(max_steps):
        prev_obs = ts.obs
        state, ts = step(jax.random.key(1000 + t), state, policy(np.asarray(ts.obs)), params)
        if ts.terminated or ts.truncated:
            return t + 1, prev_obs, ts
    raise AssertionError("no episode ended")


def balance(obs):
    return int(obs[2] + 0.5 * obs[3] > 0)  # push towards the side the pole falls to


def test_cartpole_time_limit_is_a_truncation():
    env = envs.make("gymnax:CartPole-v1")
    steps, _, ts = run_episode(env, balance)
    assert steps == 500
    assert bool(ts.truncated) and not bool(ts.terminated)
    # final_obs is the state the time limit cut; obs is already the next episode's first.
    assert not np.allclose(ts.final_obs, ts.obs)
    assert np.all(np.abs(np.asarray(ts.obs)) <= 0.05)  # CartPole resets in [-0.05, 0.05]


def test_cartpole_fall_is_a_termination():
    env = envs.make("gymnax:CartPole-v1")
    steps, prev_obs, ts = run_episode(env, lambda obs: 0)
    assert 5 <= steps < 100
    assert bool(ts.terminated) and not bool(ts.truncated)
    final = np.asarray(ts.final_obs)
    assert abs(final[2]) > 0.2094 or abs(final[0]) > 2.4  # the pole fell (or the cart left)
    assert not np.allclose(final, ts.obs)
    assert not np.allclose(final, prev_obs)


def test_obs_equals_final_obs_while_the_episode_goes_on():
    env = envs.make("gymnax:CartPole-v1")
    state, ts = env.reset(jax.random.key(0), env.default_params)
    state, ts = env.step(jax.random.key(1), state, 1, env.default_params)
    assert not bool(ts.terminated | ts.truncated)
    np.testing.assert_array_equal(ts.obs, ts.final_obs)


def test_discrete_ids_cover_gymnax_registry():
    expected = []
    for name in gymnax.registered_envs:
        if name == "MNISTBandit-bsuite":  # downloads a data set when built
            continue
        env, params = gymnax.make(name)
        if isinstance(env.action_space(params), spaces.Discrete):
            expected.append(name)
    assert sorted(expected) == sorted(DISCRETE_IDS)


@pytest.mark.parametrize("name", ["Acrobot-v1", "Breakout-MinAtar", "DeepSea-bsuite"])
def test_other_gymnax_envs_step_batched(name):
    env = envs.make(f"gymnax:{name}")
    keys = jax.random.split(jax.random.key(0), 3)
    state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, env.default_params)
    assert ts.obs.shape == (3, *env.observation_spec.shape)
    actions = jnp.zeros(3, jnp.int32)
    state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        keys, state, actions, env.default_params
    )
    assert ts.reward.shape == (3,) and ts.terminated.dtype == jnp.bool_


def test_unknown_id_lists_known_ids():
    with pytest.raises(ValueError) as info:
        envs.make("gymnax:CartPole")
    message = str(info.value)
    assert "Did you mean 'gymnax:CartPole-v1'" in message
    for known in ("catch", "gymnax:CartPole-v1", "gymnax:Breakout-MinAtar"):
        assert known in message
    with pytest.raises(ValueError, match="Known ids"):
        envs.make("gymnax:Pendulum-v1")  # continuous actions


def test_catch_dynamics_by_hand():
    env = envs.make("catch")
    params = env.default_params
    state, ts = env.reset(jax.random.key(3), params)
    ball = int(state.ball_column)
    assert int(state.ball_row) == 0 and int(state.paddle_column) == 2
    expected = np.zeros((10, 5), np.float32)
    expected[0, ball] = 1.0
    expected[9, 2] = 1.0
    np.testing.assert_array_equal(ts.obs, expected)

    # Left, left, left: the paddle stops at the wall; the ball falls one row per step.
    for t, paddle in enumerate([1, 0, 0]):
        state, ts = env.step(jax.random.key(t), state, 0, params)
        assert int(state.paddle_column) == paddle and int(state.ball_row) == t + 1
        assert float(ts.reward) == 0.0 and not bool(ts.terminated)

    # From a hand-made state: ball in column 4 one row above the bottom, paddle in column 3.
    state = CatchState(jnp.int32(8), jnp.int32(4), jnp.int32(3))
    _, ts = env.step(jax.random.key(0), state, 2, params)  # move right: caught
    assert float(ts.reward) == 1.0 and bool(ts.terminated) and not bool(ts.truncated)
    assert ts.final_obs[9, 4] == 1.0 and ts.final_obs.sum() == 1.0  # ball on the paddle
    assert ts.obs[0].sum() == 1.0  # a new ball on the top row
    _, ts = env.step(jax.random.key(0), state, 1, params)  # stay: missed
    assert float(ts.reward) == -1.0 and bool(ts.terminated)


def test_catch_episodes_last_nine_steps_and_statistics_wrapper():
    env = envs.EpisodeStatistics(envs.make("catch"))
    params = env.default_params
    step = jax.jit(env.step)
    state, ts = env.reset(jax.random.key(0), params)
    ended = []
    for t in range(27):
        state, ts = step(jax.random.key(t), state, 1, params)
        if ts.info.done:
            ended.append((t + 1, float(ts.info.episode_return), int(ts.info.episode_length)))
            assert float(ts.info.episode_return) == float(ts.reward)
        else:
            assert float(ts.info.episode_return) == 0.0 and int(ts.info.episode_length) == 0
    assert [e[0] for e in ended] == [9, 18, 27]
    assert all(e[2] == 9 and e[1] in (-1.0, 1.0) for e in ended)


def test_episode_statistics_on_cartpole_counts_return_and_length():
    env = envs.EpisodeStatistics(envs.make("gymnax:CartPole-v1"))
    steps, _, ts = run_episode(env, lambda obs: 0)
    assert int(ts.info.episode_length) == steps
    assert float(ts.info.episode_return) == float(steps)  # reward 1 per step
