"""Replay in the learner core: the buffer (what is sampled was added, prioritised frequencies,
importance weights), DQN's n-step double-Q targets against NumPy, 2 devices == 1 device, the
buffer in checkpoints, and Sebulba running the learner make_learner built."""

import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from podracer.agents import DQNConfig, build
from podracer.agents.dqn import DQNState
from podracer.core import make_learner
from podracer.core.learner.buffers import importance_weights, make_buffer, stored
from podracer.core.learner.replay import NStepItem, ReplayBatch, n_step_targets
from podracer.networks import QNetwork
from podracer.parallel import DATA_AXIS, data_mesh
from podracer.types import ActorOutput, DiscreteActionSpec, ObservationSpec, Trajectory

OBS = ObservationSpec((3,), np.dtype(np.float32))


def trajectory(seed, num_steps=6, num_envs=4, terminated=None, truncated=None):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(num_steps + 1, num_envs, 3)).astype(np.float32)
    shape = (num_steps, num_envs)
    return Trajectory(
        obs=obs[:-1],
        reward=rng.normal(size=shape).astype(np.float32),
        terminated=np.zeros(shape, bool) if terminated is None else terminated,
        truncated=np.zeros(shape, bool) if truncated is None else truncated,
        bootstrap_obs=obs[1:],
        behaviour=ActorOutput(
            action=rng.integers(0, 2, size=shape).astype(np.int32),
            log_prob=np.zeros(shape, np.float32),
            value=np.zeros(shape, np.float32),
            extras={"logits": np.zeros((*shape, 2), np.float32)},
        ),
    )


def test_n_step_items_stop_at_episode_ends_and_truncations_bootstrap_from_final_obs():
    terminated = np.zeros((6, 1), bool)
    truncated = np.zeros((6, 1), bool)
    terminated[1, 0] = True  # an episode terminates at step 1
    truncated[3, 0] = True  # the next is truncated at step 3
    traj = trajectory(0, num_envs=1, terminated=terminated, truncated=truncated)
    g, d, last = n_step_targets(traj, 0.9, 3)
    r = traj.reward[:, 0]
    np.testing.assert_allclose(
        g[:, 0],
        [
            r[0] + 0.9 * r[1],  # stops at the termination
            r[1],
            r[2] + 0.9 * r[3],  # stops at the truncation
            r[3],
            r[4] + 0.9 * r[5],  # the trajectory's end
            r[5],
        ],
        rtol=1e-6,
    )
    np.testing.assert_allclose(d[:, 0], [0.0, 0.0, 0.81, 0.9, 0.81, 0.9], rtol=1e-6)
    np.testing.assert_array_equal(last[:, 0], [1, 1, 3, 3, 5, 5])
    agent, _ = build(DQNConfig(n_step=3, gamma=0.9), DiscreteActionSpec(2), 10, OBS)
    params = agent.init(jax.random.key(0), jnp.zeros(3))
    items = agent.prepare(params, agent.init_state(jax.random.key(0), params), traj, jnp.mean)
    # the truncated step bootstraps from its own final observation, not the next episode's
    np.testing.assert_array_equal(items.next_obs[2], traj.bootstrap_obs[3, 0])
    np.testing.assert_array_equal(items.next_obs[0], traj.bootstrap_obs[1, 0])


def test_what_is_sampled_was_added_and_only_that():
    config = DQNConfig(buffer_size=1024)
    buffer = make_buffer(config, sample_batch_size=512)
    item = {"x": jnp.zeros(2), "i": jnp.int32(0)}
    state = buffer.init(item)
    state = buffer.add(state, {"x": jnp.ones((10, 2)), "i": jnp.arange(10, dtype=jnp.int32)})
    assert int(stored(state)) == 10
    sample = buffer.sample(state, jax.random.key(0)).experience
    assert set(np.asarray(sample["i"]).tolist()) == set(range(10))  # no empty slot sampled
    np.testing.assert_array_equal(sample["x"], np.ones((512, 2)))


def test_prioritised_sampling_follows_the_priorities_and_weights_equal_numpy():
    config = DQNConfig(buffer_size=20000, prioritised=True, priority_exponent=0.5)
    buffer = make_buffer(config, sample_batch_size=20000)
    state = buffer.init({"i": jnp.int32(0)})
    state = buffer.add(state, {"i": jnp.arange(4, dtype=jnp.int32)})
    priorities = np.array([1.0, 4.0, 9.0, 16.0])
    state = buffer.set_priorities(state, jnp.arange(4), jnp.asarray(priorities))
    sample = buffer.sample(state, jax.random.key(1))
    expected = np.sqrt(priorities) / np.sqrt(priorities).sum()  # p ** alpha, normalised
    counts = np.bincount(np.asarray(sample.experience["i"]), minlength=4)
    chi2 = np.sum((counts - 20000 * expected) ** 2 / (20000 * expected))
    assert chi2 < 16.3  # 3 degrees of freedom, p = 0.001
    np.testing.assert_allclose(sample.probabilities, expected[sample.indices], rtol=1e-5)
    weights = importance_weights(sample.probabilities, jnp.int32(4), 0.4)
    raw = (4 * expected[np.asarray(sample.indices)]) ** -0.4
    np.testing.assert_allclose(weights, raw / raw.max(), rtol=1e-5)


