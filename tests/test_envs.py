import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from podracer import envs
from podracer.envs.jax.catch import CatchState
from podracer.envs.jax.gymnax import CONTINUOUS_IDS, DISCRETE_IDS
from podracer.types import BoundedActionSpec, DiscreteActionSpec


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
    for known in ("CartPole-v1", "Breakout-MinAtar", "Pendulum-v1"):  # gymnax's names
        assert known in message
    with pytest.raises(ValueError, match="not one of the gymnax: environments"):
        envs.make("gymnax:MNISTBandit-bsuite")  # left out: it downloads a data set
    with pytest.raises(ValueError, match=r"Did you mean 'catch'.*Known ids.*gymnax:CartPole-v1"):
        envs.make("cath")  # no family's id: every known id


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


def test_continuous_ids_cover_gymnax_registry():
    expected = []
    for name in gymnax.registered_envs:
        if name == "MNISTBandit-bsuite":  # downloads a data set when built
            continue
        env, params = gymnax.make(name)
        if isinstance(env.action_space(params), spaces.Box):
            expected.append(name)
    assert sorted(expected) == sorted(CONTINUOUS_IDS)
    assert all(f"gymnax:{name}" in envs.KNOWN_IDS for name in CONTINUOUS_IDS)


def test_pendulum_action_spec():
    env = envs.make("gymnax:Pendulum-v1")
    spec = env.action_spec
    assert isinstance(spec, BoundedActionSpec)
    assert spec.shape == (1,) and spec.dtype == "float32"
    for bound, value in ((spec.low, -2.0), (spec.high, 2.0)):
        assert isinstance(bound, np.ndarray) and bound.dtype == np.float32
        np.testing.assert_array_equal(bound, np.full((1,), value, np.float32))
    assert env.observation_spec.shape == (3,)
    assert isinstance(envs.make("gymnax:CartPole-v1").action_spec, DiscreteActionSpec)


def test_pendulum_step_equals_gymnax_step():
    env = envs.make("gymnax:Pendulum-v1")
    raw, params = gymnax.make("Pendulum-v1")
    state, ts = env.reset(jax.random.key(0), params)
    raw_obs, raw_state = raw.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(ts.obs, raw_obs)
    for t, torque in enumerate([1.5, -0.7, 2.0]):
        action = jnp.array([torque], jnp.float32)  # action_spec.shape
        key = jax.random.key(10 + t)
        state, ts = env.step(key, state, action, params)
        raw_obs, raw_state, raw_reward, _, _, _ = raw.step(key, raw_state, action, params)
        assert ts.obs.shape == (3,) and ts.reward.shape == () and ts.reward.dtype == jnp.float32
        np.testing.assert_array_equal(ts.obs, raw_obs)
        np.testing.assert_array_equal(ts.final_obs, raw_obs)
        assert float(ts.reward) == float(raw_reward)
        assert not bool(ts.terminated | ts.truncated)


def test_pendulum_time_limit_is_a_truncation():
    env = envs.make("gymnax:Pendulum-v1")
    params = env.default_params

    @jax.jit
    def run(key):
        state, _ = env.reset(key, params)

        def body(state, key):
            return env.step(key, state, jnp.array([0.5], jnp.float32), params)

        return jax.lax.scan(body, state, jax.random.split(key, 200))

    state, ts = run(jax.random.key(0))
    done = np.asarray(ts.terminated | ts.truncated)
    assert not np.any(ts.terminated)
    assert np.flatnonzero(done).tolist() == [199]  # the 200th step
    assert bool(ts.truncated[199])
    # final_obs is where the 200th step went; obs is already a fresh episode's first.
    np.testing.assert_array_equal(ts.obs[:199], ts.final_obs[:199])
    assert not np.allclose(ts.obs[199], ts.final_obs[199])
    theta, theta_dot = float(state.theta), float(state.theta_dot)
    assert int(state.time) == 0 and abs(theta_dot) <= 1.0  # reset
    np.testing.assert_allclose(ts.obs[199], [np.cos(theta), np.sin(theta), theta_dot], atol=1e-6)


@pytest.mark.parametrize("name", CONTINUOUS_IDS)
def test_continuous_gymnax_envs_step_batched(name):
    env = envs.make(f"gymnax:{name}")
    spec = env.action_spec
    keys = jax.random.split(jax.random.key(0), 3)
    state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, env.default_params)
    actions = jnp.broadcast_to(jnp.asarray(spec.high), (3, *spec.shape))
    state, ts = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(
        keys, state, actions, env.default_params
    )
    assert ts.obs.shape == (3, *env.observation_spec.shape)
    assert ts.obs.dtype == env.observation_spec.dtype
    assert ts.reward.shape == (3,) and ts.reward.dtype == jnp.float32
    assert ts.terminated.dtype == jnp.bool_ and ts.truncated.dtype == jnp.bool_


def test_discrete_step_is_gymnax_step():
    env = envs.make("gymnax:CartPole-v1")
    raw, params = gymnax.make("CartPole-v1")
    state, _ = env.reset(jax.random.key(0), params)
    raw_obs, raw_state = raw.reset(jax.random.key(0), params)
    for t in range(3):
        key = jax.random.key(t)
        state, ts = env.step(key, state, t % 2, params)
        raw_obs, raw_state, raw_reward, _, _, info = raw.step(key, raw_state, t % 2, params)
        np.testing.assert_array_equal(ts.obs, raw_obs)
        np.testing.assert_array_equal(ts.final_obs, info["final_observation"])
        assert float(ts.reward) == float(raw_reward)
