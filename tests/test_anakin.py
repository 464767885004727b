"""Anakin: determinism, vmapped seeds, device counts, and learning thresholds."""

import jax
import numpy as np
import pytest

from podracer.agents import PPOConfig, QLambdaConfig
from podracer.errors import ConfigError
from podracer.loops.anakin import AnakinConfig, build, choose_updates_per_call, run, train
from podracer.loops.common import final_returns

SMALL = AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=3)
SMALL_PPO = PPOConfig(num_minibatches=2, num_epochs=2)


@pytest.fixture(scope="module")
def small_system():
    """One compiled system shared by the tests below (compiling dominates their time)."""
    return build(
        "gymnax:CartPole-v1", SMALL_PPO, SMALL, total_timesteps=64 * 6, devices=jax.devices()[:1]
    )


def small_run(seed=0, config=SMALL, devices=None, total=64 * 6):
    devices = devices if devices is not None else jax.devices()[:1]
    return train(
        "gymnax:CartPole-v1", SMALL_PPO, config, seed=seed, total_timesteps=total, devices=devices
    )


@pytest.mark.slow
def test_same_seed_bitwise_identical_other_seed_different(small_system):
    a, b, c = (run(small_system, seed=s, total_timesteps=64 * 6) for s in (0, 0, 1))
    leaves_a, leaves_b = (
        jax.tree.leaves(a.state.learner.params),
        jax.tree.leaves(b.state.learner.params),
    )
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.summary["params_checksum"] == b.summary["params_checksum"]
    assert a.summary["params_checksum"] != c.summary["params_checksum"]
    assert a.summary["total_steps"] == 6 * 64 and a.summary["num_updates"] == 6


def test_vmapped_seeds_are_independent_runs():
    both = small_run(
        0, config=AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=3, num_seeds=2)
    )
    alone = small_run(1)
    member1 = jax.tree.map(lambda x: x[1], both.state.learner.params)
    for x, y in zip(
        jax.tree.leaves(member1), jax.tree.leaves(alone.state.learner.params), strict=True
    ):
        np.testing.assert_allclose(x, y[0], rtol=1e-4, atol=1e-5)


def test_remainder_updates_run_in_a_second_program(small_system):
    # 7 updates with 3 per call: calls of 3, 3 and 1.
    result = run(small_system, seed=0, total_timesteps=64 * 7)
    assert result.summary["num_updates"] == 7
    assert int(result.state.learner.update_count[0]) == 7
    assert result.history["loss"].shape == (1, 7)


def test_num_envs_must_split_over_devices(two_devices):
    with pytest.raises(ConfigError, match=r"num_envs=3 .* multiple of the device count \(2\)"):
        small_run(config=AnakinConfig(num_envs=3, rollout_len=16), devices=two_devices)


def test_config_errors_name_field_and_value():
    with pytest.raises(ConfigError, match=r"AnakinConfig.rollout_len=0 .* must be > 0"):
        AnakinConfig(rollout_len=0)
    with pytest.raises(ConfigError, match=r"PPOConfig.gamma=1.5 .* <= 1.0"):
        PPOConfig(gamma=1.5)
    with pytest.raises(ConfigError, match=r"PPOConfig.activation='foo' .* tanh"):
        PPOConfig(activation="foo")


def test_choose_updates_per_call_divides_when_it_can():
    assert choose_updates_per_call(976) == 16  # 61 calls
    assert choose_updates_per_call(10) == 1
    assert 976 % choose_updates_per_call(976) == 0
    # A long run: calls of at most max_updates (Ctrl-C acts between calls).
    assert choose_updates_per_call(20_000_000, max_updates=2048) == 2048
    assert choose_updates_per_call(976, max_updates=10) == 10
    assert choose_updates_per_call(976, max_updates=100) == 16


def test_final_return_takes_the_last_five_percent():
    history = {
        "episodes": np.array([[1, 1, 1, 2]]),
        "return_sum": np.array([[10.0, 10.0, 10.0, 50.0]]),
    }
    # 4 updates of 100 steps: only the last ends after 95% of 400 steps.
    np.testing.assert_allclose(final_returns(history, 100, 400), [25.0])
    np.testing.assert_allclose(final_returns(history, 100, 400, fraction=0.5), [20.0])


@pytest.mark.slow
def test_ppo_learns_cartpole_four_seeds_and_evaluates_greedily(one_device, tmp_path):
    """Trained through a run directory; its final checkpoint, evaluated on 10 fresh greedy
    episodes per seed (`podracer eval`'s path), returns >= 475 for every seed (500 for each of
    the 4 when this was written)."""
    from podracer import runs

    spec = runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env="gymnax:CartPole-v1",
        seed=0,
        total_timesteps=500_000,
        agent_config=PPOConfig(),
        arch_config=AnakinConfig(num_envs=4, num_seeds=4),
        options=runs.RunOptions(tensorboard=False),
    )
    summary = runs.train(spec, str(tmp_path / "run"), console=False, devices=one_device)
    print(summary)
    assert summary["final_return"] >= 475.0
    evaluated = runs.evaluate_run(str(tmp_path / "run"), episodes=10)
    print(evaluated)
    assert evaluated["episodes"] == 4 * 10 and evaluated["greedy"]
    assert len(evaluated["per_seed_mean"]) == 4
    assert min(evaluated["per_seed_mean"]) >= 475.0  # every seed, not only their mean


@pytest.mark.slow
def test_qlambda_learns_catch(one_device):
    result = train(
        "catch",
        QLambdaConfig(),
        AnakinConfig(num_envs=128, rollout_len=16, num_seeds=2),
        seed=0,
        total_timesteps=4_000_000,
        devices=one_device,
    )
    print(result.summary)
    assert result.summary["final_return"] >= 0.9


@pytest.mark.slow
def test_ppo_learns_cartpole_on_two_devices(two_devices):
    result = train(
        "gymnax:CartPole-v1",
        PPOConfig(),
        AnakinConfig(num_envs=4, num_seeds=1),  # 2 envs per device, the 1-device configuration
        seed=0,
        total_timesteps=500_000,
        devices=two_devices,
    )
    print(result.summary)
    assert result.summary["devices"] == 2
    assert result.summary["final_return"] >= 400.0


class UncheckedCartPole:
    """CartPole that asks for a shard_map without the varying-axes check (as the adapters of
    libraries that JAX 0.10 cannot trace inside a checked one do)."""

    check_vma = False

    def __init__(self):
        from podracer import envs

        self._env = envs.make("gymnax:CartPole-v1")
        self.id = "cartpole_unchecked"

    def __getattr__(self, name):
        return getattr(self._env, name)


@pytest.mark.slow
def test_unchecked_shard_map_gives_the_same_params(two_devices):
    """An environment with check_vma = False runs the whole program without the check: on two
    devices (gradients all-reduced, episode statistics summed) its params equal the checked
    program's, which only the check's typing differs from."""
    from podracer import envs

    envs.register("cartpole_unchecked", UncheckedCartPole)
    try:
        config = AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=3)
        results = [
            train(env_id, SMALL_PPO, config, seed=0, total_timesteps=64 * 6, devices=two_devices)
            for env_id in ("gymnax:CartPole-v1", "cartpole_unchecked")
        ]
    finally:
        envs.factory._REGISTRY.pop("cartpole_unchecked", None)
    checked, unchecked = (jax.tree.leaves(r.state.learner.params) for r in results)
    for a, b in zip(checked, unchecked, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert results[0].summary["final_return"] == results[1].summary["final_return"] > 0
