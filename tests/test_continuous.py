"""Continuous actions: the Gaussian head against independent formulas and distrax, the bounds,
bad action specs, and the running normalisation (NumPy statistics, 2 devices == 1, checkpoint,
evaluation)."""

import dataclasses
import math

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from podracer.agents import IMPALAConfig, PPOConfig, build
from podracer.agents.policy import categorical_head, gaussian_head
from podracer.core import make_learner
from podracer.core.normalisation import (
    NormalisationFields,
    discounted_returns,
    init_statistics,
    normalise,
    update_statistics,
)
from podracer.errors import ConfigError
from podracer.parallel import DATA_AXIS, data_mesh
from podracer.types import (
    ActorOutput,
    BoundedActionSpec,
    DiscreteActionSpec,
    ObservationSpec,
    TimeStep,
    Trajectory,
)

SPEC = BoundedActionSpec((3,), low=np.array([-1.0, -2.0, 0.0]), high=np.array([1.0, 2.0, 0.5]))


def gaussians(seed=0, n=64, d=3):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(n, d)).astype(np.float32)
    log_std = rng.uniform(-1.5, 0.7, size=(n, d)).astype(np.float32)
    return mean, log_std


def test_gaussian_log_prob_entropy_kl_equal_numpy_and_distrax():
    head = gaussian_head(SPEC)
    mean, log_std = gaussians(0)
    mean_q, log_std_q = gaussians(1)
    u = (mean + np.exp(log_std) * np.random.default_rng(2).normal(size=mean.shape)).astype(
        np.float32
    )
    log_prob, entropy = head.log_prob_and_entropy((jnp.asarray(mean), jnp.asarray(log_std)), u)
    # NumPy, in float64, from the density's formula.
    std = np.exp(log_std.astype(np.float64))
    expected_lp = np.sum(
        -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi), axis=-1
    )
    expected_h = np.sum(np.log(std) + 0.5 * math.log(2 * math.pi * math.e), axis=-1)
    std_q = np.exp(log_std_q.astype(np.float64))
    expected_kl = np.sum(
        np.log(std_q / std) + (std**2 + (mean - mean_q) ** 2) / (2 * std_q**2) - 0.5, axis=-1
    )
    np.testing.assert_allclose(log_prob, expected_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy, expected_h, rtol=1e-5, atol=1e-5)
    kl = head.kl((mean, log_std), (mean_q, log_std_q))
    np.testing.assert_allclose(kl, expected_kl, rtol=1e-4, atol=1e-5)
    # distrax agrees.
    p = distrax.MultivariateNormalDiag(mean, np.exp(log_std))
    q = distrax.MultivariateNormalDiag(mean_q, np.exp(log_std_q))
    np.testing.assert_allclose(log_prob, p.log_prob(u), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(entropy, p.entropy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kl, p.kl_divergence(q), rtol=1e-4, atol=1e-4)
    assert (
        float(jnp.max(kl)) > 0.1 and float(head.kl((mean, log_std), (mean, log_std)).max()) < 1e-6
    )


def test_categorical_head_equals_distrax():
    head = categorical_head()
    logits = np.random.default_rng(0).normal(size=(32, 5)).astype(np.float32)
    logits_q = np.random.default_rng(1).normal(size=(32, 5)).astype(np.float32)
    action = np.random.default_rng(2).integers(0, 5, size=32)
    log_prob, entropy = head.log_prob_and_entropy(logits, action)
    p, q = distrax.Categorical(logits), distrax.Categorical(logits_q)
    np.testing.assert_allclose(log_prob, p.log_prob(action), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(entropy, p.entropy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(head.kl(logits, logits_q), p.kl_divergence(q), rtol=1e-4, atol=1e-6)


def test_gaussian_samples_are_clipped_to_the_bounds_and_log_prob_is_the_samples():
    head = gaussian_head(SPEC)
    mean = jnp.zeros((4096, 3))
    log_std = jnp.full((4096, 3), 1.0)  # std e: many samples fall outside the bounds
    action, log_prob, extras = head.sample(jax.random.key(0), (mean, log_std))
    low, high = SPEC.low.astype(np.float32), SPEC.high.astype(np.float32)
    assert action.shape == (4096, 3) and action.dtype == jnp.float32
    assert np.all(action >= low) and np.all(action <= high)
    u = np.asarray(extras["sample"])
    assert np.mean((u < low) | (u > high)) > 0.3  # the clip did something
    np.testing.assert_array_equal(action, np.clip(u, low, high))
    expected, _ = head.log_prob_and_entropy((mean, log_std), u)
    np.testing.assert_allclose(log_prob, expected, rtol=1e-6)
    out = ActorOutput(action, log_prob, jnp.zeros(4096), extras)
    np.testing.assert_array_equal(head.taken(out), u)
    np.testing.assert_array_equal(head.greedy(out), np.clip(np.zeros((4096, 3)), low, high))
    # the sample's statistics are those of N(mean, std)
    np.testing.assert_allclose(np.std(u, axis=0), math.e, rtol=0.05)


def test_gaussian_actions_keep_a_multi_dimensional_shape():
    spec = BoundedActionSpec((2, 2), low=-1.0, high=1.0)
    agent, _ = build(PPOConfig(), spec, 1)
    params = agent.init(jax.random.key(0), jnp.zeros(5))
    _, out = agent.act(params, (), jnp.ones((7, 5)), jax.random.key(1))
    assert out.action.shape == (7, 2, 2) and out.log_prob.shape == (7,)
    assert out.extras["sample"].shape == (7, 2, 2)


@pytest.mark.parametrize(
    "spec, words",
    [
        (BoundedActionSpec((2,), low=-np.inf, high=np.inf), ["low=-inf", "finite"]),
        (BoundedActionSpec((2,), low=-1, high=1, dtype="int32"), ["int32", "float"]),
        (BoundedActionSpec((2,), low=1.0, high=-1.0), ["low=1.0", "below"]),
        (BoundedActionSpec((0,), low=-1.0, high=1.0), ["shape (0,)"]),
    ],
)
def test_a_bad_action_spec_is_a_clear_error(spec, words):
    with pytest.raises(ConfigError) as error:
        build(PPOConfig(), spec, 1)
    message = str(error.value)
    assert message.startswith("ppo:") and all(w in message for w in words), message


def test_init_log_std_sets_the_initial_standard_deviation():
    for state_dependent in (False, True):
        cfg = PPOConfig(init_log_std=-0.5, state_dependent_std=state_dependent)
        agent, _ = build(cfg, SPEC, 1)
        params = agent.init(jax.random.key(0), jnp.zeros(4))
        _, out = agent.act(params, (), jnp.zeros((2000, 4)), jax.random.key(1))
        u = np.asarray(out.extras["sample"])
        np.testing.assert_allclose(np.std(u, axis=0), math.exp(-0.5), rtol=0.08)


def test_statistics_equal_numpy_over_the_same_data():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(8, 16, 4)) * np.arange(1, 5) for _ in range(5)]
    stats = init_statistics((4,))
    for x in batches:
        stats = update_statistics(stats, jnp.asarray(x, jnp.float32), jnp.mean, batch_dims=2)
    everything = np.concatenate([b.reshape(-1, 4) for b in batches])
    np.testing.assert_allclose(stats.mean, everything.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.var, everything.var(0), rtol=1e-4)
    assert float(stats.count) == 5
    z = normalise(stats, everything, clip=10.0)
    np.testing.assert_allclose(np.mean(z, 0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.std(z, 0), 1.0, rtol=1e-4)
    assert float(jnp.max(normalise(stats, everything * 1000, clip=5.0))) == 5.0


def test_discounted_returns_equal_a_numpy_recursion():
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(9, 3)).astype(np.float32)
    terminated = rng.random((9, 3)) < 0.15
    truncated = (rng.random((9, 3)) < 0.15) & ~terminated
    traj = Trajectory(
        obs=None,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        bootstrap_obs=None,
        behaviour=None,
    )
    expected = np.zeros_like(reward)
    g = np.zeros(3)
    for t in reversed(range(9)):
        g = reward[t] + 0.9 * np.where(terminated[t] | truncated[t], 0.0, g)
        expected[t] = g
    np.testing.assert_allclose(discounted_returns(traj, 0.9), expected, rtol=1e-6)


def test_discounted_returns_of_a_constant_reward_inside_shard_map(two_devices):
    """An environment whose reward is a constant (brax's inverted pendulum) gives rewards that
    vary over no mesh axis while the episode ends do: the returns still trace inside
    ``shard_map`` and equal the NumPy recursion on every shard."""
    mesh = data_mesh(two_devices)
    terminated = np.random.default_rng(1).random((6, 4)) < 0.3

    def returns(terminated):
        reward = jnp.ones(terminated.shape, jnp.float32)  # depends on no input
        traj = Trajectory(None, reward, terminated, jnp.zeros_like(terminated), None, None)
        return discounted_returns(traj, 0.5)

    spec = P(None, DATA_AXIS)
    sharded = jax.jit(jax.shard_map(returns, mesh=mesh, in_specs=spec, out_specs=spec))
    expected = np.zeros((6, 4))
    g = np.zeros(4)
    for t in reversed(range(6)):
        g = 1.0 + 0.5 * np.where(terminated[t], 0.0, g)
        expected[t] = g
    np.testing.assert_allclose(sharded(terminated), expected, rtol=1e-6)


def random_trajectory(seed, num_steps=8, num_envs=8, obs_dim=3, action_spec=SPEC):
    rng = np.random.default_rng(seed)
    obs = (rng.normal(size=(num_steps + 1, num_envs, obs_dim)) * 5 + 2).astype(np.float32)
    action = rng.uniform(-1, 1, size=(num_steps, num_envs, 3)).astype(np.float32)
    return Trajectory(
        obs=obs[:-1],
        reward=rng.normal(size=(num_steps, num_envs)).astype(np.float32) * 10,
        terminated=rng.random((num_steps, num_envs)) < 0.1,
        truncated=np.zeros((num_steps, num_envs), bool),
        bootstrap_obs=obs[1:],
        behaviour=ActorOutput(
            action=np.clip(action, -1, 1),
            log_prob=np.full((num_steps, num_envs), -2.0, np.float32),
            value=np.zeros((num_steps, num_envs), np.float32),
            extras={"sample": action, "mean": action},
        ),
    )


NORMALISED = PPOConfig(
    normalize_observations=True,
    normalize_rewards=True,
    num_epochs=1,
    num_minibatches=1,
    anneal_lr=False,
)


def updates_on_mesh(agent, trajectories, devices):
    """Learner updates inside shard_map over ``devices``, the trajectories split along B;
    returns the final state's agent slot and params as device 0 holds them."""
    learner = make_learner(
        agent, optax.sgd(0.1), num_epochs=1, num_minibatches=1, axis_name=DATA_AXIS
    )
    state = learner.init(jax.random.key(7), jnp.zeros(3))
    fn = jax.jit(
        jax.shard_map(
            lambda s, t: learner.update(s, t)[0],
            mesh=data_mesh(devices),
            in_specs=(P(), P(None, DATA_AXIS)),
            out_specs=P(),
            check_vma=False,
        )
    )
    for traj in trajectories:
        state = fn(state, traj)
    return state


@pytest.mark.slow
def test_normalised_learner_two_devices_equal_one(one_device, two_devices):
    agent, _ = build(NORMALISED, SPEC, 10, ObservationSpec((3,), np.float32))
    trajectories = [random_trajectory(seed) for seed in range(3)]
    one = updates_on_mesh(agent, trajectories, one_device)
    two = updates_on_mesh(agent, trajectories, two_devices)
    obs = np.concatenate([t.obs.reshape(-1, 3) for t in trajectories])
    np.testing.assert_allclose(one.agent_state.observations.mean, obs.mean(0), rtol=1e-5)
    np.testing.assert_allclose(one.agent_state.observations.var, obs.var(0), rtol=1e-4)
    returns = np.concatenate(
        [np.asarray(discounted_returns(t, 0.99)).ravel() for t in trajectories]
    )
    np.testing.assert_allclose(one.agent_state.returns.var, returns.var(), rtol=1e-4)
    for a, b in zip(
        jax.tree.leaves((one.params, one.agent_state)),
        jax.tree.leaves((two.params, two.agent_state)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_normalised_act_and_prepare_see_normalised_observations():
    agent, _ = build(NORMALISED, SPEC, 10, ObservationSpec((3,), np.float32))
    inner, _ = build(PPOConfig(num_epochs=1, num_minibatches=1), SPEC, 10)
    learner = make_learner(agent, optax.sgd(0.1), num_epochs=1, num_minibatches=1)
    state = learner.init(jax.random.key(0), jnp.zeros(3))
    state, _ = jax.jit(learner.update)(state, random_trajectory(0))
    stats = state.agent_state.observations
    obs = jnp.asarray(random_trajectory(1).obs[0])
    acting = agent.actor_params(state.params, state.agent_state)
    _, out = agent.act(acting, (), obs, jax.random.key(3))
    _, expected = inner.act(state.params, (), normalise(stats, obs, 10.0), jax.random.key(3))
    np.testing.assert_allclose(out.log_prob, expected.log_prob, rtol=1e-6)
    np.testing.assert_allclose(out.value, expected.value, rtol=1e-6)
    assert not np.allclose(out.value, inner.act(state.params, (), obs, jax.random.key(3))[1].value)


def test_normalisation_fields_are_checked_and_on_every_actor_critic():
    assert issubclass(PPOConfig, NormalisationFields)
    assert issubclass(IMPALAConfig, NormalisationFields)
    with pytest.raises(ConfigError, match="observation_clip"):
        PPOConfig(observation_clip=0.0)
    # without normalisation an agent is returned as it is (no slot, no wrapper)
    agent, _ = build(PPOConfig(), DiscreteActionSpec(2), 1, ObservationSpec((3,), np.float32))
    assert agent.init_state(jax.random.key(0), None) == ()


def normalised_spec(eval_interval):
    from podracer import runs
    from podracer.loops.anakin import AnakinConfig

    return runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env="gymnax:Pendulum-v1",
        seed=1,
        total_timesteps=8 * 64,
        agent_config=dataclasses.replace(NORMALISED, num_epochs=2, num_minibatches=2),
        arch_config=AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=2),
        options=runs.RunOptions(
            checkpoint_interval=4, eval_interval=eval_interval, eval_episodes=2
        ),
    )


def latest_state(run_dir, spec):
    from podracer.loops import anakin
    from podracer.runs.checkpoint import Checkpointer

    system = anakin.build(
        spec.env,
        spec.agent_config,
        spec.arch_config,
        total_timesteps=spec.total_timesteps,
        devices=jax.devices()[:1],
    )
    with Checkpointer(run_dir) as checkpointer:
        state, _ = checkpointer.restore(system.init(spec.seed))
    return state.learner


@pytest.mark.slow
def test_normaliser_resumes_bitwise_and_evaluation_leaves_it_alone(tmp_path):
    import os
    import shutil

    from podracer import runs
    from podracer.runs.checkpoint import Checkpointer

    one = jax.devices()[:1]
    spec = normalised_spec(eval_interval=2)
    straight = str(tmp_path / "straight")
    summary = runs.train(spec, straight, console=False, devices=one)
    # resumed from the checkpoint of update 4: the same statistics and params, bit for bit
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "8"))
    assert Checkpointer(resumed).steps() == [4]
    again = runs.train(spec, resumed, resume=True, console=False, devices=one)
    assert again["params_checksum"] == summary["params_checksum"]
    a, b = latest_state(straight, spec), latest_state(resumed, spec)
    stats = a.agent_state.observations
    assert float(stats.count[0]) == 8.0 and float(jnp.min(stats.var)) > 0
    assert not np.allclose(stats.mean, 0.0) and not np.allclose(a.agent_state.returns.var, 1.0)
    for x, y in zip(jax.tree.leaves(a.agent_state), jax.tree.leaves(b.agent_state), strict=True):
        np.testing.assert_array_equal(x, y)
    # the same run without evaluation: evaluation changed nothing the learner keeps
    quiet = str(tmp_path / "no_eval")
    plain = runs.train(normalised_spec(eval_interval=0), quiet, console=False, devices=one)
    assert plain["params_checksum"] == summary["params_checksum"]
    c = latest_state(quiet, spec)
    for x, y in zip(jax.tree.leaves(a.agent_state), jax.tree.leaves(c.agent_state), strict=True):
        np.testing.assert_array_equal(x, y)
    # and evaluating the run's checkpoint leaves it as it was
    assert runs.evaluate_run(straight, episodes=2)["episodes"] == 2
    d = latest_state(straight, spec)
    from podracer.runs.checkpoint import to_raw

    for x, y in zip(jax.tree.leaves(to_raw(a)), jax.tree.leaves(to_raw(d)), strict=True):
        np.testing.assert_array_equal(x, y)


