"""``benchmarks/sebulba_common.py`` and ``benchmarks/sleepy_env.py``: the host environment whose
steps wait (sync and async mode mean what podracer's host environments mean), and one Sebulba
record on it in async mode with the CPU keys (a few seconds, most of it compiling a small MLP).
"""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
HAVE_ENVPOOL = importlib.util.find_spec("envpool") is not None


def load(name: str):
    """A benchmark module, its folder first on the path as when its script runs."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_sleepy_sync_mode_auto_resets_and_counts_episodes():
    sleepy = load("sleepy_env")
    env = sleepy.SleepyEnvironment(3, min_ms=0.01, episode_len=2)
    try:
        assert not env.is_async and env.batch_size == 3
        first = env.reset()
        assert first.obs.shape == (3, 4) and first.obs.dtype == np.float32
        np.testing.assert_array_equal(first.reward, 0.0)
        one = env.step(np.zeros(3, np.int32))
        np.testing.assert_array_equal(one.reward, 1.0)
        assert not one.truncated.any() and not one.info.done.any()
        np.testing.assert_array_equal(one.final_obs, one.obs)
        two = env.step(np.zeros(3, np.int32))
        np.testing.assert_array_equal(two.truncated, True)
        assert not two.terminated.any()
        np.testing.assert_array_equal(two.info.episode_length, 2)
        np.testing.assert_array_equal(two.info.episode_return, 2.0)
        assert not np.array_equal(two.final_obs, two.obs)  # obs: the next episode's first
        three = env.step(np.zeros(3, np.int32))
        assert not three.truncated.any()
    finally:
        env.close()


def test_sleepy_async_mode_returns_batches_of_ready_envs():
    sleepy = load("sleepy_env")
    env = sleepy.SleepyEnvironment(4, 2, min_ms=0.01, episode_len=3)
    try:
        assert env.is_async and env.batch_size == 2
        env.async_reset()
        steps = np.zeros(4, int)  # results seen per env, the async_reset observation first
        for _ in range(40):
            ts, ids = env.recv()
            assert ids.shape == (2,) and len(set(ids.tolist())) == 2
            first = steps[ids] == 0
            np.testing.assert_array_equal(ts.reward, np.where(first, 0.0, 1.0))
            # env i's k-th step result ends its episode when k is a multiple of 3
            ended = ~first & (steps[ids] % 3 == 0)
            np.testing.assert_array_equal(ts.truncated, ended)
            np.testing.assert_array_equal(ts.info.done, ended)
            np.testing.assert_array_equal(ts.info.episode_length, np.where(ended, 3, 0))
            steps[ids] += 1
            env.send(np.zeros(2, np.int32), ids)
        assert steps.sum() == 80
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ENVPOOL, reason="the recipe is built on envpool CartPole's specs")
def test_bench_record_on_sleepy_async_envs(two_devices):
    sleepy = load("sleepy_env")
    common = load("sebulba_common")
    from podracer.agents import PPOConfig
    from podracer.loops.sebulba import SebulbaConfig

    config = SebulbaConfig(
        envs_per_actor=8,
        rollout_len=8,
        async_batch_size=4,
        actor_device_ids=(0,),
        learner_device_ids=(1,),
    )
    record = common.bench(
        "sleepy-async",
        sleepy.SPECS_OF,
        PPOConfig(hidden_sizes=(8,), num_epochs=1, num_minibatches=1),
        config,
        total_steps=8 * 8 * 3,
        devices=two_devices,
        env_only_steps=64,
        actor_rollouts=1,
        make_env=sleepy.make_factory(config, min_ms=0.05),
        env_label="sleepy",
    )
    assert record["env"] == "sleepy" and record["async_batch_size"] == 4
    assert record["total_steps"] == 8 * 8 * 3
    assert set(record["cpu_cores"]) == {"training", "actor_only", "env_only"}
    for key in ("sps", "steady_sps", "env_only_sps", "actor_only_sps"):
        assert record[key] > 0, key
    for what, cores in record["cpu_cores"].items():
        assert math.isfinite(cores) and cores >= 0, what
        speed = common.Speed(record[f"{what}_sps" if what != "training" else "steady_sps"], cores)
        assert math.isclose(record["cpu_us_per_step"][what], speed.cpu_us_per_step)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool is not installed")
def test_members_record_counts_every_members_steps(two_devices):
    """``--members``: P members in one program against the same P run in turn; the ratio is the
    two speeds', every member's steps counted on both sides."""
    throughput = load("sebulba_throughput")
    from podracer.agents import PPOConfig
    from podracer.loops.sebulba import SebulbaConfig

    config = SebulbaConfig(
        envs_per_actor=4, rollout_len=8, actor_device_ids=(0,), learner_device_ids=(1,)
    )
    agent = PPOConfig(hidden_sizes=(8,), num_epochs=1, num_minibatches=1)
    record = throughput.members_record("cartpole", "envpool:CartPole-v1", agent, config, 96, 2)
    assert record["members"] == 2 and record["steps_per_member"] == 96
    assert len(record["final_return_per_seed"]) == 2
    assert math.isclose(record["ratio"], record["together_sps"] / record["in_turn_sps"])
    assert record["together_wall_s"] > 0 and record["in_turn_wall_s"] > 0
    assert record["env_only_sps"] > 0
