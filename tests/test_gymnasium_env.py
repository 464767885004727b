"""The gymnasium adapter: podracer's TimeStep semantics on top of a gymnasium sync vector env,
checked step by step against plain ``gymnasium.make`` environments."""

import gymnasium
import numpy as np
import pytest

from podracer.envs import host as host_envs
from podracer.envs.host import gymnasium as gym_host
from podracer.envs.host.gymnasium import GymnasiumEnvironment
from podracer.errors import ConfigError, ConfigValueError
from podracer.types import BoundedActionSpec, DiscreteActionSpec, ObservationSpec


@pytest.fixture
def make():
    envs = []

    def _make(env_id, **kwargs):
        env = gym_host.make(env_id, **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()


class Reference:
    """``num_envs`` plain ``gymnasium.make`` environments, env ``i`` seeded ``seed + i``, with
    same-step resets and episode statistics done here."""

    def __init__(self, gym_id, num_envs, seed, **options):
        self.envs = [gymnasium.make(gym_id, **options) for _ in range(num_envs)]
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, int)
        self.both = 0  # steps gymnasium reported terminated and truncated at once

    def step(self, actions):
        n = len(self.envs)
        obs, final_obs = self.obs.copy(), self.obs.copy()
        reward, term, trunc = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        ep_return, ep_length = np.zeros(n, np.float32), np.zeros(n, np.int32)
        for i, env in enumerate(self.envs):
            final_obs[i], reward[i], term[i], trunc[i], _ = env.step(actions[i])
            obs[i] = final_obs[i]
            self.returns[i] += reward[i]
            self.lengths[i] += 1
            if term[i] or trunc[i]:
                self.both += bool(term[i] and trunc[i])
                obs[i] = env.reset()[0]
                ep_return[i], ep_length[i] = self.returns[i], self.lengths[i]
                self.returns[i], self.lengths[i] = 0.0, 0
        self.obs = obs
        return obs, final_obs, reward, term, trunc & ~term, ep_return, ep_length

    def close(self):
        for env in self.envs:
            env.close()


def assert_matches(ts, expected):
    obs, final_obs, reward, terminated, truncated, ep_return, ep_length = expected
    np.testing.assert_array_equal(ts.obs, obs)
    np.testing.assert_array_equal(ts.final_obs, final_obs)
    np.testing.assert_array_equal(ts.reward, reward.astype(np.float32))
    np.testing.assert_array_equal(ts.terminated, terminated)
    np.testing.assert_array_equal(ts.truncated, truncated)
    np.testing.assert_array_equal(ts.info.done, terminated | truncated)
    np.testing.assert_array_equal(ts.info.episode_return, ep_return)
    np.testing.assert_array_equal(ts.info.episode_length, ep_length)
    assert ts.reward.dtype == np.float32 and ts.info.episode_return.dtype == np.float32
    assert ts.terminated.dtype == ts.truncated.dtype == np.bool_
    assert ts.info.episode_length.dtype == np.int32


@pytest.mark.parametrize(
    "options, fallback",
    [({}, False), ({"max_episode_steps": 25}, False), ({"max_episode_steps": 25}, True)],
    ids=["default-limit", "limit-25", "limit-25-own-autoreset"],
)
def test_cartpole_matches_plain_gymnasium_step_by_step(make, monkeypatch, options, fallback):
    num_envs, seed, steps = 4, 11, 300
    if fallback:  # as with a gymnasium without AutoresetMode.SAME_STEP: the adapter resets
        monkeypatch.setattr(gym_host, "_same_step_mode", lambda: None)
    env = make("gymnasium:CartPole-v1", num_envs=num_envs, seed=seed, **options)
    expected_mode = "NextStep" if fallback else "SameStep"
    assert env._vec.metadata["autoreset_mode"].value == expected_mode
    ref = Reference("CartPole-v1", num_envs, seed, **options)
    ts = env.reset()
    np.testing.assert_array_equal(ts.obs, ref.obs)
    np.testing.assert_array_equal(ts.final_obs, ref.obs)
    assert not ts.done.any() and not ts.info.done.any() and not ts.reward.any()

    rng = np.random.default_rng(0)
    terminations = truncations = 0
    for _ in range(steps):
        actions = rng.integers(0, 2, num_envs)
        ts = env.step(actions)
        expected = ref.step(actions)
        assert_matches(ts, expected)
        assert not (ts.terminated & ts.truncated).any()
        going = ~ts.done
        np.testing.assert_array_equal(ts.obs[going], ts.final_obs[going])
        assert not (ts.obs == ts.final_obs)[ts.done].any()  # ended rows: every component new
        terminations += ts.terminated.sum()
        truncations += ts.truncated.sum()
    ref.close()

    # random actions: CartPole falls after ~22 steps, so ~50 episodes end in 4 x 300 steps
    assert terminations >= 20, terminations
    if options:  # the 25-step limit cuts the longer episodes
        assert truncations >= 5, truncations
    else:
        assert truncations == 0


