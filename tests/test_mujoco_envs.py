"""Continuous-action host environments: envpool's MuJoCo tasks and continuous classic control
through the envpool adapter, checked against hand-rolled envpool loops."""

import warnings

import numpy as np
import pytest

from podracer.envs import host as host_envs
from podracer.types import BoundedActionSpec, ObservationSpec

envpool = pytest.importorskip("envpool")


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


def raw_pool(task, num_envs, seed, **kwargs):
    """A plain envpool pool (sync, gymnasium API), as a hand-rolled loop would use it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered")
        return envpool.make(
            task,
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,
            seed=seed,
            num_threads=1,
            **kwargs,
        )


def in_order(out):
    """A raw pool's ``(obs, reward, terminated, truncated, info)`` rows in env id order."""
    order = np.argsort(out[-1]["env_id"], kind="stable")
    return tuple(x[order] for x in out[:-1])


def test_hopper_matches_a_hand_rolled_envpool_loop(make):
    n, seed = 4, 3
    env = make("envpool:Hopper-v4", num_envs=n, seed=seed, num_threads=1)
    assert env.observation_spec == ObservationSpec((11,), np.dtype(np.float32))
    assert env.action_spec.shape == (3,) and env.action_spec.dtype == "float32"
    raw = raw_pool("Hopper-v4", n, seed)
    ts = env.reset()
    raw_obs, raw_info = raw.reset()
    assert ts.obs.dtype == np.float32
    np.testing.assert_array_equal(
        ts.obs, raw_obs[np.argsort(raw_info["env_id"])].astype(np.float32)
    )

    rng = np.random.default_rng(0)
    returns, lengths = np.zeros(n), np.zeros(n, int)
    terminations = 0
    for t in range(150):
        actions = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        ts = env.step(actions)
        obs, reward, term, trunc = in_order(raw.step(actions))
        assert not trunc.any()
        obs = obs.astype(np.float32)
        assert ts.obs.dtype == ts.final_obs.dtype == np.float32
        np.testing.assert_array_equal(ts.final_obs, obs, err_msg=f"step {t}")
        np.testing.assert_array_equal(ts.reward, reward)
        np.testing.assert_array_equal(ts.terminated, term)
        assert not ts.truncated.any()
        returns += reward
        lengths += 1
        ended = np.flatnonzero(term)
        expected = obs.copy()
        if ended.size:  # envpool's own auto-reset: the call after done, its action ignored
            reset = raw.step(np.zeros((ended.size, 3), np.float32), env_id=ended)
            expected[ended] = in_order(reset)[0].astype(np.float32)
        np.testing.assert_array_equal(ts.obs, expected, err_msg=f"step {t}")
        going = ~ts.done
        np.testing.assert_array_equal(ts.obs[going], ts.final_obs[going])
        assert not np.array_equal(ts.obs[ended], ts.final_obs[ended]) or not ended.size
        np.testing.assert_array_equal(ts.info.done, term)
        np.testing.assert_array_equal(
            ts.info.episode_return, np.where(term, returns, 0.0).astype(np.float32)
        )
        np.testing.assert_array_equal(ts.info.episode_length, np.where(term, lengths, 0))
        returns[ended], lengths[ended] = 0.0, 0
        terminations += ended.size
    raw.close()
    assert terminations >= 6, terminations  # random actions: Hopper falls within ~20-60 steps