class Slide:
    """A deterministic 1-D slide: the position moves by the action (in [-1, 1]); reaching 2
    pays 1 and terminates; 5 steps truncate. The observation is (position, time)."""

    id = "slide"
    default_params = None
    observation_spec = ObservationSpec((2,), jnp.dtype(jnp.float32))
    action_spec = BoundedActionSpec((1,), low=-1.0, high=1.0)

    def reset(self, key, params):
        state = jnp.zeros(2)
        return state, TimeStep(state, jnp.float32(0), jnp.bool_(False), jnp.bool_(False), state)

    def step(self, key, state, action, params):
        position = state[0] + action[0]
        time_ = state[1] + 1
        terminated = position >= 2.0
        truncated = (time_ >= 5) & ~terminated
        final_obs = jnp.stack([position, time_])
        done = terminated | truncated
        state = jnp.where(done, jnp.zeros(2), final_obs)
        return state, TimeStep(
            state, terminated.astype(jnp.float32), terminated, truncated, final_obs
        )


def test_anakin_rollout_equals_sebulba_actor_for_a_normalised_gaussian_agent():
    from podracer.core import RolloutState, make_rollout, reset_envs
    from podracer.core.normalisation import NormalisedState, RunningStatistics
    from podracer.envs.host.jax_env import JaxHostEnvironment
    from podracer.loops.sebulba import host_act, host_rollout, rollout_keys

    env = Slide()
    config = dataclasses.replace(NORMALISED, init_log_std=0.5)
    agent, _ = build(config, env.action_spec, 1, env.observation_spec)
    params = agent.init(jax.random.key(0), jnp.zeros(2))
    stats = RunningStatistics(jnp.float32(3), jnp.array([0.5, 2.0]), jnp.array([0.25, 4.0]))
    acting = agent.actor_params(params, NormalisedState((), stats, init_statistics(())))
    num_envs, num_steps = 3, 16
    key = jax.random.key(42)
    rollout = make_rollout(env, agent, num_steps)
    state = reset_envs(env, jax.random.split(jax.random.key(1), num_envs), None)
    _, anakin_traj, _ = jax.jit(rollout)(acting, state, None, key)
    host_env = JaxHostEnvironment(env, num_envs)
    carry = RolloutState((), host_env.reset(), ())
    _, sebulba_traj, _ = host_rollout(
        host_env, host_act(agent), acting, carry, rollout_keys(key, num_steps)
    )
    assert jax.tree.structure(anakin_traj) == jax.tree.structure(sebulba_traj)
    for a, b in zip(jax.tree.leaves(anakin_traj), jax.tree.leaves(sebulba_traj), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=1e-5)
    assert anakin_traj.terminated.any() and anakin_traj.truncated.any()
    assert anakin_traj.action.shape == (num_steps, num_envs, 1)
    # the actors normalised with the statistics they were given: the same params without them
    # act differently
    plain = agent.actor_params(params, agent.init_state(jax.random.key(0), params))
    _, other, _ = jax.jit(rollout)(plain, state, None, key)
    assert not np.allclose(other.behaviour.value, anakin_traj.behaviour.value)