def test_terminal_step_on_the_time_limit_counts_as_terminated(make):
    # constant action 0 from seed 5: the pole falls at step k; with max_episode_steps=k gymnasium
    # reports terminated and truncated at once
    ref = Reference("CartPole-v1", 1, 5)
    k = 0
    while True:
        k += 1
        *_, term, _, _, _ = ref.step(np.zeros(1, int))
        if term[0]:
            break
    assert 8 <= k <= 30, k

    env = make("gymnasium:CartPole-v1", num_envs=1, seed=5, max_episode_steps=k)
    ref = Reference("CartPole-v1", 1, 5, max_episode_steps=k)
    env.reset()
    for t in range(1, k + 1):
        ts = env.step(np.zeros(1, np.int64))
        assert_matches(ts, ref.step(np.zeros(1, int)))
        assert ts.done[0] == (t == k)
    assert ref.both == 1
    assert ts.terminated[0] and not ts.truncated[0]
    assert ts.info.episode_length[0] == k and ts.info.episode_return[0] == k


def test_specs_cartpole_acrobot_pendulum(make):
    cases = [
        ("CartPole-v1", (4,), DiscreteActionSpec(2)),
        ("Acrobot-v1", (6,), DiscreteActionSpec(3)),
        ("Pendulum-v1", (3,), BoundedActionSpec((1,), -2.0, 2.0, np.dtype(np.float32))),
    ]
    for gym_id, obs_shape, action_spec in cases:
        env = make(f"gymnasium:{gym_id}", num_envs=3, seed=0)
        assert env.id == f"gymnasium:{gym_id}"
        assert (env.num_envs, env.batch_size, env.is_async) == (3, 3, False)
        assert env.observation_spec == ObservationSpec(obs_shape, np.dtype(np.float32))
        assert env.action_spec == action_spec
        assert type(env.action_spec) is type(action_spec)
        ts = env.reset()
        assert ts.obs.shape == (3, *obs_shape) and ts.obs.dtype == np.float32

    # through podracer.envs.host.make, the dispatcher Sebulba uses
    env = host_envs.make("gymnasium:Acrobot-v1", num_envs=2, seed=0)
    try:
        assert env.action_spec == DiscreteActionSpec(3)
    finally:
        env.close()


def test_pendulum_box_actions_match_plain_gymnasium(make):
    env = make("gymnasium:Pendulum-v1", num_envs=2, seed=3, max_episode_steps=10)
    ref = Reference("Pendulum-v1", 2, 3, max_episode_steps=10)
    env.reset()
    rng = np.random.default_rng(1)
    for t in range(1, 16):
        actions = rng.uniform(-2, 2, (2, 1)).astype(np.float32)
        ts = env.step(actions)
        assert_matches(ts, ref.step(actions))
        assert np.all(ts.reward <= 0)  # Pendulum's reward is a negative cost
        np.testing.assert_array_equal(ts.truncated, [t == 10] * 2)
    ref.close()
    with pytest.raises(ValueError, match=r"shape \(2, 1\)"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.full((2, 1), np.nan, np.float32))