def test_dqn_double_q_n_step_loss_equals_numpy():
    config = DQNConfig(gamma=0.9, huber_delta=1.0)
    agent, _ = build(config, DiscreteActionSpec(3), 10, OBS)
    net = QNetwork(3, (128, 128), "relu")
    params = net.init(jax.random.key(0), jnp.zeros((1, 3)))
    target = net.init(jax.random.key(1), jnp.zeros((1, 3)))
    rng = np.random.default_rng(0)
    items = NStepItem(
        obs=rng.normal(size=(5, 3)).astype(np.float32),
        action=np.array([0, 1, 2, 1, 0], np.int32),
        n_step_return=np.array([1.0, 0.5, -1.0, 2.0, 0.0], np.float32),
        discount=np.array([0.81, 0.0, 0.9, 0.729, 0.81], np.float32),
        next_obs=rng.normal(size=(5, 3)).astype(np.float32) * 3,
    )
    weights = np.array([1.0, 0.5, 0.2, 1.0, 0.8], np.float32)
    batch = ReplayBatch(items, weights, DQNState(target, jnp.int32(0)))
    loss, out = agent.loss(params, batch, jax.random.key(2))
    q = np.asarray(net.apply(params, items.obs), np.float64)
    q_next_online = np.asarray(net.apply(params, items.next_obs), np.float64)
    q_next_target = np.asarray(net.apply(target, items.next_obs), np.float64)
    best = q_next_online.argmax(-1)  # double Q: chosen by the online network...
    y = (
        items.n_step_return + items.discount * q_next_target[np.arange(5), best]
    )  # ...valued by the target
    td = q[np.arange(5), items.action] - y
    huber = np.where(np.abs(td) <= 1.0, 0.5 * td**2, np.abs(td) - 0.5)
    np.testing.assert_allclose(loss, np.mean(weights * huber), rtol=1e-5)
    np.testing.assert_allclose(out.priority, td, rtol=1e-5, atol=1e-6)
    assert set(out.metrics) == {"loss", "mean_q"}
    assert (q_next_online.argmax(-1) != q_next_target.argmax(-1)).any()  # the choice matters


class EverythingState(NamedTuple):
    experience: Any  # [1, N, ...]
    current_index: jax.Array
    is_full: jax.Array


class EverythingBuffer:
    """A deterministic stand-in for flashbax: ``sample`` returns every item of the last add."""

    def __init__(self, size):
        del size

    def init(self, item):
        experience = jax.tree.map(lambda x: jnp.zeros((1, 0, *x.shape), x.dtype), item)
        return EverythingState(experience, jnp.int32(0), jnp.bool_(False))

    def add(self, state, items):
        size = jax.tree.leaves(items)[0].shape[0]
        return EverythingState(
            jax.tree.map(lambda x: x[None], items), jnp.int32(size), jnp.bool_(False)
        )

    def sample(self, state, key):
        del key
        return types.SimpleNamespace(experience=jax.tree.map(lambda x: x[0], state.experience))


def test_two_devices_equal_one_device_for_an_off_policy_update(one_device, two_devices):
    config = DQNConfig(batch_size=24, learning_starts=1, replay_ratio=1 / 24, n_step=2)
    agent, _ = build(config, DiscreteActionSpec(2), 10, OBS)
    traj = trajectory(3, num_steps=6, num_envs=4)

    agent = agent._replace(replay=agent.replay._replace(buffer=EverythingBuffer))

    def run(devices):
        learner = make_learner(agent, optax.sgd(0.5), axis_name=DATA_AXIS)
        state = learner.init(jax.random.key(0), jnp.zeros(3))
        state = state._replace(
            replay=jax.tree.map(lambda x: jnp.repeat(x, len(devices), axis=0), state.replay)
        )
        fn = jax.jit(
            jax.shard_map(
                learner.update,
                mesh=data_mesh(devices),
                in_specs=(P(), P(None, DATA_AXIS)),
                out_specs=(P(), P()),
                check_vma=False,
            )
        )
        return fn(state, traj)

    (one, m1), (two, m2) = run(one_device), run(two_devices)
    init = make_learner(agent, optax.sgd(0.5)).init(jax.random.key(0), jnp.zeros(3))
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(init.params), strict=True)
    )
    assert moved > 1e-4 and float(m1["replay_ready"]) == 1.0
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(two.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m1["loss"], m2["loss"], rtol=1e-5)


