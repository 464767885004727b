"""A CPU's cores serve Anakin's members: one XLA:CPU device per core, members placed on them."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from podracer import agents, loops, parallel
from podracer.agents import PPOConfig
from podracer.loops.anakin import AnakinConfig

ENV = "gymnax:CartPole-v1"
SMALL = AnakinConfig(num_envs=4, rollout_len=16)
AGENT = PPOConfig(num_minibatches=2)


@pytest.mark.parametrize(
    ("members", "devices", "shards"),
    [(1, 2, 1), (2, 2, 2), (3, 2, 1), (4, 2, 2), (6, 4, 3), (8, 4, 4), (5, 8, 5), (7, 3, 1)],
)
def test_member_placement_is_the_largest_divisor_within_the_devices(members, devices, shards):
    chosen, member_shards = parallel.member_placement(members, list(range(devices)))
    assert member_shards == shards and chosen == list(range(shards))


def test_use_cpu_cores_leaves_a_started_jax_and_the_users_flag_alone(monkeypatch):
    from jax._src import xla_bridge

    monkeypatch.setattr(parallel.mesh, "_cpu_cores_set", 0)
    jax.devices()  # this process has started its backends (conftest's two devices)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert parallel.use_cpu_cores(4) == 0 and "XLA_FLAGS" not in os.environ
    assert not parallel.spread_members()
    # Before JAX starts: the user's count wins, else one device per core is asked for.
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    assert parallel.use_cpu_cores(4) == 0
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    assert parallel.use_cpu_cores(1) == 0  # one core: nothing to spread over
    assert parallel.use_cpu_cores(4) == 4
    assert os.environ["XLA_FLAGS"] == (
        "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=4"
    )
    # Four devices asked for, two started (conftest's): not this process's cores' devices.
    assert not parallel.spread_members()


def _build(config, num_seeds, devices=None):
    config = AnakinConfig(**{**vars(SMALL), **config, "num_seeds": num_seeds})
    total = SMALL.steps_per_update * 2
    return loops.build("anakin", ENV, AGENT, config, total_timesteps=total, devices=devices)


def _run(config, num_seeds, devices=None):
    system = _build(config, num_seeds, devices)
    return system, system.run(seed=0)


def _leaves(state):
    def numbers(x):
        is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        return np.asarray(jax.random.key_data(x) if is_key else x)

    return [numbers(x) for x in jax.tree.leaves((state.learner, state.key))]


@pytest.mark.slow
def test_members_on_the_cores_equal_members_on_one_device(monkeypatch):
    # map: each member computes what a run of its own computes, so the placement changes no
    # bit (vmap's equality to rounding is test_population's sharded-versus-unsharded test).
    member_loop = "map"
    one_system, one = _run({"member_loop": member_loop}, 2, devices=jax.devices()[:1])
    monkeypatch.setattr(parallel.mesh, "_cpu_cores_set", jax.local_device_count())
    assert parallel.spread_members()
    spread_system, spread = _run({"member_loop": member_loop}, 2)
    # One member per device, no device splitting a member's environments.
    assert dict(spread_system.mesh.shape) == {"member": 2, "data": 1}
    assert dict(one_system.mesh.shape) == {"member": 1, "data": 1}
    for a, b in zip(_leaves(one.state), _leaves(spread.state), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("num_envs", "steps", "spare", "split"),
    [
        (4, 512, 2, 1),  # 256 steps a core: below the 2,048
        (16, 2048, 2, 1),  # 1,024 a core
        (32, 4096, 2, 2),  # 2,048 a core
        (1024, 131072, 2, 2),
        (1024, 131072, 8, 8),
        (1024, 131072, 1, 1),  # no core to spare
        (6, 6144, 4, 3),  # 4 does not divide 6 environments
        (5, 10240, 4, 1),  # 5 is prime and above the spare cores: one core
        (64, 4096, 4, 2),  # 4 would leave 1,024 steps a core
    ],
)
def test_cores_per_member_is_the_largest_divisor_with_enough_steps(num_envs, steps, spare, split):
    assert parallel.cores_per_member(num_envs, steps, spare) == split


def test_one_member_splits_its_environments_over_the_cores_when_its_batch_is_large(monkeypatch):
    monkeypatch.setattr(parallel.mesh, "_cpu_cores_set", jax.local_device_count())
    assert _build({}, 1).mesh.devices.size == 1  # 64 steps an update: one core
    big = {"num_envs": 32, "rollout_len": 128}  # 4,096 steps: 2,048 a core
    assert dict(_build(big, 1).mesh.shape) == {"member": 1, "data": 2}
    assert dict(_build(big, 2).mesh.shape) == {"member": 2, "data": 1}  # no core left over
    # An agent with a buffer on each device keeps one: splitting would change its batches.
    dqn = agents.DQNConfig(learning_starts=64)
    config = AnakinConfig(num_envs=32, rollout_len=128)
    system = loops.build("anakin", ENV, dqn, config, total_timesteps=8192)
    assert system.mesh.devices.size == 1
    # A placement the config gives is kept.
    system = _build({"member_shards": 2}, 2)
    assert dict(system.mesh.shape) == {"member": 2, "data": 1}


@pytest.mark.slow
@pytest.mark.skipif(parallel.usable_cores() < 2, reason="needs two CPU cores")
def test_the_command_line_runs_members_on_the_cores(tmp_path):
    seeds = 2
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    args = ["--run-dir", str(tmp_path / "run"), "--total-timesteps", "128", "--quiet"]
    args += ["--arch.num-seeds", str(seeds), "--arch.num-envs", "4", "--arch.rollout-len", "16"]
    proc = subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", "train", *args, "--agent.num-minibatches", "2"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["devices"] == 2 and summary["num_seeds"] == seeds