def test_hopper_time_limit_is_truncation_not_termination(make):
    # envpool itself: at its time limit the gymnasium 5-tuple says truncated, not terminated
    raw = raw_pool("Hopper-v4", 2, 0, max_episode_steps=20)
    raw.reset()
    for t in range(1, 21):
        _, _, term, trunc, info = raw.step(np.zeros((2, 3), np.float32))
        assert not term.any()
        np.testing.assert_array_equal(trunc, [t == 20] * 2)
    np.testing.assert_array_equal(info["elapsed_step"], [20, 20])
    raw.close()

    # the adapter: the same, with the reset observation already in obs
    env = make("envpool:Hopper-v4", num_envs=2, seed=0, max_episode_steps=20)
    assert env._time_limit == 20  # the host counts the steps; envpool's limit is off
    ts = env.reset()
    first = ts.obs
    for t in range(1, 21):
        ts = env.step(np.zeros((2, 3), np.float32))  # zero torques: Hopper stands for 20 steps
        assert not ts.terminated.any()
        np.testing.assert_array_equal(ts.truncated, [t == 20] * 2)
    np.testing.assert_array_equal(ts.info.episode_length, [20, 20])
    # a fresh reset: the torso at height 1.25, everything else near 0 (noise scale 0.005)
    np.testing.assert_allclose(ts.obs[:, 0], 1.25, atol=0.01)
    assert np.all(np.abs(ts.obs[:, 1:]) < 0.02)
    assert np.any(np.abs(ts.final_obs[:, 1:]) > 0.02)  # 20 steps later the state has moved
    assert not np.array_equal(ts.obs, ts.final_obs) and not np.array_equal(ts.obs, first)
    ts = env.step(np.zeros((2, 3), np.float32))
    assert not ts.done.any()
    assert make("envpool:Hopper-v4", num_envs=1)._time_limit == 1000  # MuJoCo's default


def test_halfcheetah_default_time_limit_truncates_at_1000(make):
    env = make("envpool:HalfCheetah-v4", num_envs=2, seed=1)
    env.reset()
    rng = np.random.default_rng(1)
    for t in range(1, 1001):
        ts = env.step(rng.uniform(-1, 1, (2, 6)).astype(np.float32))
        assert not ts.terminated.any()  # HalfCheetah never terminates
        np.testing.assert_array_equal(ts.truncated, [t == 1000] * 2)
    np.testing.assert_array_equal(ts.info.episode_length, [1000, 1000])


def test_pendulum_spec_and_time_limit(make):
    env = make("envpool:Pendulum-v1", num_envs=3, seed=2)
    spec = env.action_spec
    assert isinstance(spec, BoundedActionSpec) and spec.shape == (1,) and spec.dtype == "float32"
    assert spec.low.dtype == spec.high.dtype == np.float32
    np.testing.assert_array_equal(spec.low, [-2.0])
    np.testing.assert_array_equal(spec.high, [2.0])
    assert env.observation_spec == ObservationSpec((3,), np.dtype(np.float32))
    env.reset()
    returns = np.zeros(3)
    for t in range(1, 201):
        ts = env.step(np.full((3, 1), 0.5, np.float32))
        returns += ts.reward
        assert not ts.terminated.any()  # Pendulum only truncates, at its 200-step limit
        np.testing.assert_array_equal(ts.truncated, [t == 200] * 3)
    np.testing.assert_allclose(ts.info.episode_return, returns, rtol=1e-5)
    np.testing.assert_array_equal(ts.info.episode_length, [200] * 3)

    car = make("envpool:MountainCarContinuous-v0", num_envs=1)
    assert car.action_spec.shape == (1,)
    np.testing.assert_array_equal(car.action_spec.low, [-1.0])
    np.testing.assert_array_equal(car.action_spec.high, [1.0])


def test_mujoco_specs(make):
    for task, obs_size, action_size, bound in [
        ("Ant-v4", 27, 8, 1.0),
        ("Walker2d-v4", 17, 6, 1.0),
        ("Humanoid-v4", 376, 17, 0.4),
    ]:
        env = make(f"envpool:{task}", num_envs=1)
        assert env.observation_spec == ObservationSpec((obs_size,), np.dtype(np.float32))
        assert env.action_spec.shape == (action_size,)
        np.testing.assert_array_equal(env.action_spec.high, np.full(action_size, bound, np.float32))
        np.testing.assert_array_equal(env.action_spec.low, -env.action_spec.high)
    # MuJoCo's own settings pass through under envpool's names
    env = make("envpool:HalfCheetah-v4", num_envs=2, frame_stack=3, ctrl_cost_weight=0.0)
    assert env.observation_spec == ObservationSpec((3, 17), np.dtype(np.float32))
    assert env.reset().obs.shape == (2, 3, 17)


FIELDS = ("obs", "reward", "terminated", "truncated", "final_obs", "episode_return")