def test_max_episode_steps_option_truncates(make):
    env = make("gymnasium:CartPole-v1", num_envs=3, seed=2, max_episode_steps=5)
    ts = env.reset()
    first = ts.obs.copy()
    actions = np.array([0, 1, 0])
    for t in range(1, 6):
        prev_obs = ts.obs
        ts = env.step(actions)
        actions = 1 - actions  # alternating: the pole stays up well past 5 steps
        np.testing.assert_array_equal(ts.reward, np.ones(3, np.float32))
        assert not ts.terminated.any()
        np.testing.assert_array_equal(ts.truncated, [t == 5] * 3)
        assert not np.array_equal(ts.final_obs, prev_obs)  # the state moved
    assert ts.truncated.all() and not ts.terminated.any()
    # obs is the next episode's first observation, final_obs the 5th state of the ended one
    assert np.all(np.abs(ts.obs) <= 0.05)  # CartPole resets draw each component in +-0.05
    assert not np.array_equal(ts.final_obs, ts.obs)
    assert not np.array_equal(ts.final_obs, first)
    assert np.all(np.abs(ts.final_obs - ts.obs) > 0)
    np.testing.assert_array_equal(ts.info.episode_length, [5, 5, 5])
    np.testing.assert_array_equal(ts.info.episode_return, [5.0, 5.0, 5.0])
    ts = env.step(np.zeros(3, np.int64))  # the new episode goes on
    assert not ts.done.any() and not ts.info.done.any()
    np.testing.assert_array_equal(ts.info.episode_length, [0, 0, 0])


def test_bad_ids_are_config_errors_with_close_matches():
    with pytest.raises(ConfigValueError, match=r"'Cartpole-v1'.*gymnasium:CartPole-v1"):
        gym_host.make("gymnasium:Cartpole-v1", num_envs=1)
    with pytest.raises(ConfigValueError, match=r"'CartPole-v9'.*gymnasium:CartPole-v1"):
        host_envs.make("gymnasium:CartPole-v9", num_envs=1)
    with pytest.raises(ConfigValueError, match="gymnasium ids look like"):
        gym_host.make("CartPole-v1", num_envs=1)
    # a Discrete observation is not an array observation
    with pytest.raises(ConfigValueError, match=r"FrozenLake-v1.*Discrete\(16\)"):
        gym_host.make("gymnasium:FrozenLake-v1", num_envs=1)


class _MultiDiscreteEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_unsupported_action_space_names_id_and_space():
    vec = gymnasium.vector.SyncVectorEnv([_MultiDiscreteEnv])
    with pytest.raises(ConfigValueError, match=r"gymnasium:Toy-v0.*MultiDiscrete\(\[2 3\]\)"):
        GymnasiumEnvironment("gymnasium:Toy-v0", vec)
    vec.close()


def test_bad_num_envs_seed_and_options_are_config_errors():
    with pytest.raises(ConfigError, match="num_envs=0"):
        gym_host.make("gymnasium:CartPole-v1", num_envs=0)
    with pytest.raises(ConfigError, match=r"num_envs=2\.5"):
        gym_host.make("gymnasium:CartPole-v1", num_envs=2.5)
    with pytest.raises(ConfigError, match="seed=-1"):
        gym_host.make("gymnasium:CartPole-v1", num_envs=1, seed=-1)
    with pytest.raises(ConfigError, match="max_episode_steps=0"):
        gym_host.make("gymnasium:CartPole-v1", num_envs=1, max_episode_steps=0)
    with pytest.raises(ConfigError, match=r"wind=3.*unexpected keyword argument 'wind'"):
        gym_host.make("gymnasium:CartPole-v1", num_envs=1, wind=3)


def test_bad_actions_name_the_expected_shape_and_range(make):
    env = make("gymnasium:CartPole-v1", num_envs=2, seed=0)
    with pytest.raises(RuntimeError, match=r"reset\(\) before step\(\)"):
        env.step(np.zeros(2, np.int64))
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        env.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"shape \(2, 1\).*shape \(2,\)"):
        env.step(np.zeros((2, 1), np.int64))
    with pytest.raises(ValueError, match=r"float32.*integers"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"0\.\.1"):
        env.step(np.array([0, 2]))
    with pytest.raises(ValueError, match=r"0\.\.1"):
        env.step(np.array([-1, 0]))
    ts = env.step(np.array([1, 0]))  # a rejected call leaves the envs as they were
    np.testing.assert_array_equal(ts.info.episode_length, [0, 0])
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_mountain_car_continuous_clips_actions_to_the_bounds(make):
    env = make("gymnasium:MountainCarContinuous-v0", num_envs=2, seed=4, max_episode_steps=8)
    assert env.action_spec == BoundedActionSpec((1,), -1.0, 1.0, np.dtype(np.float32))
    assert env.observation_spec == ObservationSpec((2,), np.dtype(np.float32))
    ref = Reference("MountainCarContinuous-v0", 2, 4, max_episode_steps=8)
    env.reset()
    rng = np.random.default_rng(2)
    for t in range(1, 11):
        actions = rng.uniform(-4, 4, (2, 1)).astype(np.float32)
        ts = env.step(actions)
        # the environment gets the actions clipped to [-1, 1] (its reward, -0.1 a^2, would see
        # the unclipped ones)
        assert_matches(ts, ref.step(np.clip(actions, -1.0, 1.0)))
        assert np.all(ts.reward >= -0.1 - 1e-6)
        np.testing.assert_array_equal(ts.truncated, [t == 8] * 2)
    ref.close()
    with pytest.raises(ValueError, match=r"MountainCarContinuous-v0.*int64.*floats"):
        env.step(np.zeros((2, 1), np.int64))
    with pytest.raises(ValueError, match=r"MountainCarContinuous-v0.*not finite"):
        env.step(np.full((2, 1), np.inf, np.float32))


