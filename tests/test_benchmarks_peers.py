"""``benchmarks/peers.py``: the shims that let the peers' unchanged code run on current libraries
(each against what it stands in for), and the alternation of pairs with its medians.

The peers themselves are not run here (their sources are not part of the repository; the
benchmark is run by hand, ``benchmarks/README.md``, "Peers")."""

import importlib.util
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py"
spec = importlib.util.spec_from_file_location("peers_benchmark", SCRIPT)
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)


def test_gymnax_five_values_is_the_six_value_step_with_done_for_either_end(monkeypatch):
    import gymnax

    monkeypatch.setattr(gymnax, "make", gymnax.make)  # restored after the test
    env, params = gymnax.make("CartPole-v1")
    peers.gymnax_five_values()
    shimmed, _ = gymnax.make("CartPole-v1")
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    ends = 0
    for t in range(600):  # past the 500-step limit: a truncation (or a termination) happens
        step_key = jax.random.fold_in(key, t)
        six = env.step(step_key, state, t % 2, params)
        five = shimmed.step(step_key, state, t % 2, params)
        assert len(six) == 6 and len(five) == 5
        np.testing.assert_array_equal(five[0], six[0])
        assert float(five[2]) == float(six[2])
        assert bool(five[3]) == bool(six[3] | six[4])
        ends += int(five[3])
        state = six[1]
    assert ends > 0
    assert shimmed.num_actions == env.num_actions  # everything else is the environment's


@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="needs envpool")
def test_envpool_gym_api_answers_gyms_way_with_gymnasiums_values(monkeypatch):
    import envpool

    monkeypatch.setattr(envpool, "make", envpool.make)
    reference = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=3)
    peers.envpool_gym_api()
    pool = envpool.make("CartPole-v1", env_type="gym", num_envs=2, seed=3)
    pool.num_envs = 2  # Cleanba sets attributes on its pool
    pool.single_action_space = pool.action_space
    obs = pool.reset()
    expected, _ = reference.reset()
    np.testing.assert_array_equal(obs, expected)
    done_seen = False
    for t in range(300):
        action = np.array([t % 2, (t // 3) % 2])
        obs, reward, done, info = pool.step(action)
        r_obs, r_reward, terminated, truncated, _ = reference.step(action)
        np.testing.assert_array_equal(obs, r_obs)
        np.testing.assert_array_equal(reward, r_reward)
        np.testing.assert_array_equal(done, terminated | truncated)
        np.testing.assert_array_equal(info["terminated"], terminated)
        done_seen |= bool(done.any())
    assert done_seen


def test_train_state_of_any_params_steps_a_dataclass_as_optax_does(monkeypatch):
    import flax
    from flax.training import train_state

    monkeypatch.setattr(train_state.TrainState, "create", train_state.TrainState.create)
    monkeypatch.setattr(
        train_state.TrainState, "apply_gradients", train_state.TrainState.apply_gradients
    )
    peers.train_state_of_any_params()

    @flax.struct.dataclass
    class Params:
        a: jax.Array
        b: jax.Array

    params = Params(jnp.ones(3), jnp.arange(2.0))
    grads = Params(jnp.full(3, 0.5), jnp.array([1.0, -2.0]))
    tx = optax.adam(0.1)
    state = train_state.TrainState.create(apply_fn=None, params=params, tx=tx)
    state = state.apply_gradients(grads=grads)
    updates, _ = tx.update(grads, tx.init(params), params)
    expected = optax.apply_updates(params, updates)
    assert int(state.step) == 1
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b)
    # A dict of params still takes flax's own path.
    plain = train_state.TrainState.create(apply_fn=None, params={"w": jnp.ones(2)}, tx=tx)
    assert int(plain.apply_gradients(grads={"w": jnp.ones(2)}).step) == 1


def test_cleanba_shims_stack_over_the_devices(monkeypatch):
    for name in ("tree_map", "device_put_sharded", "device_put_replicated"):
        if hasattr(jax, name):
            monkeypatch.setattr(jax, name, getattr(jax, name))
        else:
            monkeypatch.setattr(jax, name, None, raising=False)
            monkeypatch.delattr(jax, name)
    from optax._src import alias

    monkeypatch.setattr(alias, "ScalarOrSchedule", None, raising=False)
    monkeypatch.delattr(alias, "ScalarOrSchedule")
    monkeypatch.setattr(alias, "_scale_by_learning_rate", None, raising=False)
    monkeypatch.delattr(alias, "_scale_by_learning_rate")
    import envpool
    from flax.training import train_state

    monkeypatch.setattr(envpool, "make", envpool.make)
    monkeypatch.setattr(train_state.TrainState, "create", train_state.TrainState.create)
    monkeypatch.setattr(
        train_state.TrainState, "apply_gradients", train_state.TrainState.apply_gradients
    )
    peers.cleanba_shims()
    devices = jax.devices()[:1]
    sharded = jax.device_put_sharded([np.arange(3.0)], devices)
    assert sharded.shape == (1, 3)
    replicated = jax.device_put_replicated({"k": jnp.ones(2)}, devices)
    assert replicated["k"].shape == (1, 2)
    assert jax.tree_map(lambda x: x + 1, [1])[0] == 2
    assert alias._scale_by_learning_rate is optax.scale_by_learning_rate


def test_pairs_alternate_and_report_medians_of_the_per_pair_ratios(monkeypatch):
    calls = []
    figures = {"peer": iter([100.0, 200.0, 100.0]), "ours": iter([110.0, 180.0, 150.0])}

    def measure(args, timeout):
        calls.append(args[0])
        return {"sps": next(figures[args[0]]), "compile_s": 2.0 if args[0] == "ours" else 4.0}

    monkeypatch.setattr(peers, "measure", measure)
    record = peers.pairs("x", ["peer"], ["ours"], 3, timeout=1)
    assert calls == ["peer", "ours", "ours", "peer", "peer", "ours"]  # the order flips
    assert record["ratios"] == [1.1, 0.9, 1.5]
    assert record["median_ratio"] == statistics.median([1.1, 0.9, 1.5]) == 1.1
    assert record["median_podracer_sps"] == 150.0 and record["median_peer_sps"] == 100.0
    assert record["median_compile_ratio"] == 0.5
