"""The envpool adapter: podracer's TimeStep semantics on top of envpool, in sync and async mode."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.envs import host as host_envs
from podracer.envs.host.checks import continuous_actions
from podracer.envs.host.jax_env import JaxHostEnvironment
from podracer.errors import ConfigError
from podracer.types import BoundedActionSpec, DiscreteActionSpec, ObservationSpec, TimeStep

THETA_LIMIT = 12 * 2 * np.pi / 360  # 0.2095 rad: CartPole terminates beyond it
X_LIMIT = 2.4


def cartpole_fell(obs):
    """[B, 4] -> [B]: the CartPole state is terminal."""
    return (np.abs(obs[:, 2]) > THETA_LIMIT) | (np.abs(obs[:, 0]) > X_LIMIT)


def is_reset_obs(obs):
    """[B, 4] -> [B]: a CartPole reset draws every component in [-0.05, 0.05]."""
    return np.all(np.abs(obs) <= 0.05, axis=-1)


def balance(obs):
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int32)


@pytest.fixture
def make():
    envs = []

    def _make(env_id, **kwargs):
        env = host_envs.make(env_id, **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()


def test_cartpole_sync_constant_action_terminates_with_same_step_reset(make):
    env = make("envpool:CartPole-v1", num_envs=4, seed=3)
    assert env.observation_spec == ObservationSpec((4,), np.dtype(np.float32))
    assert env.action_spec == DiscreteActionSpec(2)
    assert (env.num_envs, env.batch_size, env.is_async) == (4, 4, False)

    ts = env.reset()
    assert ts.obs.shape == (4, 4) and ts.reward.dtype == np.float32
    assert is_reset_obs(ts.obs).all() and np.array_equal(ts.final_obs, ts.obs)
    assert not ts.done.any() and not ts.info.done.any()

    steps = np.zeros(4, int)  # steps of each env's running episode
    episodes = 0
    for t in range(1, 61):
        ts = env.step(np.zeros(4, np.int32))
        steps += 1
        assert ts.obs.shape == ts.final_obs.shape == (4, 4)
        assert ts.reward.dtype == np.float32 and np.all(ts.reward == 1.0)
        assert not ts.truncated.any()
        assert not (ts.terminated & ts.truncated).any()
        np.testing.assert_array_equal(ts.terminated, cartpole_fell(ts.final_obs))
        done = ts.done
        np.testing.assert_array_equal(ts.obs[~done], ts.final_obs[~done])
        assert is_reset_obs(ts.obs[done]).all()
        assert not is_reset_obs(ts.final_obs[done]).any()
        np.testing.assert_array_equal(ts.info.done, done)
        np.testing.assert_array_equal(ts.info.episode_length, np.where(done, steps, 0))
        np.testing.assert_array_equal(ts.info.episode_return, ts.info.episode_length)
        assert np.all((steps[done] >= 8) & (steps[done] <= 30)), (t, steps)
        episodes += done.sum()
        steps[done] = 0
    assert episodes >= 8  # about 2 to 7 episodes per env in 60 steps


@pytest.mark.slow
def test_cartpole_balancing_reaches_time_limit_truncated(make):
    env = make("envpool:CartPole-v1", num_envs=2, seed=1)
    ts = env.reset()
    for _ in range(499):
        ts = env.step(balance(ts.obs))
        assert not ts.done.any()
    ts = env.step(balance(ts.obs))
    np.testing.assert_array_equal(ts.truncated, [True, True])
    np.testing.assert_array_equal(ts.terminated, [False, False])
    assert not cartpole_fell(ts.final_obs).any()
    assert is_reset_obs(ts.obs).all()
    np.testing.assert_array_equal(ts.info.episode_length, [500, 500])
    np.testing.assert_array_equal(ts.info.episode_return, [500.0, 500.0])
    ts = env.step(balance(ts.obs))  # the next episode goes on
    assert not ts.done.any() and np.all(ts.reward == 1.0)


def test_terminal_state_on_time_limit_step_is_terminated(make):
    # With action 0 some envs fall at exactly step 8 and others do not: envpool flags them all
    # `trunc`; the adapter says terminated for the fallen ones.
    env = make("envpool:CartPole-v1", num_envs=8, seed=0, max_episode_steps=8)
    env.reset()
    for _ in range(7):
        assert not env.step(np.zeros(8, np.int32)).done.any()
    ts = env.step(np.zeros(8, np.int32))
    fell = cartpole_fell(ts.final_obs)
    assert fell.any() and not fell.all(), ts.final_obs[:, 2]
    np.testing.assert_array_equal(ts.terminated, fell)
    np.testing.assert_array_equal(ts.truncated, ~fell)
    assert is_reset_obs(ts.obs).all()
    np.testing.assert_array_equal(ts.info.episode_length, np.full(8, 8))


def test_cartpole_dynamics_match_gymnasium(make):
    import gymnasium

    env = make("envpool:CartPole-v1", num_envs=1, seed=5)
    reference = gymnasium.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    ts = env.reset()
    reference.state = ts.obs[0].astype(np.float64)
    actions = np.random.default_rng(0).integers(0, 2, 40)
    for t, action in enumerate(actions):
        ts = env.step(np.array([action]))
        obs, reward, terminated, truncated, _ = reference.step(int(action))
        np.testing.assert_allclose(ts.final_obs[0], obs, atol=1e-5, err_msg=f"step {t}")
        assert ts.reward[0] == reward
        assert ts.terminated[0] == terminated and ts.truncated[0] == truncated
        if terminated:
            break
        reference.state = ts.obs[0].astype(np.float64)  # float32 obs, as envpool's next state
    assert t >= 5


def test_async_cartpole_recv_send_keeps_episode_statistics(make):
    env = make("envpool:CartPole-v1", num_envs=4, batch_size=2, seed=7)
    assert (env.num_envs, env.batch_size, env.is_async) == (4, 2, True)
    env.async_reset()
    rng = np.random.default_rng(0)
    steps = np.zeros(4, int)
    seen = np.zeros(4, int)
    first = np.ones(4, bool)
    episodes = 0
    for _ in range(80):
        ts, ids = env.recv()
        assert ids.shape == (2,) and ids.dtype == np.int32
        assert len(set(ids.tolist())) == 2 and np.all((ids >= 0) & (ids < 4))
        assert ts.obs.shape == ts.final_obs.shape == (2, 4)
        seen[ids] += 1
        is_first = first[ids]
        first[ids] = False
        np.testing.assert_array_equal(ts.reward, np.where(is_first, 0.0, 1.0))
        assert not ts.truncated.any()
        steps[ids] += ~is_first
        done = ts.done
        np.testing.assert_array_equal(ts.terminated, cartpole_fell(ts.final_obs))
        np.testing.assert_array_equal(ts.obs[~done], ts.final_obs[~done])
        assert is_reset_obs(ts.obs[done]).all()
        np.testing.assert_array_equal(ts.info.done, done)
        np.testing.assert_array_equal(ts.info.episode_length, np.where(done, steps[ids], 0))
        np.testing.assert_array_equal(ts.info.episode_return, ts.info.episode_length)
        episodes += done.sum()
        steps[ids[done]] = 0
        # mostly action 0, so episodes end often
        env.send((rng.random(2) < 0.2).astype(np.int32), ids)
    assert np.all(seen >= 10), seen
    assert episodes >= 4


def test_direct_envpool_calls_equal_envpool_public_send_and_recv(make):
    """The adapter calls envpool's ``_send`` / ``_recv`` itself where the layout is the known
    one; envpool's public ``send`` / ``recv`` (the fallback for other layouts) give the same
    steps, terminations and resets included."""
    direct = make("envpool:CartPole-v1", num_envs=4, seed=3)
    public = make("envpool:CartPole-v1", num_envs=4, seed=3)
    assert direct._raw is not None
    public._raw = None
    a, b = direct.reset(), public.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        actions = (rng.random(4) < 0.3).astype(np.int32)  # mostly 0: episodes end often
        a, b = direct.step(actions), public.step(actions)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(x, y)
        ended += int(a.terminated.sum())
    assert ended >= 4


def test_async_recv_without_send_raises_instead_of_blocking(make):
    env = make("envpool:CartPole-v1", num_envs=4, batch_size=2)
    env.async_reset()
    _, ids_a = env.recv()
    _, ids_b = env.recv()
    assert not set(ids_a.tolist()) & set(ids_b.tolist())
    with pytest.raises(RuntimeError, match="send actions"):
        env.recv()
    with pytest.raises(ValueError, match="env_ids"):
        env.send(np.zeros(2, np.int32), np.array([ids_a[0], ids_a[0]]))
    env.send(np.zeros(2, np.int32), ids_a)
    with pytest.raises(ValueError, match="env_ids"):
        env.send(np.zeros(2, np.int32), ids_a)  # already sent
    _, ids_c = env.recv()
    assert set(ids_c.tolist()) == set(ids_a.tolist())
    env.send(np.zeros(2, np.int32), ids_c)  # the very array recv returned
    with pytest.raises(ValueError, match="env_ids"):
        env.send(np.zeros(2, np.int32), ids_c)  # already sent, the same array
    with pytest.raises(ValueError, match="read-only"):
        ids_b[0] = ids_c[0]  # what recv returned cannot change before it is sent


def test_breakout_default_options(make):
    env = make("envpool:Breakout-v5", num_envs=2)
    assert env.observation_spec == ObservationSpec((4, 84, 84), np.dtype(np.uint8))
    assert env.action_spec == DiscreteActionSpec(4)
    ts = env.reset()
    assert ts.obs.shape == (2, 4, 84, 84) and ts.obs.dtype == np.uint8
    for t in range(10):
        ts = env.step(np.full(2, t % 4))
        assert ts.obs.shape == ts.final_obs.shape == (2, 4, 84, 84)
        assert ts.obs.dtype == np.uint8 and ts.reward.dtype == np.float32
    assert ts.obs.max() > 0


def test_atari_time_limit_truncates_and_resets_the_game(make):
    env = make("envpool:Breakout-v5", num_envs=2, seed=0, max_episode_steps=30, reward_clip=True)
    env.reset()
    for _ in range(29):
        ts = env.step(np.zeros(2, np.int32))  # NOOP: lives are lost, the game goes on
        assert not ts.done.any()
    ts = env.step(np.zeros(2, np.int32))
    np.testing.assert_array_equal(ts.truncated, [True, True])
    np.testing.assert_array_equal(ts.terminated, [False, False])
    np.testing.assert_array_equal(ts.info.episode_length, [30, 30])
    assert not np.array_equal(ts.obs, ts.final_obs)
    for _ in range(29):  # a new game, with its own 30 steps
        assert not env.step(np.zeros(2, np.int32)).done.any()
    ts = env.step(np.zeros(2, np.int32))
    np.testing.assert_array_equal(ts.truncated, [True, True])


def test_atari_options_change_shape_and_actions(make):
    env = make(
        "envpool:Breakout-v5", num_envs=1, frame_stack=2, img_height=64, img_width=48,
        sticky_actions=True,
    )  # fmt: skip
    assert env.observation_spec == ObservationSpec((2, 64, 48), np.dtype(np.uint8))
    assert env.action_spec == DiscreteActionSpec(18)
    assert host_envs.AtariOptions(sticky_actions=True).envpool_kwargs()[
        "repeat_action_probability"
    ] == pytest.approx(0.25)


@pytest.mark.parametrize("batch_size", [None, 2])
def test_breakout_episodic_life_terminates_lives_and_reports_games(make, batch_size):
    env = make("envpool:Breakout-v5", num_envs=3, batch_size=batch_size, seed=0, episodic_life=True)
    rng = np.random.default_rng(1)
    if env.is_async:
        env.async_reset()
    else:
        ts, ids = env.reset(), np.arange(3)
    steps = np.zeros(3, int)
    score = np.zeros(3)
    lives_lost = np.zeros(3, int)
    games = []
    first = np.ones(3, bool)
    for _ in range(1000):
        if env.is_async:
            ts, ids = env.recv()
        fresh = ~first[ids]  # not the reset observation
        first[ids] = False
        steps[ids] += fresh
        score[ids] += ts.reward
        lives_lost[ids] += ts.terminated
        assert not ts.truncated.any()
        assert not ts.info.done[~ts.terminated].any()  # a game ends only with its last life
        for row in np.flatnonzero(ts.info.done):
            env_id = ids[row]
            assert ts.info.episode_length[row] == steps[env_id]
            assert ts.info.episode_return[row] == score[env_id]
            games.append(lives_lost[env_id])
            steps[env_id], score[env_id], lives_lost[env_id] = 0, 0.0, 0
        if len(games) >= 2:
            break
        actions = rng.integers(0, 4, len(ids))
        if env.is_async:
            env.send(actions, ids)
        else:
            ts = env.step(actions)
    assert games[:2] == [5, 5]  # Breakout: five lives, each loss a terminated step


def test_acrobot_spec(make):
    env = make("envpool:Acrobot-v1", num_envs=2)
    assert env.observation_spec == ObservationSpec((6,), np.dtype(np.float32))
    assert env.action_spec == DiscreteActionSpec(3)
    env.reset()
    ts = env.step(np.ones(2, np.int32))
    np.testing.assert_array_equal(ts.reward, [-1.0, -1.0])


def test_unknown_id_lists_close_matches():
    with pytest.raises(ValueError, match=r"envpool:CartPole-v1.*envpool\.list_all_envs\(\)"):
        host_envs.make("envpool:CartPol-v1", num_envs=1)
    with pytest.raises(ValueError, match=r"unknown environment id 'CartPole-v1'.*gymnax"):
        host_envs.make("CartPole-v1", num_envs=1)  # neither envpool, gymnasium nor JAX


def test_rejected_tasks_and_options(monkeypatch):
    with pytest.raises(ValueError, match=r"Taxi-v3.*observation is Discrete\(500\)"):
        host_envs.make("envpool:Taxi-v3", num_envs=1)
    with pytest.raises(ValueError, match=r"frame_stack=4.*Atari.*max_episode_steps"):
        host_envs.make("envpool:CartPole-v1", num_envs=1, frame_stack=4)
    with pytest.raises(ValueError, match=r"bogus=1.*takes"):
        host_envs.make("envpool:CartPole-v1", num_envs=1, bogus=1)
    with pytest.raises(ValueError, match="use frame_stack"):
        host_envs.make("envpool:Breakout-v5", num_envs=1, stack_num=4)
    with pytest.raises(ValueError, match=r"frame_stack=4.*Atari"):  # Pendulum has no frame_stack
        host_envs.make("envpool:Pendulum-v1", num_envs=1, frame_stack=4)

    # no envpool task has actions neither Discrete nor Box; one is made up here
    import envpool
    import gymnasium

    make_spec = envpool.make_spec

    def multi_discrete_spec(task):
        spec = make_spec(task)

        class Spec:
            config = spec.config
            observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
            action_space = gymnasium.spaces.MultiDiscrete([2, 3])

        return Spec

    monkeypatch.setattr(envpool, "make_spec", multi_discrete_spec)
    with pytest.raises(ValueError, match=r"CartPole-v1.*MultiDiscrete.*Discrete.*or.*Box"):
        host_envs.make("envpool:CartPole-v1", num_envs=1)


def test_bad_values_raise_config_errors():
    with pytest.raises(ConfigError, match=r"batch_size=8 .*between 1 and 3"):
        host_envs.make("envpool:CartPole-v1", num_envs=4, batch_size=8)
    with pytest.raises(ConfigError, match="num_envs=0"):
        host_envs.make("envpool:CartPole-v1", num_envs=0)
    with pytest.raises(ConfigError, match="max_episode_steps=0"):
        host_envs.make("envpool:CartPole-v1", num_envs=1, max_episode_steps=0)
    with pytest.raises(ConfigError, match=r"AtariOptions\.frame_stack=0 .* > 0"):
        host_envs.make("envpool:Breakout-v5", num_envs=1, frame_stack=0)
    with pytest.raises(ConfigError, match=r"repeat_action_probability=1\.5"):
        host_envs.make("envpool:Breakout-v5", num_envs=1, repeat_action_probability=1.5)
    with pytest.raises(ConfigError, match="sticky_actions"):
        host_envs.AtariOptions(sticky_actions=True, repeat_action_probability=0.1)


def test_mode_and_action_checks(make):
    env = make("envpool:CartPole-v1", num_envs=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(2, np.int32))
    env.reset()
    with pytest.raises(RuntimeError, match="sync mode"):
        env.recv()
    with pytest.raises(ValueError, match=r"0\.\.1"):
        env.step(np.array([0, 2]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.zeros(3, np.int32))
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(2, np.int32))
    async_env = make("envpool:CartPole-v1", num_envs=2, batch_size=1)
    with pytest.raises(RuntimeError, match="async mode"):
        async_env.reset()


def test_continuous_actions_check():
    spec = BoundedActionSpec((2,), np.array([-1.0, 0.0], np.float32), np.array([1.0, 0.5]))
    actions = continuous_actions("toy", np.array([[0.5, 0.25], [-3.0, 9.0]]), 2, spec)
    assert actions.dtype == np.float32 and actions.shape == (2, 2)
    np.testing.assert_array_equal(actions, [[0.5, 0.25], [-1.0, 0.5]])  # clipped, not rejected
    scalar_bounds = BoundedActionSpec((1,), -2.0, 2.0)
    np.testing.assert_array_equal(
        continuous_actions("toy", np.array([[1e300], [-2.5]]), 2, scalar_bounds), [[2.0], [-2.0]]
    )
    given = np.zeros((2, 2), np.float32)
    assert continuous_actions("toy", given, 2, spec).shape == (2, 2)
    with pytest.raises(
        ValueError, match=r"toy: .*shape \(2,\).*shape \(2,\) per environment.*\(2, 2\)"
    ):
        continuous_actions("toy", np.zeros(2, np.float32), 2, spec)
    with pytest.raises(ValueError, match=r"toy: .*shape \(3, 2\).*\(2, 2\)"):
        continuous_actions("toy", np.zeros((3, 2), np.float32), 2, spec)
    with pytest.raises(ValueError, match=r"toy: .*int64.*floats.*\[\[-1.0, 0.0\], \[1.0, 0.5\]\]"):
        continuous_actions("toy", np.zeros((2, 2), np.int64), 2, spec)
    with pytest.raises(ValueError, match=r"toy: .*bool.*floats .* in \[-2, 2\]"):
        continuous_actions("toy", np.zeros((2, 1), bool), 2, scalar_bounds)
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"toy: .*not finite.*found 1"):
            continuous_actions("toy", np.array([[0.0, bad], [0.0, 0.0]]), 2, spec)


class _Drift:
    """A tiny continuous JAX environment: ``x`` moves by the action (clipped to [-1, 1] by the
    host), reward ``-|x|``; it terminates when ``|x| > 2`` and truncates after 5 steps."""

    id = "drift"
    default_params = ()

    @property
    def observation_spec(self):
        return ObservationSpec((2,), np.dtype(np.float32))

    @property
    def action_spec(self):
        return BoundedActionSpec((1,), -1.0, 1.0, "float32")

    def reset(self, key, params):
        state = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        obs = jnp.zeros(2, jnp.float32)
        false = jnp.zeros((), bool)
        return state, TimeStep(obs, jnp.zeros((), jnp.float32), false, false, obs)

    def step(self, key, state, action, params):
        x, t = state
        x, t = x + action[0], t + 1
        final = jnp.stack([x, t.astype(jnp.float32)])
        terminated = jnp.abs(x) > 2.0
        truncated = (t >= 5) & ~terminated
        done = terminated | truncated
        new = (jnp.where(done, 0.0, x), jnp.where(done, 0, t))
        obs = jnp.where(done, jnp.zeros(2, jnp.float32), final)
        return new, TimeStep(obs, -jnp.abs(x), terminated, truncated, final)


def test_jax_host_environment_takes_continuous_actions():
    env = JaxHostEnvironment(_Drift(), 2, seed=0)
    assert env.action_spec.shape == (1,)
    ts = env.reset()
    assert ts.obs.shape == (2, 2)
    # env 0 pushes by 5 (clipped to 1 a step), env 1 by 0.25: env 0 terminates after 3 steps
    for t in range(1, 4):
        ts = env.step(np.array([[5.0], [0.25]], np.float32))
        np.testing.assert_allclose(ts.final_obs[:, 0], [t, 0.25 * t])
        np.testing.assert_array_equal(ts.terminated, [t == 3, False])
    np.testing.assert_array_equal(ts.obs[0], [0.0, 0.0])  # reset in the same step
    np.testing.assert_array_equal(ts.info.episode_length, [3, 0])
    np.testing.assert_allclose(ts.info.episode_return, [-6.0, 0.0])
    for _ in range(2):
        ts = env.step(np.array([[0.0], [0.25]]))
    np.testing.assert_array_equal(ts.truncated, [False, True])
    with pytest.raises(ValueError, match=r"drift: .*shape \(2,\).*\(2, 1\)"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"drift: .*int64.*floats"):
        env.step(np.zeros((2, 1), np.int64))
    with pytest.raises(ValueError, match=r"drift: .*not finite"):
        env.step(np.full((2, 1), np.nan, np.float32))
    env.close()