@pytest.mark.slow
def test_sebulba_trains_dqn_with_the_learner_make_learner_built(monkeypatch, two_devices):
    from podracer.agents import dqn
    from podracer.agents import spec as agent_spec
    from podracer.loops.sebulba import SebulbaConfig
    from podracer.loops.sebulba import train as sebulba_train

    built, called = [], []

    def recording_learner(*args, **kwargs):
        learner = agent_spec.epochs_learner(*args, **kwargs)

        def update(state, traj):
            called.append(learner.update)
            return learner.update(state, traj)

        built.append(learner)
        return learner._replace(update=update)

    spec = dqn.SPEC._replace(make_learner=recording_learner)
    monkeypatch.setitem(agent_spec._BY_CONFIG, DQNConfig, spec)
    config = DQNConfig(buffer_size=256, batch_size=32, learning_starts=32)
    result = sebulba_train(
        "envpool:CartPole-v1",
        config,
        SebulbaConfig(learner_device_ids=(1,), envs_per_actor=8, rollout_len=8),
        total_timesteps=4 * 64,
        devices=two_devices,
    )
    assert result.summary["num_updates"] == 4
    # (the state's initialisation builds a learner of its own, for init only)
    assert called and len({id(u) for u in called}) == 1
    assert any(called[0] is learner.update for learner in built)
    assert np.isfinite(result.summary["params_checksum"])


@pytest.mark.slow
def test_a_resumed_run_restores_the_buffer_bitwise(tmp_path):
    import os
    import shutil

    from podracer import runs
    from podracer.loops import anakin
    from podracer.loops.anakin import AnakinConfig
    from podracer.runs.checkpoint import Checkpointer, to_raw

    one = jax.devices()[:1]
    spec = runs.RunSpec(
        arch="anakin",
        agent="dqn",
        env="gymnax:CartPole-v1",
        seed=2,
        total_timesteps=8 * 32,
        agent_config=DQNConfig(
            buffer_size=128, batch_size=16, learning_starts=64, prioritised=True
        ),
        arch_config=AnakinConfig(num_envs=4, rollout_len=8, updates_per_call=2),
        options=runs.RunOptions(checkpoint_interval=4, eval_interval=0, tensorboard=False),
    )

    def latest(run_dir):
        system = anakin.build(
            spec.env,
            spec.agent_config,
            spec.arch_config,
            total_timesteps=spec.total_timesteps,
            devices=one,
        )
        with Checkpointer(run_dir) as checkpointer:
            state, _ = checkpointer.restore(system.init(spec.seed))
        return state.learner

    straight = str(tmp_path / "straight")
    summary = runs.train(spec, straight, console=False, devices=one)
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "8"))
    again = runs.train(spec, resumed, resume=True, console=False, devices=one)
    assert again["params_checksum"] == summary["params_checksum"]
    a, b = latest(straight), latest(resumed)
    buffer = a.replay
    assert int(stored(jax.tree.map(lambda x: x[0, 0], buffer))) == 128  # full: 8 x 32 items
    priorities = np.asarray(buffer.priorities[0, 0])
    assert len(set(priorities.tolist())) > 2  # priorities were written from the losses
    for x, y in zip(jax.tree.leaves(to_raw(a)), jax.tree.leaves(to_raw(b)), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_a_dqn_tournament_carries_its_buffers_and_hyper_parameters(tmp_path):
    """A population of DQN members over lr and the final exploration rate: each member keeps
    its own buffer; a tournament copies the winner's params, target network and buffer."""
    import json

    from podracer import runs
    from podracer.loops.anakin import AnakinConfig
    from podracer.population.ensemble import PopulationConfig

    spec = runs.RunSpec(
        arch="anakin",
        agent="dqn",
        env="gymnax:CartPole-v1",
        seed=0,
        total_timesteps=4 * 32,
        agent_config=DQNConfig(buffer_size=64, batch_size=16, learning_starts=32),
        arch_config=AnakinConfig(num_envs=4, rollout_len=8, num_seeds=4),
        options=runs.RunOptions(tensorboard=False),
        population=PopulationConfig(
            size=4,
            interval=2,
            hparams=("lr", "epsilon_finish"),
            init=("lr=1e-4:1e-2", "epsilon_finish=0.0:0.3"),
            eval_episodes=1,
            eval_max_steps=20,
        ),
    )
    summary = runs.train(spec, str(tmp_path / "pop"), console=False, devices=jax.devices()[:1])
    assert summary["population"] == 4 and summary["num_updates"] == 4
    boards = [
        json.loads(line)
        for line in (tmp_path / "pop" / "leaderboard.jsonl").read_text().split("\n")
        if line
    ]
    first = sorted(m["hparams"]["epsilon_finish"] for m in boards[0]["members"])
    np.testing.assert_allclose(first, [0.0, 0.1, 0.2, 0.3], atol=1e-6)
    assert len(boards[0]["replaced"]) == 1
