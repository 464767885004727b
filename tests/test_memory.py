"""Memory: the cells' sequence form against flax's cells, the reset rule, the learner's re-run
against what acting recorded (Anakin, Sebulba sync and async), windows and minibatches against a
NumPy construction, and sequence replay (windows, priorities, burn-in)."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer import envs
from podracer.agents import DQNConfig, IMPALAConfig, PPOConfig, PQNConfig, QLambdaConfig, build
from podracer.core import RolloutState, make_learner, make_rollout, reset_envs
from podracer.core import memory as mem
from podracer.core.cells import SEQUENCES
from podracer.core.learner.buffers import ReplayFields, window_buffer
from podracer.core.learner.replay import ReplayBatch
from podracer.envs.host.jax_env import JaxHostEnvironment
from podracer.loops.sebulba import host_act, host_rollout, rollout_keys
from podracer.types import DiscreteActionSpec, ObservationSpec

CELLS = {"gru": nn.GRUCell, "lstm": nn.OptimizedLSTMCell}


def flax_reference(kind: str, size: int):
    """A :class:`~podracer.core.memory.Recurrent` whose time loop is a ``lax.scan`` of flax's
    own cell (the reference for :mod:`podracer.core.cells`)."""
    cell = CELLS[kind](size)

    def initial(n):
        zeros = jnp.zeros((n, size))
        return zeros if kind == "gru" else (zeros, zeros)

    return cell, mem.Recurrent(initial, None, lambda p, c, x: cell.apply(p, c, x), None, None)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_cell_sequences_equal_flax_cells_scanned_values_and_gradients(kind):
    T, B, E, H = 9, 3, 5, 6
    cell, net = flax_reference(kind, H)
    params = cell.init(jax.random.key(0), net.initial(B), jnp.zeros((B, E)))
    x = jax.random.normal(jax.random.key(1), (T, B, E))
    carry = jax.tree.map(lambda z: jax.random.normal(jax.random.key(2), z.shape), net.initial(B))
    starts = jnp.asarray(np.random.default_rng(3).random((T, B)) < 0.3)
    cuts = jnp.asarray(np.random.default_rng(4).random((T, B)) < 0.2)  # stop-gradients
    assert starts.any() and (cuts & ~starts).any()

    def reference(p, carry, x):
        return mem.scan_core(net, p, carry, x, starts, cuts)

    def fast(p, carry, x):
        return SEQUENCES[kind](p["params"], carry, x, starts, cuts)

    for a, b in zip(
        jax.tree.leaves(reference(params, carry, x)),
        jax.tree.leaves(fast(params, carry, x)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    def loss(f):
        def value(p, carry, x):
            carries, h = f(p, carry, x)
            return jnp.sum(jnp.sin(h)) + sum(jnp.sum(jnp.cos(c)) for c in jax.tree.leaves(carries))

        return value

    g_ref = jax.grad(loss(reference), argnums=(0, 1, 2))(params, carry, x)
    g_fast = jax.grad(loss(fast), argnums=(0, 1, 2))(params, carry, x)
    for a, b in zip(jax.tree.leaves(g_ref), jax.tree.leaves(g_fast), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the initial carry's gradient stops at each environment's first reset or cut; the inputs
    # before a cut get only their own steps' gradients
    stop = np.asarray(starts | cuts)
    dead = stop[0]
    assert dead.any()
    for leaf in jax.tree.leaves(g_fast[1]):
        assert np.all(np.asarray(leaf)[dead] == 0.0)


def recurrent_ppo(kind="gru", window=0, size=16):
    env = envs.make("gymnax:CartPole-v1")
    config = PPOConfig(memory=kind, memory_size=size, hidden_sizes=(32,), sequence_window=window)
    agent, optimizer = build(config, env.action_spec, 1, env.observation_spec)
    network = config.network(env.action_spec, "ppo")
    return env, config, agent, optimizer, mem.recurrent(network, kind, size)


def test_a_reset_at_t_gives_the_outputs_of_a_fresh_sequence_started_at_t():
    _env, _, agent, _, net = recurrent_ppo()
    params = agent.init(jax.random.key(0), jnp.zeros(4))
    T, B, t = 12, 3, 5
    obs = jax.random.normal(jax.random.key(1), (T, B, 4))
    carry = jax.random.normal(jax.random.key(2), (B, 16))
    starts = jnp.zeros((T, B), bool).at[t].set(True)
    _, (logits, value) = mem.unroll(net, params, carry, obs, starts)
    _, (fresh_logits, fresh_value) = mem.unroll(
        net, params, net.initial(B), obs[t:], jnp.zeros((T - t, B), bool)
    )
    np.testing.assert_allclose(logits[t:], fresh_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value[t:], fresh_value, rtol=1e-5, atol=1e-6)
    # and before t the carry given mattered
    _, (_, zero_start) = mem.unroll(net, params, net.initial(B), obs, starts)
    assert not np.allclose(value[:t], zero_start[:t])


def relogged(agent, net, params, batch):
    """The log-probabilities and values of the learner's re-run of ``batch`` (the loss's)."""
    _, (logits, value) = mem.unroll_batch(net, params, batch.sequences, batch.steps.obs)
    log_prob = jnp.take_along_axis(
        jax.nn.log_softmax(logits), batch.steps.action[..., None], axis=-1
    )[..., 0]
    return log_prob, value


def check_rerun(agent, net, params, traj, window):
    done = np.asarray(traj.terminated | traj.truncated)
    assert done[:-1].any(), "no episode boundary inside the rollout"
    assert any(done[k * window : (k + 1) * window - 1].any() for k in range(len(done) // window))
    batch = agent.prepare(params, (), traj, jnp.mean)
    log_prob, value = relogged(agent, net, params, batch)
    behaviour = mem.windows(traj.behaviour, window)
    np.testing.assert_allclose(log_prob, behaviour.log_prob, atol=1e-5)
    np.testing.assert_allclose(value, behaviour.value, atol=1e-5)
    np.testing.assert_allclose(batch.steps.value, behaviour.value, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_the_learner_rerun_gives_the_behaviour_outputs_anakin(kind):
    env, _, agent, _, net = recurrent_ppo(kind, window=8)
    params = agent.init(jax.random.key(0), jnp.zeros(4))
    state = reset_envs(
        env, jax.random.split(jax.random.key(1), 5), env.default_params, agent.initial_actor_state
    )
    rollout = jax.jit(make_rollout(env, agent, 64))
    state, traj, _ = rollout(params, state, env.default_params, jax.random.key(2))
    check_rerun(agent, net, params, traj, 8)
    # the second rollout starts from the carries the first one left (mid-episode)
    _, traj, _ = rollout(params, state, env.default_params, jax.random.key(3))
    assert np.abs(np.asarray(jax.tree.leaves(traj.actor_state)[0][0])).max() > 0
    check_rerun(agent, net, params, traj, 8)


@pytest.mark.slow
def test_the_learner_rerun_gives_the_behaviour_outputs_sebulba_sync():
    env, _, agent, _, net = recurrent_ppo(window=8)
    params = agent.init(jax.random.key(0), jnp.zeros(4))
    host_env = JaxHostEnvironment(env, 5)
    carry = RolloutState((), host_env.reset(), agent.initial_actor_state(5))
    act = host_act(agent)
    for k in range(2):
        carry, traj, _ = host_rollout(
            host_env, act, params, carry, rollout_keys(jax.random.key(k), 64)
        )
        check_rerun(agent, net, params, jax.tree.map(jnp.asarray, traj), 8)


@pytest.mark.slow
def test_the_learner_rerun_gives_the_behaviour_outputs_sebulba_async():
    from podracer.envs import host as host_envs
    from podracer.loops.sebulba import AsyncCollector, Timers

    _env, _, agent, _, net = recurrent_ppo(window=16)
    params = agent.init(jax.random.key(0), jnp.zeros(4))
    host_env = host_envs.make("envpool:CartPole-v1", num_envs=6, batch_size=3, seed=3)
    collector = AsyncCollector(host_env, 64, agent.initial_actor_state(6))
    for k in range(2):
        traj, _ = collector.rollout(host_act(agent), params, jax.random.key(k), Timers())
        check_rerun(agent, net, params, jax.tree.map(jnp.asarray, traj), 16)
    host_env.close()


def test_windows_and_minibatches_keep_sequences_whole_and_in_time_order():
    T, B, W = 12, 3, 4
    t = np.broadcast_to(np.arange(T)[:, None], (T, B))
    b = np.broadcast_to(np.arange(B)[None, :], (T, B))
    # the NumPy construction: sample b * (T / W) + k is env b's steps k W .. (k + 1) W - 1
    expected_t = np.stack([np.arange(k * W, (k + 1) * W) for _ in range(B) for k in range(T // W)])
    expected_b = np.repeat(np.arange(B), T // W)[:, None] * np.ones(W, int)
    got_t, got_b = mem.windows((jnp.asarray(t), jnp.asarray(b)), W)
    np.testing.assert_array_equal(got_t, expected_t)
    np.testing.assert_array_equal(got_b, expected_b)
    carries = jnp.asarray(100 * b + t)
    np.testing.assert_array_equal(
        mem.window_carries(carries, W), expected_b[:, 0] * 100 + expected_t[:, 0]
    )

    # the learner cuts minibatches along the sample axis only: every minibatch row is one window
    seen = []

    def loss(params, batch, key):
        del key
        jax.debug.callback(lambda x: seen.append(np.asarray(x)), batch)
        return jnp.sum(params["w"]) * 0.0, {}

    from podracer.types import Agent

    agent = Agent(
        init=lambda key, obs: {"w": jnp.zeros(())},
        act=None,
        prepare=lambda p, s, traj, mean_fn: mem.windows(traj.reward, W),
        loss=loss,
    )
    learner = make_learner(agent, optax.sgd(0.1), num_epochs=2, num_minibatches=3)
    traj = jax.tree.map(jnp.asarray, _trajectory(reward=100.0 * b + t))
    jax.block_until_ready(learner.update(learner.init(jax.random.key(0), jnp.zeros(1)), traj))
    rows = np.concatenate(seen)
    assert rows.shape == (2 * B * T // W, W)
    expected_rows = 100 * expected_b + expected_t
    for row in rows:
        assert any(np.array_equal(row, e) for e in expected_rows)  # a whole window, in order
    for epoch in (rows[: B * T // W], rows[B * T // W :]):  # each epoch: every window once
        assert sorted(map(tuple, epoch)) == sorted(map(tuple, expected_rows))


def _trajectory(reward):
    from podracer.types import ActorOutput, Trajectory

    T, B = reward.shape
    zeros = np.zeros((T, B), np.float32)
    return Trajectory(
        obs=zeros[..., None],
        reward=np.asarray(reward, np.float32),
        terminated=zeros.astype(bool),
        truncated=zeros.astype(bool),
        bootstrap_obs=zeros[..., None],
        behaviour=ActorOutput(zeros.astype(np.int32), zeros, zeros),
    )


# --- sequence replay -----------------------------------------------------------------------


def stream_steps(first: int, T: int, B: int):
    """Steps ``[T, B]`` whose fields say which env and which time they are."""
    t = np.arange(first, first + T)[:, None] * np.ones((1, B), int)
    env = np.ones((T, 1), int) * np.arange(B)[None]
    return {"t": jnp.asarray(t, jnp.int32), "env": jnp.asarray(env, jnp.int32)}


def test_sampled_windows_never_mix_envs_span_rollouts_and_skip_the_seam():
    config = ReplayFields(buffer_size=3 * 24, batch_size=1, learning_starts=1)
    L, period, B, T = 5, 2, 3, 7
    buffer = window_buffer(config, L, period, B, sample_batch_size=4096)
    state = buffer.init({"t": jnp.int32(0), "env": jnp.int32(0)})
    assert int(buffer.windows(state)) == 0
    for k in range(6):  # 42 steps per env into a ring of 24: the ring turns
        state = buffer.add(state, jax.tree.map(lambda x: x, stream_steps(k * T, T, B)))
        sample = buffer.sample(state, jax.random.key(k))
        t, env = np.asarray(sample.experience["t"]), np.asarray(sample.experience["env"])
        assert (env == env[:, :1]).all()  # one environment per window
        assert (np.diff(t, axis=1) == 1).all()  # consecutive steps, in time order
        newest = (k + 1) * T - 1
        assert (t[:, -1] <= newest).all() and (t[:, 0] >= newest + 1 - 24).all()
        assert (t[:, 0] % period == 0).all()
        # every whole window is sampled, uniformly (and only those)
        whole = [s for s in range(0, newest + 1, period) if s + L - 1 <= newest and s > newest - 24]
        assert set(t[:, 0].tolist()) == set(whole)
        assert int(buffer.windows(state)) == len(whole) * B
    # windows that span two adds were sampled
    assert ((t[:, 0] // T) != (t[:, -1] // T)).any()


def test_window_priorities_start_at_the_largest_and_sampling_follows_them():
    config = ReplayFields(
        buffer_size=2 * 16, batch_size=1, learning_starts=1, prioritised=True, priority_exponent=1.0
    )
    buffer = window_buffer(config, 4, 4, 2, sample_batch_size=20000)
    state = buffer.init({"t": jnp.int32(0), "env": jnp.int32(0)})
    state = buffer.add(state, stream_steps(0, 8, 2))  # windows at 0 and 4 of both envs
    np.testing.assert_array_equal(state.priorities, [[1, 1, 0, 0], [1, 1, 0, 0]])
    state = buffer.set_priorities(state, jnp.array([0, 1, 4, 5]), jnp.array([1.0, 2.0, 3.0, 4.0]))
    state = buffer.add(state, stream_steps(8, 4, 2))  # a new window at 8: the largest priority
    np.testing.assert_array_equal(state.priorities, [[1, 2, 4, 0], [3, 4, 4, 0]])
    sample = buffer.sample(state, jax.random.key(0))
    p = np.array([1, 2, 4, 3, 4, 4], float)
    expected = p / p.sum()
    slot = {0: 0, 1: 1, 2: 2, 4: 3, 5: 4, 6: 5}
    counts = np.bincount([slot[i] for i in np.asarray(sample.indices).tolist()], minlength=6)
    chi2 = np.sum((counts - 20000 * expected) ** 2 / (20000 * expected))
    assert chi2 < 20.5  # 5 degrees of freedom, p = 0.001
    np.testing.assert_allclose(
        sample.probabilities, expected[[slot[i] for i in np.asarray(sample.indices)]], rtol=1e-5
    )


def r2d2(**kwargs):
    config = DQNConfig(memory="gru", memory_size=8, hidden_sizes=(16,), **kwargs)
    obs = ObservationSpec((3,), np.float32)
    agent, _ = build(config, DiscreteActionSpec(2), 10, obs)
    return config, agent


def sequences_batch(config, agent, b=4, seed=0):
    from podracer.agents.dqn import SequenceStep

    rng = np.random.default_rng(seed)
    L = config.window
    done = rng.random((b, L)) < 0.15
    terminated = done & (rng.random((b, L)) < 0.5)
    # As acting records them: inside an episode the bootstrap observation is the next step's.
    obs = rng.normal(size=(b, L, 3))
    bootstrap_obs = rng.normal(size=(b, L, 3))
    bootstrap_obs[:, :-1] = np.where(done[:, :-1, None], bootstrap_obs[:, :-1], obs[:, 1:])
    return SequenceStep(
        obs=jnp.asarray(obs, jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, (b, L)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(b, L)), jnp.float32),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(done & ~terminated),
        bootstrap_obs=jnp.asarray(bootstrap_obs, jnp.float32),
        actor_state=jnp.asarray(rng.normal(size=(b, L, 8)), jnp.float32),
    )


@pytest.mark.slow
def test_burn_in_steps_get_exactly_zero_gradient():
    config, agent = r2d2(burn_in=5, sequence_length=6, n_step=2, batch_size=24)
    params = agent.init(jax.random.key(0), jnp.zeros(3))
    state = agent.init_state(jax.random.key(1), params)
    items = sequences_batch(config, agent)
    weights = jnp.ones(4)

    def loss(obs, reward):
        batch = ReplayBatch(items._replace(obs=obs, reward=reward), weights, state)
        return agent.loss(params, batch, jax.random.key(2))[0]

    d_obs, d_reward = jax.grad(loss, argnums=(0, 1))(items.obs, items.reward)
    assert np.all(np.asarray(d_obs[:, :5]) == 0.0) and np.all(np.asarray(d_reward[:, :5]) == 0.0)
    assert np.abs(np.asarray(d_obs[:, 5:])).max() > 0  # the trained steps do get one
    grads = jax.grad(
        lambda p: agent.loss(p, ReplayBatch(items, weights, state), jax.random.key(2))[0]
    )(params)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads)) > 0


@pytest.mark.slow
def test_r2d2_priorities_and_loss_equal_numpy():
    """The loss on a window equals a NumPy recomputation from the network's own q-values: the
    n-step double-Q targets cut at episode ends and at the window's end, bootstrapped from the
    carry after the bootstrap step, and priority eta max|TD| + (1 - eta) mean|TD|."""
    config, agent = r2d2(burn_in=3, sequence_length=5, n_step=2, gamma=0.9, huber_delta=1.0)
    params = agent.init(jax.random.key(0), jnp.zeros(3))
    target = agent.init(jax.random.key(7), jnp.zeros(3))
    from podracer.agents.dqn import DQNState

    state = DQNState(target, jnp.int32(0))
    items = sequences_batch(config, agent, b=3, seed=1)
    weights = jnp.array([1.0, 0.5, 0.25])
    total, out = agent.loss(params, ReplayBatch(items, weights, state), jax.random.key(0))

    network = config.q_network(2)
    net = mem.recurrent(network, "gru", 8)
    done = np.asarray(items.terminated | items.truncated)

    def q_and_boot(p):
        """Step by step, in NumPy order: q of every obs, and q of every bootstrap obs from the
        carry after its step."""
        q, boot = np.zeros((3, 8, 2)), np.zeros((3, 8, 2))
        for i in range(3):
            carry = items.actor_state[i : i + 1, 0]
            for t in range(8):
                if t > 0 and done[i, t - 1]:
                    carry = net.initial(1)
                carry, out_q = mem.step(net, p, carry, items.obs[i : i + 1, t])
                q[i, t] = np.asarray(out_q[0])
                _, b_q = mem.step(net, p, carry, items.bootstrap_obs[i : i + 1, t])
                boot[i, t] = np.asarray(b_q[0])
        return q, boot

    q, boot = q_and_boot(params)
    _, boot_target = q_and_boot(target)
    reward, term = np.asarray(items.reward), np.asarray(items.terminated)
    action = np.asarray(items.action)
    tds = np.zeros((3, 5))
    for i in range(3):
        for j in range(5):
            t = 3 + j
            g, scale, last = 0.0, 1.0, t
            for k in range(2):
                s = t + k
                if s >= 8:
                    break
                g += scale * reward[i, s]
                scale *= 0.9
                last = s
                if term[i, s]:
                    scale = 0.0
                    break
                if done[i, s]:
                    break
            best = np.argmax(boot[i, last])
            y = g + scale * boot_target[i, last, best]
            tds[i, j] = q[i, t, action[i, t]] - y
    huber = np.where(np.abs(tds) <= 1.0, 0.5 * tds**2, np.abs(tds) - 0.5)
    np.testing.assert_allclose(total, np.mean(np.asarray(weights) * huber.mean(1)), rtol=1e-4)
    priority = 0.9 * np.abs(tds).max(1) + 0.1 * np.abs(tds).mean(1)
    np.testing.assert_allclose(out.priority, priority, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        IMPALAConfig(memory="gru", memory_size=8, sequence_window=8),
        QLambdaConfig(memory="lstm", memory_size=8),
        PQNConfig(memory="gru", memory_size=8, num_minibatches=1, sequence_window=8),
    ],
    ids=["impala", "qlambda", "pqn"],
)
def test_every_agent_with_memory_updates_on_both_device_counts_alike(
    config, one_device, two_devices
):
    """One update on 2 devices equals one update on 1 device (the carries and the sequences
    split over devices by environment; one minibatch, so that the two see the same ones)."""
    from jax.sharding import PartitionSpec as P

    from podracer.core.learner.skeleton import per_device, state_specs
    from podracer.parallel import DATA_AXIS, data_mesh

    env = envs.make("gymnax:CartPole-v1")
    agent, optimizer = build(config, env.action_spec, 10, env.observation_spec)
    params = agent.init(jax.random.key(0), jnp.zeros(4))
    state = reset_envs(
        env, jax.random.split(jax.random.key(1), 4), env.default_params, agent.initial_actor_state
    )
    rollout = jax.jit(make_rollout(env, agent, 16))
    acting = agent.actor_params(params, agent.init_state(jax.random.key(3), params))
    _, traj, _ = rollout(acting, state, env.default_params, jax.random.key(2))

    def update(devices):
        learner = make_learner(
            agent,
            optimizer,
            num_epochs=getattr(config, "num_epochs", 1),
            num_minibatches=getattr(config, "num_minibatches", 1),
            axis_name=DATA_AXIS,
            envs_per_device=4 // len(devices),
        )
        init = per_device(agent, learner.init(jax.random.key(0), jnp.zeros(4)), len(devices))
        specs = state_specs(agent, P(), P(DATA_AXIS))
        step = jax.jit(
            jax.shard_map(
                learner.update,
                mesh=data_mesh(devices),
                in_specs=(specs, P(None, DATA_AXIS)),
                out_specs=(specs, P()),
            )
        )
        return step(init, traj)

    (one, _), (two, _) = update(one_device), update(two_devices)
    moved = max(
        float(jnp.abs(a - b).max())
        for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(params), strict=True)
    )
    assert moved > 1e-5
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(two.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_memory_config_errors_name_the_field():
    from podracer.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"PPOConfig.memory='rnn' is not allowed: choose one of none, gru, lstm"
    ):
        PPOConfig(memory="rnn")
    with pytest.raises(ConfigError, match=r"memory_size=0"):
        PPOConfig(memory="gru", memory_size=0)
    with pytest.raises(ConfigError, match=r"sequence_window=-1"):
        IMPALAConfig(sequence_window=-1)
    with pytest.raises(ConfigError, match=r"batch_size=8 is not allowed with memory"):
        DQNConfig(memory="gru", batch_size=8, sequence_length=16)
    from podracer.errors import ConfigValueError

    with pytest.raises(
        ConfigValueError, match=r"sequence_window=5 is not allowed with rollouts of 16"
    ):
        dataclasses.replace(PPOConfig(memory="gru"), sequence_window=5).window(16)


def test_no_window_crosses_a_break_in_the_streams():
    """After break_streams (a resumed Sebulba run, a member that took another's buffer) the
    next steps do not follow the held ones: no window spans the break, windows on either side
    still do."""
    from podracer.core.learner.buffers import break_streams

    config = ReplayFields(buffer_size=2 * 40, batch_size=1, learning_starts=1)
    L, period = 4, 1
    buffer = window_buffer(config, L, period, 2, sample_batch_size=4096)
    state = buffer.init({"t": jnp.int32(0), "env": jnp.int32(0)})
    state = buffer.add(state, stream_steps(0, 6, 2))
    state = break_streams(state)
    state = buffer.add(state, stream_steps(100, 6, 2))  # another stream from here on
    t = np.asarray(buffer.sample(state, jax.random.key(0)).experience["t"])
    assert (np.diff(t, axis=1) == 1).all()  # nothing spans 5 -> 100
    assert set(t[:, 0].tolist()) == {0, 1, 2, 100, 101, 102}
    assert int(buffer.windows(state)) == 6 * 2
    state = buffer.add(state, stream_steps(106, 4, 2))  # the break stays where it was
    t = np.asarray(buffer.sample(state, jax.random.key(1)).experience["t"])
    assert (np.diff(t, axis=1) == 1).all() and {0, 103, 106} <= set(t[:, 0].tolist())
    # a replay of independent items has no streams to break
    assert break_streams(("items",)) == ("items",)


@pytest.mark.slow
def test_uniform_priorities_never_sample_empty_slots():
    """priority_exponent 0 asks for uniform sampling: 0 ** 0 must not give the empty slots
    (items) or the windows not yet whole a weight."""
    from podracer.core.learner.buffers import make_buffer

    config = DQNConfig(buffer_size=64, batch_size=8, prioritised=True, priority_exponent=0.0)
    items = make_buffer(config, sample_batch_size=512)
    state = items.add(items.init({"i": jnp.int32(0)}), {"i": jnp.arange(1, 5, dtype=jnp.int32)})
    sample = items.sample(state, jax.random.key(0))
    assert set(np.asarray(sample.experience["i"]).tolist()) == {1, 2, 3, 4}
    np.testing.assert_allclose(sample.probabilities, 0.25)
    windows = window_buffer(
        ReplayFields(buffer_size=64, prioritised=True, priority_exponent=0.0), 4, 2, 1, 512
    )
    state = windows.add(
        windows.init({"t": jnp.int32(0), "env": jnp.int32(0)}), stream_steps(0, 9, 1)
    )
    t = np.asarray(windows.sample(state, jax.random.key(1)).experience["t"])
    assert set(t[:, 0].tolist()) == {0, 2, 4}


def test_a_module_with_its_own_core_is_rerun_with_that_core():
    """The fast sequence form is flax's cell alone: a module that changes ``core`` (here a
    LayerNorm after the cell) is re-run by a scan of its own ``core``, and still matches what
    acting computed step by step."""
    from podracer.networks import RecurrentActorCritic

    class NormedCore(RecurrentActorCritic):
        def setup(self):
            super().setup()
            self.norm = nn.LayerNorm()

        def core(self, carry, x):
            carry, h = self.cell(carry, x)
            return carry, self.norm(h)

    module = NormedCore(num_actions=2, hidden_sizes=(8,), memory="gru", memory_size=8)
    net = mem.recurrent(module, "gru", 8)
    assert net.sequence is None
    assert mem.recurrent(RecurrentActorCritic(2, memory="gru", memory_size=8), "gru", 8).sequence
    params = module.init(jax.random.key(0), net.initial(1), jnp.zeros((1, 4)))
    obs = jax.random.normal(jax.random.key(1), (6, 2, 4))
    starts = jnp.zeros((6, 2), bool).at[3].set(True)
    _, (_, value) = mem.unroll(net, params, net.initial(2), obs, starts)
    carry, stepwise = net.initial(2), []
    for t in range(6):
        if t == 3:
            carry = net.initial(2)
        carry, (_, v) = mem.step(net, params, carry, obs[t])
        stepwise.append(v)
    np.testing.assert_allclose(value, jnp.stack(stepwise), rtol=1e-5, atol=1e-6)