def row(ts, j):
    """Row ``j`` of a ``TimeStep``: the fields of :data:`FIELDS`."""
    parts = (ts.obs, ts.reward, ts.terminated, ts.truncated, ts.final_obs, ts.info.episode_return)
    return tuple(x[j] for x in parts)


@pytest.mark.parametrize(
    "task, options", [("HalfCheetah-v4", {"max_episode_steps": 12}), ("Hopper-v4", {})]
)
def test_async_gives_the_sync_transitions_of_each_env(make, task, options):
    n, batch, steps, seed = 6, 3, 30, 4
    sync = make(f"envpool:{task}", num_envs=n, seed=seed, **options)
    asyn = make(f"envpool:{task}", num_envs=n, batch_size=batch, seed=seed, **options)
    assert asyn.is_async and not sync.is_async
    shape = sync.action_spec.shape
    # env i's k-th action, whatever order the envs come in
    actions = np.random.default_rng(5).uniform(-1, 1, (n, steps, *shape)).astype(np.float32)

    expected = [[] for _ in range(n)]  # per env: its transitions, in order
    ts = sync.reset()
    first = ts.obs
    for k in range(steps):
        ts = sync.step(actions[:, k])
        for i in range(n):
            expected[i].append(row(ts, i))

    got = [[] for _ in range(n)]
    count = np.zeros(n, int)
    asyn.async_reset()
    while min(len(g) for g in got) < steps:
        ts, ids = asyn.recv()
        assert ts.obs.dtype == np.float32 and ts.obs.shape == (batch, *sync.observation_spec.shape)
        for j, i in enumerate(ids):
            if count[i] == 0:  # async_reset's observation: the sync reset's
                np.testing.assert_array_equal(ts.obs[j], first[i])
                assert ts.reward[j] == 0 and not ts.done[j]
            else:
                got[i].append(row(ts, j))
        step = np.minimum(count[ids], steps - 1)
        count[ids] += 1
        asyn.send(actions[ids, step], ids)

    ends = 0
    for i in range(n):
        for k in range(steps):
            for name, a, b in zip(FIELDS, got[i][k], expected[i][k], strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"env {i} step {k} {name}")
            ends += expected[i][k][2] or expected[i][k][3]
    assert ends >= n, ends  # episodes ended (and the reset path ran) in every env


def test_continuous_action_checks(make):
    env = make("envpool:HalfCheetah-v4", num_envs=2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 6), np.float32))
    env.reset()
    with pytest.raises(ValueError, match=r"HalfCheetah-v4.*shape \(2,\).*shape \(2, 6\)"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"HalfCheetah-v4.*shape \(2, 5\).*shape \(2, 6\)"):
        env.step(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match=r"HalfCheetah-v4.*int64.*floats"):
        env.step(np.zeros((2, 6), np.int64))
    for bad in (np.nan, np.inf, -np.inf):
        actions = np.zeros((2, 6), np.float32)
        actions[1, 3] = bad
        with pytest.raises(ValueError, match=r"HalfCheetah-v4.*not finite"):
            env.step(actions)
    env.step(np.zeros((2, 6)))  # f64 is fine

    # out of bounds: clipped to [-1, 1], so the same as the bounds themselves
    big = make("envpool:HalfCheetah-v4", num_envs=2, seed=7)
    bounded = make("envpool:HalfCheetah-v4", num_envs=2, seed=7)
    np.testing.assert_array_equal(big.reset().obs, bounded.reset().obs)
    signs = np.where(np.random.default_rng(0).random((5, 2, 6)) < 0.5, -1.0, 1.0)
    for k in range(5):
        a = big.step((signs[k] * 3.0).astype(np.float32))
        b = bounded.step(signs[k].astype(np.float32))
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.reward, b.reward)

    asyn = make("envpool:Pendulum-v1", num_envs=2, batch_size=1)
    asyn.async_reset()
    _, ids = asyn.recv()
    with pytest.raises(ValueError, match=r"Pendulum-v1.*shape \(1, 1\)"):
        asyn.send(np.zeros(1, np.float32), ids)
    with pytest.raises(ValueError, match="not finite"):
        asyn.send(np.full((1, 1), np.nan, np.float32), ids)
    asyn.send(np.full((1, 1), 9.0, np.float32), ids)  # clipped to 2
    asyn.recv()
