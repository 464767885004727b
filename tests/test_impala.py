"""IMPALA: the loss against a time-major reference, importance ratios, devices, learning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from podracer import agents, envs, loops
from podracer.agents import IMPALAConfig
from podracer.core import make_learner, make_rollout, reset_envs
from podracer.core.returns import vtrace
from podracer.errors import ConfigError
from podracer.loops.anakin import AnakinConfig
from podracer.networks import ActorCritic
from podracer.parallel import DATA_AXIS, data_mesh

CONFIG = IMPALAConfig(anneal_lr=False)


def collect(agent, num_envs=4, rollout_len=16, seed=0):
    """A CartPole trajectory ``[T, B]`` acted by ``agent`` with fresh params (returned too)."""
    env = envs.make("gymnax:CartPole-v1")
    params = agent.init(jax.random.key(seed), jnp.zeros(env.observation_spec.shape))
    rollout = make_rollout(env, agent, rollout_len)
    state = reset_envs(
        env, jax.random.split(jax.random.key(seed + 1), num_envs), env.default_params
    )
    _, traj, _ = jax.jit(rollout)(params, state, env.default_params, jax.random.key(seed + 2))
    return params, traj


@pytest.fixture(scope="module")
def setup():
    agent, _ = agents.build(CONFIG, 2, num_updates=1)
    params, traj = collect(agent)
    # Episode ends inside the sequences: a truncation and a termination the rollout did not see.
    truncated = traj.truncated.at[5, 0].set(True).at[9, 2].set(True)
    terminated = traj.terminated.at[11, 1].set(True)
    traj = traj._replace(truncated=truncated, terminated=terminated & ~truncated)
    return agent, params, traj


def loss_of(agent, params, traj):
    batch = agent.prepare(params, (), traj, jnp.mean)
    return agent.loss(params, batch, jax.random.key(0))


def test_prepare_gives_batch_major_sequences(setup):
    agent, params, traj = setup
    batch = agent.prepare(params, (), traj, jnp.mean)
    assert batch.obs.shape == (4, 16, 4) and batch.reward.shape == (4, 16)
    np.testing.assert_array_equal(batch.truncated[0, 5], True)
    np.testing.assert_array_equal(batch.behaviour_log_prob, traj.behaviour.log_prob.T)


@pytest.fixture(scope="module")
def clean():
    """A trajectory as the rollout made it: no truncation before the end of a sequence, so the
    loss takes its bootstrap values from the values of the next observations."""
    agent, _ = agents.build(CONFIG, 2, num_updates=1)
    params, traj = collect(agent, rollout_len=32, seed=4)
    assert not np.any(traj.truncated[:-1]) and np.any(traj.terminated)  # episodes ended inside
    return agent, params, traj


@pytest.mark.slow
@pytest.mark.parametrize("which", ["setup", "clean"])
def test_loss_equals_a_time_major_reference(which, request):
    agent, params, traj = request.getfixturevalue(which)
    total, metrics = jax.jit(lambda p, t: loss_of(agent, p, t))(params, traj)

    network = ActorCritic(num_actions=2, hidden_sizes=CONFIG.hidden_sizes)
    logits, v_tm1 = jax.vmap(lambda o: network.apply(params, o))(traj.obs)  # [T, B]
    v_t = jax.vmap(lambda o: network.apply(params, o, method=ActorCritic.value))(traj.bootstrap_obs)
    log_pi = jax.nn.log_softmax(logits)
    log_prob = jnp.take_along_axis(log_pi, traj.action[..., None], axis=-1)[..., 0]
    rho = jnp.exp(log_prob - traj.behaviour.log_prob)
    out = vtrace(v_tm1, v_t, traj.reward, traj.terminated, traj.truncated, rho, CONFIG.gamma)
    pg = -jnp.mean(out.pg_advantage * log_prob)
    baseline = 0.5 * jnp.mean(jnp.square(out.errors))
    entropy = -jnp.mean(jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1))
    np.testing.assert_allclose(metrics["pg_loss"], pg, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["baseline_loss"], baseline, rtol=1e-5)
    np.testing.assert_allclose(metrics["entropy"], entropy, rtol=1e-5)
    np.testing.assert_allclose(total, pg + 0.5 * baseline - 0.01 * entropy, rtol=1e-5, atol=1e-6)


def test_loss_is_finite_and_every_gradient_is_nonzero(setup):
    agent, params, traj = setup
    batch = agent.prepare(params, (), traj, jnp.mean)
    grads, metrics = jax.jit(jax.grad(agent.loss, has_aux=True))(params, batch, jax.random.key(0))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.all(np.isfinite(g)), path
        assert np.any(g != 0), f"zero gradient for {jax.tree_util.keystr(path)}"


def test_on_policy_ratios_are_one_and_clipping_applies(setup):
    agent, params, traj = setup
    loss = jax.jit(lambda t: loss_of(agent, params, t))
    total, metrics = loss(traj)  # acted with these very params
    np.testing.assert_allclose(metrics["mean_rho"], 1.0, rtol=1e-5)

    def shifted(delta):
        behaviour = traj.behaviour._replace(log_prob=traj.behaviour.log_prob + delta)
        return loss(traj._replace(behaviour=behaviour))

    # mu half as likely: rho = 2, clipped to 1 in targets and advantages, so the same loss.
    total2, metrics2 = shifted(-np.log(2.0))
    np.testing.assert_allclose(metrics2["mean_rho"], 2.0, rtol=1e-5)
    np.testing.assert_allclose(metrics2["clipped_rho_fraction"], 1.0)
    np.testing.assert_allclose(total2, total, rtol=1e-5)
    # mu twice as likely: rho = 1/2 halves every policy-gradient advantage (the trace too).
    _, metrics_half = shifted(np.log(2.0))
    np.testing.assert_allclose(metrics_half["mean_rho"], 0.5, rtol=1e-5)
    assert abs(float(metrics_half["pg_loss"]) - float(metrics["pg_loss"])) > 1e-4


def update_on(devices, config, traj, agent, optimizer):
    """One learner.update in shard_map (its type check on), the trajectory split along B."""
    learner = make_learner(
        agent,
        optimizer,
        num_epochs=config.num_epochs,
        num_minibatches=config.num_minibatches,
        axis_name=DATA_AXIS,
    )
    state = learner.init(jax.random.key(7), traj.obs[0, 0])
    fn = jax.shard_map(
        learner.update,
        mesh=data_mesh(devices),
        in_specs=(P(), P(None, DATA_AXIS)),
        out_specs=(P(), P()),
    )
    new_state, metrics = jax.jit(fn)(state, traj)
    return state.params, new_state.params, metrics


@pytest.mark.slow
def test_two_devices_equal_one_device(one_device, two_devices):
    config = IMPALAConfig(anneal_lr=False, lr=1e-2, num_epochs=2)
    agent, optimizer = agents.build(config, 2, num_updates=1)
    _, traj = collect(agent, num_envs=8, rollout_len=16)
    init, one, m1 = update_on(one_device, config, traj, agent, optimizer)
    _, two, m2 = update_on(two_devices, config, traj, agent, optimizer)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m1["loss"], m2["loss"], rtol=1e-5, atol=1e-6)
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(init), strict=True)
    )
    assert moved > 1e-4


def test_minibatches_are_whole_sequences(one_device):
    config = IMPALAConfig(num_minibatches=4, num_epochs=2)
    agent, optimizer = agents.build(config, 2, num_updates=1)
    _, traj = collect(agent, num_envs=8, rollout_len=16)
    init, new, metrics = update_on(one_device, config, traj, agent, optimizer)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert any(
        np.any(a != b) for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(init), strict=True)
    )
    # After the first of 8 SGD steps the policy moved: the mean ratio is no longer exactly 1.
    assert float(metrics["mean_rho"]) != 1.0
    with pytest.raises(ValueError, match="num_minibatches=3 does not divide the 8 samples"):
        config3 = IMPALAConfig(num_minibatches=3)
        update_on(one_device, config3, traj, *agents.build(config3, 2, num_updates=1))


def test_registered_with_its_defaults():
    entry = agents.get("impala")
    assert entry.config_cls is IMPALAConfig and entry.default_env == "gymnax:CartPole-v1"
    assert loops.loop_defaults(entry, "anakin") == {"num_envs": 16, "rollout_len": 32}
    assert loops.loop_defaults(entry, "sebulba") == {}  # tuned on Anakin only
    AnakinConfig(**loops.loop_defaults(entry, "anakin"))


def test_image_torso_acts_on_uint8_frames():
    agent, _ = agents.build(IMPALAConfig(torso="nature_cnn", shared_torso=True), 6, 1)
    frames = jnp.zeros((3, 4, 84, 84), jnp.uint8)
    params = jax.jit(agent.init)(jax.random.key(0), frames[0])
    _, out = jax.jit(agent.act)(params, (), frames, jax.random.key(1))
    assert out.action.shape == (3,) and out.value.shape == (3,)
    assert out.extras["logits"].shape == (3, 6)


def test_config_errors_name_field_and_value():
    with pytest.raises(ConfigError, match=r"IMPALAConfig.optimizer='sgd' .* adam, rmsprop"):
        IMPALAConfig(optimizer="sgd")
    with pytest.raises(ConfigError, match=r"IMPALAConfig.torso='resnet' .* impala_resnet"):
        IMPALAConfig(torso="resnet")
    with pytest.raises(ConfigError, match=r"IMPALAConfig.clip_rho=0.0 .* > 0.0"):
        IMPALAConfig(clip_rho=0.0)
