"""The shared learner core: N devices == 1 device, params identical on every device."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.agents import IMPALAConfig, PPOConfig, QLambdaConfig, build
from podracer.core import make_learner, make_rollout, reset_envs
from podracer.errors import ConfigError
from podracer.loops.anakin import AnakinConfig
from podracer.loops.layout import learner_layout
from podracer.parallel import DATA_AXIS, data_mesh


def collect(env_id, agent, num_envs, rollout_len, seed=0):
    env = envs.make(env_id)
    params = agent.init(jax.random.key(seed), jnp.zeros(env.observation_spec.shape))
    rollout = make_rollout(env, agent, rollout_len)
    state = reset_envs(
        env, jax.random.split(jax.random.key(seed + 1), num_envs), env.default_params
    )
    _, traj, _ = jax.jit(rollout)(params, state, env.default_params, jax.random.key(seed + 2))
    return env, traj


def update_on_mesh(agent, optimizer, traj, devices, num_epochs, num_minibatches):
    """One learner.update inside shard_map; the trajectory split over devices along B.

    Returns the params as each device holds them, stacked on a leading device axis."""
    mesh = data_mesh(devices)
    learner = make_learner(
        agent,
        optimizer,
        num_epochs=num_epochs,
        num_minibatches=num_minibatches,
        axis_name=DATA_AXIS,
    )
    state = learner.init(jax.random.key(7), traj.obs[0, 0])

    def per_device(state, traj):
        new_state, metrics = learner.update(state, traj)
        stacked = jax.tree.map(lambda x: x[None], new_state.params)
        return stacked, metrics

    fn = jax.jit(
        jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(P(), P(None, DATA_AXIS)),
            out_specs=(P(DATA_AXIS), P()),
        )
    )
    return fn(state, traj)


@pytest.mark.parametrize("agent_name", ["ppo", "qlambda"])
def test_two_devices_equal_one_device(agent_name, one_device, two_devices):
    if agent_name == "ppo":
        cfg = PPOConfig(num_epochs=1, num_minibatches=1, anneal_lr=False, lr=1e-2)
        env_id = "gymnax:CartPole-v1"
    else:
        cfg = QLambdaConfig(num_epochs=1, num_minibatches=1, lr=1e-2)
        env_id = "catch"
    agent, _ = build(cfg, 2 if agent_name == "ppo" else 3, num_updates=10)
    # Plain SGD: its step scales with the gradient (Adam's first step would hide a factor D).
    optimizer = optax.sgd(0.5)
    _, traj = collect(env_id, agent, num_envs=8, rollout_len=32)
    one, m1 = update_on_mesh(agent, optimizer, traj, one_device, 1, 1)
    two, m2 = update_on_mesh(agent, optimizer, traj, two_devices, 1, 1)
    one0 = jax.tree.map(lambda x: x[0], one)
    for a, b in zip(jax.tree.leaves(one0), jax.tree.leaves(two), strict=True):
        np.testing.assert_allclose(b[0], a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b[1], a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m1["loss"], m2["loss"], rtol=1e-5)
    # The update did move the params (the comparison is not between two no-ops).
    init = make_learner(agent, optimizer, num_epochs=1, num_minibatches=1).init(
        jax.random.key(7), traj.obs[0, 0]
    )
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(one0), jax.tree.leaves(init.params), strict=True)
    )
    assert moved > 1e-4


@pytest.mark.slow
def test_ppo_advantage_normalisation_uses_the_whole_batch(one_device, two_devices):
    """PPO's prepare under shard_map on 2 devices, the trajectory split along B and mean_fn a
    pmean over the axis (as make_learner builds it), gives what prepare gives on 1 device over
    the whole batch: advantages normalised by the whole batch's statistics, not each half's."""
    from podracer.types import Trajectory

    num_steps, num_envs = 8, 4
    keys = jax.random.split(jax.random.key(0), 5)
    observations = jax.random.normal(keys[0], (num_steps + 1, num_envs, 4))
    # The second half of the environments earns more: each half's mean is not the batch's.
    reward = jax.random.normal(keys[1], (num_steps, num_envs)) + jnp.array([0.0, 0.0, 2.0, 2.0])
    terminated = jax.random.bernoulli(keys[2], 0.1, (num_steps, num_envs))
    truncated = ~terminated & jax.random.bernoulli(keys[3], 0.1, (num_steps, num_envs))
    agent, raw_agent = (
        build(PPOConfig(hidden_sizes=(16,), normalize_advantages=normalize), 2, 1)[0]
        for normalize in (True, False)
    )
    params = agent.init(jax.random.key(7), observations[0, 0])
    _, behaviour = jax.vmap(lambda o, k: agent.act(params, (), o, k))(
        observations[:-1], jax.random.split(keys[4], num_steps)
    )
    traj = Trajectory(observations[:-1], reward, terminated, truncated, observations[1:], behaviour)

    def by_step(batch):  # [T * B_local, ...] -> [T, B_local, ...]
        return jax.tree.map(lambda x: x.reshape(num_steps, -1, *x.shape[1:]), batch)

    def per_device(params, traj):
        def mean_fn(x):
            return jax.lax.pmean(jnp.mean(x), DATA_AXIS)

        return by_step(agent.prepare(params, (), traj, mean_fn))

    def on(devices):
        return jax.jit(
            jax.shard_map(
                per_device,
                mesh=jax.sharding.Mesh(np.asarray(devices), (DATA_AXIS,)),
                in_specs=(P(), P(None, DATA_AXIS)),
                out_specs=P(None, DATA_AXIS),
            )
        )(params, traj)

    one, two = on(one_device), on(two_devices)
    plain = by_step(agent.prepare(params, (), traj, jnp.mean))  # no mesh at all
    assert two.advantage.shape == (num_steps, num_envs)
    for name in ("advantage", "target"):
        for whole in (one, plain):
            np.testing.assert_allclose(
                getattr(two, name), getattr(whole, name), rtol=1e-5, atol=1e-5, err_msg=name
            )
    # The whole batch's normalisation, recomputed in NumPy from the raw advantages ...
    raw = np.asarray(raw_agent.prepare(params, (), traj, jnp.mean).advantage, np.float64)
    raw = raw.reshape(num_steps, num_envs)
    expected = (raw - raw.mean()) / (raw.std() + 1e-8)
    np.testing.assert_allclose(two.advantage, expected, rtol=1e-4, atol=1e-5)
    # ... is not each half's: two halves normalised apart would give other advantages.
    apart = np.concatenate(
        [(h - h.mean()) / (h.std() + 1e-8) for h in (raw[:, :2], raw[:, 2:])], axis=1
    )
    assert np.max(np.abs(apart - expected)) > 0.1


def test_params_identical_on_every_device_with_epochs_and_minibatches(two_devices):
    cfg = PPOConfig(num_epochs=3, num_minibatches=4)
    agent, optimizer = build(cfg, 2, num_updates=10)
    _, traj = collect("gymnax:CartPole-v1", agent, num_envs=8, rollout_len=32)
    per_device, _ = update_on_mesh(agent, optimizer, traj, two_devices, 3, 4)
    for leaf in jax.tree.leaves(per_device):
        np.testing.assert_array_equal(leaf[0], leaf[1])


def test_minibatch_count_must_divide_the_batch():
    cfg = PPOConfig(num_epochs=1, num_minibatches=3)
    agent, optimizer = build(cfg, 2, num_updates=1)
    _, traj = collect("gymnax:CartPole-v1", agent, num_envs=4, rollout_len=8)
    learner = make_learner(agent, optimizer, num_epochs=1, num_minibatches=3)
    state = learner.init(jax.random.key(0), traj.obs[0, 0])
    with pytest.raises(ValueError, match="num_minibatches=3 does not divide the 32 samples"):
        learner.update(state, traj)


@pytest.mark.slow
def test_unrolled_update_has_no_loops_and_equals_the_scanned_one():
    """``unroll=True`` (chosen for image torsos on CPU) is straight-line SGD: the compiled update
    keeps only the agent's own loop (GAE's scan), and computes what the scanned update does."""
    config = PPOConfig(num_epochs=2, num_minibatches=2, hidden_sizes=(16,), anneal_lr=False)
    agent, optimizer = build(config, 2, num_updates=1)
    _, traj = collect("gymnax:CartPole-v1", agent, num_envs=4, rollout_len=8)
    results, loops = [], []
    for unroll in (1, True):
        learner = make_learner(agent, optimizer, num_epochs=2, num_minibatches=2, unroll=unroll)
        state = learner.init(jax.random.key(3), traj.obs[0, 0])
        update = jax.jit(learner.update)
        loops.append(update.lower(state, traj).as_text().count("stablehlo.while"))
        results.append(update(state, traj))
    assert loops[0] - loops[1] == 2  # the epoch and the minibatch loops are gone
    (scanned, scanned_metrics), (unrolled, unrolled_metrics) = results
    for a, b in zip(jax.tree.leaves(scanned.params), jax.tree.leaves(unrolled.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(scanned_metrics["loss"], unrolled_metrics["loss"], rtol=1e-6)


class ShapeRecorder:
    """The agent with a loss that records, while it is traced, the sample count it is given."""

    def __init__(self, agent):
        self.agent, self.sizes = agent, []

    def loss(self, params, batch, key):
        self.sizes.append(jax.tree.leaves(batch)[0].shape[0])
        return self.agent.loss(params, batch, key)

    def wrapped(self):
        return self.agent._replace(loss=self.loss)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("agent_name", "microbatch_steps", "slice_size"),
    [
        # PPO: 32 transitions, 2 minibatches of 16; at most 5 steps -> 4 slices of 4.
        ("ppo", 5, 4),
        # IMPALA: 4 sequences of 8 steps, 1 minibatch; 16 steps -> 2 sequences per slice,
        ("impala", 16, 2),
        # and a sequence longer than the slice -> one sequence per slice.
        ("impala", 3, 1),
    ],
)
@pytest.mark.parametrize("unroll", [1, True])
def test_microbatched_gradient_equals_the_whole_minibatch(
    agent_name, microbatch_steps, slice_size, unroll
):
    """Gradient accumulation over slices (``microbatch_steps``) is the minibatch's gradient, up
    to rounding, in the loops and straight-line; the loss sees slices of the stated size."""
    minibatches = 2 if agent_name == "ppo" else 1
    cfg = (
        PPOConfig(num_epochs=2, num_minibatches=minibatches, hidden_sizes=(16,), anneal_lr=False)
        if agent_name == "ppo"
        else IMPALAConfig(hidden_sizes=(16,), anneal_lr=False, num_minibatches=minibatches)
    )
    agent, optimizer = build(cfg, 2, num_updates=1)
    _, traj = collect("gymnax:CartPole-v1", agent, num_envs=4, rollout_len=8)
    results = []
    for steps in (0, microbatch_steps):
        recorder = ShapeRecorder(agent)
        learner = make_learner(
            recorder.wrapped(),
            optimizer,
            num_epochs=cfg.num_epochs,
            num_minibatches=minibatches,
            unroll=unroll,
            microbatch_steps=steps,
        )
        state = learner.init(jax.random.key(3), traj.obs[0, 0])
        results.append(jax.jit(learner.update)(state, traj))
        whole = (32 if agent_name == "ppo" else 4) // minibatches
        assert set(recorder.sizes) == {whole if steps == 0 else slice_size}
    (whole_state, whole_metrics), (sliced_state, sliced_metrics) = results
    for a, b in zip(
        jax.tree.leaves(whole_state.params), jax.tree.leaves(sliced_state.params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for name in whole_metrics:
        np.testing.assert_allclose(whole_metrics[name], sliced_metrics[name], rtol=1e-5, atol=1e-6)
    # The update did change the params (an equality of no-ops would prove nothing).
    start = learner.init(jax.random.key(3), traj.obs[0, 0]).params
    assert not np.allclose(jax.tree.leaves(start)[-1], jax.tree.leaves(sliced_state.params)[-1])


def test_microbatched_update_on_two_devices_equals_one_device(one_device, two_devices):
    """Inside shard_map the accumulated gradients are each device's, averaged once (one
    minibatch, which 2 devices and 1 device cut alike)."""
    cfg = PPOConfig(num_epochs=2, num_minibatches=1, hidden_sizes=(16,), anneal_lr=False, lr=1e-2)
    agent, optimizer = build(cfg, 2, num_updates=1)
    _, traj = collect("gymnax:CartPole-v1", agent, num_envs=8, rollout_len=8)
    outs = []
    for devices, steps in ((one_device, 0), (two_devices, 4)):
        mesh = data_mesh(devices)
        learner = make_learner(
            agent,
            optimizer,
            num_epochs=2,
            num_minibatches=1,
            axis_name=DATA_AXIS,
            microbatch_steps=steps,
        )
        state = learner.init(jax.random.key(7), traj.obs[0, 0])
        fn = jax.jit(
            jax.shard_map(
                lambda s, t, learner=learner: learner.update(s, t)[0].params,
                mesh=mesh,
                in_specs=(P(), P(None, DATA_AXIS)),
                out_specs=P(),
            )
        )
        outs.append(fn(state, traj))
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_execution_is_chosen_per_backend_and_torso():
    cpu = jax.devices("cpu")[:1]
    loop = AnakinConfig()
    assert learner_layout(IMPALAConfig(torso="impala_resnet"), loop, cpu) == (1, 32)
    assert learner_layout(PPOConfig(torso="nature_cnn"), loop, cpu) == (True, 32)
    assert learner_layout(PPOConfig(), loop, cpu) == (1, 0)
    for platform in ("gpu", "tpu"):  # the CPU layout must not leak into the accelerators' path
        accelerator = [types.SimpleNamespace(platform=platform)]
        assert learner_layout(IMPALAConfig(torso="impala_resnet"), loop, accelerator) == (1, 0)
        assert learner_layout(PPOConfig(torso="nature_cnn"), loop, accelerator) == (1, 0)
    asked = AnakinConfig(learner_unroll=2, learner_microbatch=256)
    assert learner_layout(IMPALAConfig(torso="impala_resnet"), asked, cpu) == (2, 256)
    with pytest.raises(ConfigError, match="learner_microbatch=-1 is not allowed"):
        AnakinConfig(learner_microbatch=-1)
    with pytest.raises(ValueError, match="microbatch_steps=-1 must be >= 0"):
        make_learner(
            *build(PPOConfig(), 2, 1), num_epochs=1, num_minibatches=1, microbatch_steps=-1
        )