class _Float64Env(gymnasium.Env):
    """f64 observations and f64 Box actions (as gymnasium's MuJoCo tasks): the observation is
    the last action received, with its dtype's width."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    action_space = gymnasium.spaces.Box(
        np.array([-1.0, -2.0, 0.0]), np.array([1.0, 2.0, 0.5]), (3,), np.float64
    )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3), {}

    def step(self, action):
        assert action.dtype == np.float64 and self.action_space.contains(action), action
        self.t += 1
        return np.array(action, np.float64), float(action.sum()), False, self.t >= 3, {}


def test_float64_spaces_come_as_float32_and_actions_go_in_the_space_dtype():
    mode = gym_host._same_step_mode()
    if mode is None:
        pytest.skip("gymnasium < 1.1 has no AutoresetMode.SAME_STEP")
    vec = gymnasium.vector.SyncVectorEnv([_Float64Env, _Float64Env], autoreset_mode=mode)
    env = GymnasiumEnvironment("gymnasium:F64-v0", vec, seed=0)
    try:
        assert env.observation_spec == ObservationSpec((3,), np.dtype(np.float32))
        spec = env.action_spec
        assert spec.shape == (3,) and spec.dtype == np.float32
        np.testing.assert_array_equal(spec.low, [-1.0, -2.0, 0.0])
        np.testing.assert_array_equal(spec.high, [1.0, 2.0, 0.5])
        ts = env.reset()
        assert ts.obs.dtype == np.float32
        actions = np.array([[3.0, -3.0, 0.25], [0.5, 1.0, -1.0]], np.float32)
        clipped = [[1.0, -2.0, 0.25], [0.5, 1.0, 0.0]]
        for t in range(1, 4):
            ts = env.step(actions)
            assert ts.obs.dtype == ts.final_obs.dtype == np.float32
            np.testing.assert_array_equal(ts.final_obs, clipped)
            np.testing.assert_array_equal(ts.truncated, [t == 3] * 2)
        np.testing.assert_array_equal(ts.obs, np.zeros((2, 3)))  # reset in the same step
        np.testing.assert_allclose(ts.info.episode_return, [3 * -0.75, 3 * 1.5])
    finally:
        env.close()


def test_mujoco_hopper_through_gymnasium_matches_plain_gymnasium(make):
    pytest.importorskip("mujoco")
    pytest.importorskip("imageio")  # gymnasium's MuJoCo tasks import it
    env = make("gymnasium:Hopper-v5", num_envs=2, seed=1, max_episode_steps=40)
    assert env.observation_spec == ObservationSpec((11,), np.dtype(np.float32))
    assert env.action_spec == BoundedActionSpec((3,), -1.0, 1.0, np.dtype(np.float32))
    ref = Reference("Hopper-v5", 2, 1, max_episode_steps=40)
    ts = env.reset()
    np.testing.assert_array_equal(ts.obs, ref.obs.astype(np.float32))
    rng = np.random.default_rng(3)
    ends = 0
    for _ in range(80):
        actions = rng.uniform(-1.5, 1.5, (2, 3)).astype(np.float32)
        ts = env.step(actions)
        obs, final_obs, *rest = ref.step(np.clip(actions, -1.0, 1.0))
        assert_matches(ts, (obs.astype(np.float32), final_obs.astype(np.float32), *rest))
        ends += ts.done.sum()
    ref.close()
    assert ends >= 2
