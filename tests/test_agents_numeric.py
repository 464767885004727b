"""The agents' numbers against independent computations: PPO's loss terms and targets (NumPy),
Q(lambda)'s TD errors at a truncation and a termination (by hand), the learning-rate schedule's
length in optimizer steps, and the learner's reshuffling of every epoch."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer.agents import PPOConfig, QLambdaConfig, impala, learning_rate, ppo
from podracer.agents import qlambda as qlambda_agent
from podracer.agents.ppo import PPOBatch
from podracer.agents.qlambda import SequenceBatch
from podracer.core import make_learner
from podracer.types import ActorOutput, Agent, Trajectory

OBS_DIM = 4


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def random_trajectory(agent, params, key, num_steps=6, num_envs=3):
    """``Trajectory [T, B]`` over random observations, acted on by ``agent`` with ``params``.

    Two terminations and two truncations; ``bootstrap_obs[t]`` is ``obs[t + 1]`` inside an
    episode and a final observation of its own where one ends (``obs[t + 1]`` then starts the
    next episode), as the Trajectory contract has it."""
    terminated = np.zeros((num_steps, num_envs), bool)
    truncated = np.zeros((num_steps, num_envs), bool)
    terminated[2, 0] = terminated[1, 2] = True
    truncated[4, 1] = truncated[3, 2] = True
    obs_key, final_key, reward_key, act_key = jax.random.split(key, 4)
    observations = jax.random.normal(obs_key, (num_steps + 1, num_envs, OBS_DIM))
    final = jax.random.normal(final_key, (num_steps, num_envs, OBS_DIM))
    done = terminated | truncated
    obs = observations[:-1]
    _, behaviour = jax.vmap(lambda o, k: agent.act(params, (), o, k))(
        obs, jax.random.split(act_key, num_steps)
    )
    return Trajectory(
        obs=obs,
        reward=jax.random.normal(reward_key, (num_steps, num_envs)),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        bootstrap_obs=jnp.where(done[..., None], final, observations[1:]),
        behaviour=behaviour,
    )


def numpy_gae(reward, v_obs, v_next, terminated, truncated, gamma, lambda_):
    """GAE, one step at a time: a termination does not bootstrap, any episode end cuts the
    trace, a truncation still bootstraps from the value of its final observation."""
    reward, v_obs, v_next = (np.asarray(x, np.float64) for x in (reward, v_obs, v_next))
    terminated, truncated = np.asarray(terminated), np.asarray(truncated)
    advantage = np.zeros_like(reward)
    following = np.zeros(reward.shape[1])
    for t in reversed(range(reward.shape[0])):
        bootstrap = np.where(terminated[t], 0.0, gamma * v_next[t])
        delta = reward[t] + bootstrap - v_obs[t]
        carried = np.where(terminated[t] | truncated[t], 0.0, gamma * lambda_ * following)
        advantage[t] = following = delta + carried
    return advantage


# --- PPO ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("clip_value", [True, False])
def test_ppo_loss_terms_equal_a_numpy_computation(clip_value):
    """Every term of PPO's loss, recomputed in NumPy from the network's logits and values, on a
    batch whose ratios and values fall both inside and outside the clip range."""
    config = PPOConfig(
        hidden_sizes=(16,), clip_value=clip_value, clip_eps=0.2, ent_coef=0.03, vf_coef=0.7
    )
    num_actions, num_samples = 3, 64
    agent = ppo.make_agent(config, num_actions)
    network = config.network(num_actions, "ppo")
    keys = jax.random.split(jax.random.key(0), 7)
    obs = jax.random.normal(keys[0], (num_samples, OBS_DIM))
    params = agent.init(keys[1], obs[0])
    logits, value = (np.asarray(x, np.float64) for x in network.apply(params, obs))
    log_probs = log_softmax(logits)
    action = np.asarray(jax.random.randint(keys[2], (num_samples,), 0, num_actions))
    log_prob = log_probs[np.arange(num_samples), action]

    def noise(key):
        return 0.3 * np.asarray(jax.random.normal(key, (num_samples,)), np.float64)

    behaviour_log_prob = log_prob + noise(keys[3])
    behaviour_value = value + noise(keys[4])
    advantage = np.asarray(jax.random.normal(keys[5], (num_samples,)), np.float64)
    target = value + 3 * noise(keys[6])
    batch = PPOBatch(
        obs=obs,
        action=jnp.asarray(action, jnp.int32),
        log_prob=jnp.asarray(behaviour_log_prob, jnp.float32),
        value=jnp.asarray(behaviour_value, jnp.float32),
        advantage=jnp.asarray(advantage, jnp.float32),
        target=jnp.asarray(target, jnp.float32),
    )
    total, metrics = agent.loss(params, batch, jax.random.key(1))

    eps = config.clip_eps
    ratio = np.exp(log_prob - behaviour_log_prob)
    pg_loss = -np.mean(np.minimum(ratio * advantage, np.clip(ratio, 1 - eps, 1 + eps) * advantage))
    unclipped_error = (value - target) ** 2
    clipped_error = (behaviour_value + np.clip(value - behaviour_value, -eps, eps) - target) ** 2
    unclipped_loss = 0.5 * np.mean(unclipped_error)
    clipped_loss = 0.5 * np.mean(np.maximum(unclipped_error, clipped_error))
    value_loss = clipped_loss if clip_value else unclipped_loss
    entropy = -np.mean(np.sum(np.exp(log_probs) * log_probs, axis=-1))
    expected = {
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": np.mean((ratio - 1) - np.log(ratio)),
        "clip_fraction": np.mean(np.abs(ratio - 1) > eps),
        "loss": pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy,
    }
    assert set(metrics) == set(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(metrics[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(total, expected["loss"], rtol=1e-5, atol=1e-6)
    # The batch exercises every branch: clipped and unclipped ratios, and value errors where
    # the clipped one is the larger and where it is not, so the two value losses differ.
    assert 0.1 < expected["clip_fraction"] < 0.9
    assert 0.1 < np.mean(clipped_error > unclipped_error) < 0.9
    assert abs(clipped_loss - unclipped_loss) > 1e-2 * unclipped_loss


@pytest.mark.slow
@pytest.mark.parametrize("normalize", [False, True])
def test_ppo_targets_come_from_the_learner_params_not_the_lagging_actors(normalize):
    """The actors acted with other (older) params than the learner's: the advantages and
    targets ``prepare`` computes are GAE over the learner params' v(obs) and v(bootstrap_obs),
    not over the actors' values, which only centre the value clipping."""
    config = PPOConfig(
        hidden_sizes=(16,), gamma=0.9, gae_lambda=0.8, normalize_advantages=normalize
    )
    agent = ppo.make_agent(config, 2)
    network = config.network(2, "ppo")
    example = jnp.zeros(OBS_DIM)
    actor_params = agent.init(jax.random.key(1), example)
    learner_params = agent.init(jax.random.key(2), example)
    traj = random_trajectory(agent, actor_params, jax.random.key(3))
    num_steps, num_envs = traj.reward.shape

    batch = agent.prepare(learner_params, (), traj, jnp.mean)

    def values(params, obs):
        _, value = network.apply(params, obs.reshape(-1, OBS_DIM))
        return np.asarray(value, np.float64).reshape(num_steps, num_envs)

    v_obs = values(learner_params, traj.obs)
    v_next = values(learner_params, traj.bootstrap_obs)
    args = (traj.terminated, traj.truncated, config.gamma, config.gae_lambda)
    advantage = numpy_gae(traj.reward, v_obs, v_next, *args)
    target = advantage + v_obs
    if normalize:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)

    def by_step(x):
        return np.asarray(x).reshape(num_steps, num_envs)

    np.testing.assert_allclose(by_step(batch.advantage), advantage, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(by_step(batch.target), target, rtol=1e-5, atol=1e-5)
    # the value clipping is centred on the learnt params' value before the update, not on the
    # actors' (a stale centre would clip the value's progress away under lag)
    np.testing.assert_allclose(by_step(batch.value), v_obs, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(by_step(batch.log_prob), traj.behaviour.log_prob)
    # The actors' values are not the learner's (the lag is real), and GAE from them, as
    # prepare computed it before (v_tm1 = behaviour.value), gives other targets.
    assert np.max(np.abs(np.asarray(traj.behaviour.value) - v_obs)) > 0.1
    lagged = numpy_gae(traj.reward, traj.behaviour.value, v_next, *args)
    assert np.max(np.abs((lagged + np.asarray(traj.behaviour.value)) - target)) > 0.1


# --- Q(lambda) ----------------------------------------------------------------------------------

# Five one-hot states: q(s) is the row of this table when the network's hidden layer is the
# identity (ReLU of a one-hot is itself) and its output layer is the table.
Q_TABLE = np.array(
    [
        [1.0, 2.0],  # s0: obs[0]
        [0.5, -1.0],  # s1: obs[1] (and bootstrap_obs[0])
        [3.0, 0.0],  # s2: obs[2], the first observation of the next episode
        [-2.0, 4.0],  # s3: bootstrap_obs[1], the final observation of the episode that ended
        [1.5, 2.5],  # s4: bootstrap_obs[2], after the last step
    ],
    np.float32,
)


def tabular_q_params(agent):
    num_states, num_actions = Q_TABLE.shape
    params = agent.init(jax.random.key(0), jnp.zeros(num_states))
    table = {
        "params": {
            "MLP_0": {"Dense_0": {"kernel": jnp.eye(num_states), "bias": jnp.zeros(num_states)}},
            "Dense_0": {"kernel": jnp.asarray(Q_TABLE), "bias": jnp.zeros(num_actions)},
        }
    }
    assert jax.tree.structure(table) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(table), jax.tree.leaves(params), strict=True):
        assert a.shape == b.shape
    return table


@pytest.mark.parametrize("ends_by", ["truncation", "termination"])
def test_qlambda_td_errors_at_an_episode_end_equal_a_hand_computation(ends_by):
    """Three steps, the episode ending after the second. Peng's Q(lambda) targets,
    ``G_t = r_t + gamma ((1 - lambda_t) max_a q(x'_t) + lambda_t G_{t+1})`` with ``x'_t`` the
    bootstrap observation: at a truncation G bootstraps from max_a q of the final observation
    (s3, not the next episode's s2) with the trace cut; at a termination G is the reward."""
    gamma, lambda_ = 0.9, 0.8
    config = QLambdaConfig(gamma=gamma, q_lambda=lambda_, hidden_sizes=(5,), activation="relu")
    agent = qlambda_agent.make_agent(config, 2)
    params = tabular_q_params(agent)
    states = np.eye(5, dtype=np.float32)
    end, goes_on = np.array([[False], [True], [False]]), np.zeros((3, 1), bool)
    traj = Trajectory(
        obs=jnp.asarray(states[[0, 1, 2]])[:, None],
        reward=jnp.asarray([[1.0], [-0.5], [2.0]]),
        terminated=jnp.asarray(end if ends_by == "termination" else goes_on),
        truncated=jnp.asarray(end if ends_by == "truncation" else goes_on),
        bootstrap_obs=jnp.asarray(states[[1, 3, 4]])[:, None],
        behaviour=ActorOutput(
            action=jnp.asarray([[1], [0], [0]], jnp.int32),
            log_prob=jnp.zeros((3, 1)),
            value=jnp.zeros((3, 1)),
        ),
    )
    g2 = 2.0 + 0.9 * 2.5  # r_2 + gamma max q(s4): the rollout's end bootstraps
    # At a truncation r_1 + gamma max q(s3), the trace to g2 cut; at a termination r_1 alone.
    g1 = -0.5 + 0.9 * 4.0 if ends_by == "truncation" else -0.5
    g0 = 1.0 + 0.9 * ((1 - 0.8) * 0.5 + 0.8 * g1)  # (1 - lambda) max q(s1) + lambda g1
    expected_td = np.array([g0 - 2.0, g1 - 0.5, g2 - 3.0])  # minus q(s_t, a_t)

    batch = agent.prepare(params, (), traj, jnp.mean)
    assert isinstance(batch, SequenceBatch) and batch.reward.shape == (1, 3)
    (loss, metrics), grads = jax.value_and_grad(agent.loss, has_aux=True)(
        params, batch, jax.random.key(0)
    )
    # loss = mean(td^2) / 2 over the 3 steps, and q(s_t, a_t) is the table's entry [s_t, a_t]
    # (each state is the obs of one step only; the targets are under a stop-gradient), so the
    # gradient of that entry is -td_t / 3: it reads each step's TD error.
    table_grad = np.array(grads["params"]["Dense_0"]["kernel"])
    td = -3.0 * table_grad[[0, 1, 2], [1, 0, 0]]
    np.testing.assert_allclose(td, expected_td, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, 0.5 * np.mean(expected_td**2), rtol=1e-5)
    np.testing.assert_allclose(metrics["loss"], loss)
    np.testing.assert_allclose(metrics["mean_q"], np.mean(Q_TABLE[:3].max(axis=1)), rtol=1e-6)
    # Nothing else of the table moves: the bootstrap states are targets only.
    table_grad[[0, 1, 2], [1, 0, 0]] = 0.0
    np.testing.assert_array_equal(table_grad, 0.0)


# --- bootstrap values from the values of obs ----------------------------------------------------


def every_bootstrap_value(value_fn, params, v_obs, bootstrap_obs, truncated_t, time_axis=0):
    """The reference: the network on every ``bootstrap_obs`` (what the agents computed before
    :func:`podracer.core.returns.bootstrap_values`)."""
    del time_axis
    flat = bootstrap_obs.reshape(-1, *bootstrap_obs.shape[truncated_t.ndim :])
    return value_fn(params, flat).reshape(v_obs.shape)


def _computed(module, agent, params, traj, monkeypatch, reference):
    """PPO: its prepared batch; IMPALA and Q(lambda): loss, metrics and gradients on the
    prepared batch (their bootstrap values are computed in the loss)."""
    if reference:
        monkeypatch.setattr(module, "bootstrap_values", every_bootstrap_value)
    batch = agent.prepare(params, (), traj, jnp.mean)
    if module is ppo:
        return batch
    return jax.grad(agent.loss, has_aux=True)(params, batch, jax.random.key(3)), agent.loss(
        params, batch, jax.random.key(3)
    )


@pytest.mark.slow
@pytest.mark.parametrize("mid_truncations", ["many", True, False])
@pytest.mark.parametrize("name", ["ppo", "impala", "qlambda"])
def test_bootstrap_values_reused_from_obs_equal_every_bootstrap_obs_evaluated(
    monkeypatch, name, mid_truncations
):
    """Reusing ``v(obs[t + 1])`` inside episodes gives the losses, gradients and targets of
    evaluating the network on every ``bootstrap_obs``, to rounding: with truncations before the
    last step (their final observations evaluated ``B`` at a time), with more of them than
    ``B`` (several passes of the loop) and without (only the last step's), alone and vmapped
    over two parameter sets (the loop's condition then batched)."""
    module = {"ppo": ppo, "impala": impala, "qlambda": qlambda_agent}[name]
    config = {
        "ppo": PPOConfig(hidden_sizes=(16,)),
        "impala": impala.IMPALAConfig(hidden_sizes=(16,)),
        "qlambda": QLambdaConfig(hidden_sizes=(16,)),
    }[name]
    agent = module.make_agent(config, 3)
    keys = jax.random.split(jax.random.key(0), 2)
    params = jax.vmap(lambda k: agent.init(k, jnp.zeros(OBS_DIM)))(keys)
    first = jax.tree.map(lambda x: x[0], params)
    traj = random_trajectory(agent, first, jax.random.key(1))
    if mid_truncations == "many":
        many = jax.random.bernoulli(jax.random.key(2), 0.7, traj.truncated.shape)
        traj = traj._replace(truncated=many & ~traj.terminated)
        assert int(jnp.sum(traj.truncated[:-1])) > 2 * traj.truncated.shape[1]
    if not mid_truncations:
        # The old truncations' steps go on in their episodes: their bootstrap_obs is obs[t + 1].
        truncated = jnp.zeros_like(traj.truncated).at[-1, 1].set(True)
        inside = ~(traj.terminated | truncated)[:-1, :, None]
        following = jnp.where(inside, traj.obs[1:], traj.bootstrap_obs[:-1])
        bootstrap_obs = traj.bootstrap_obs.at[:-1].set(following)
        traj = traj._replace(truncated=truncated, bootstrap_obs=bootstrap_obs)
    assert bool(jnp.any(traj.truncated[:-1])) == bool(mid_truncations)

    def both(p):
        mine = _computed(module, agent, p, traj, monkeypatch, reference=False)
        with monkeypatch.context() as patch:
            theirs = _computed(module, agent, p, traj, patch, reference=True)
        return mine, theirs

    for mine, theirs in [jax.jit(both)(first), jax.jit(jax.vmap(both))(params)]:
        for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(theirs), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- the learning-rate schedule -----------------------------------------------------------------


def constant_gradient_agent():
    """A one-parameter agent whose loss is ``w``: every gradient is 1, so Adam's update is
    ``-lr_t`` (to its epsilon) and ``w`` after k steps is minus the sum of the first k rates.
    Its samples are the trajectory's rewards."""

    def loss(params, batch, key):
        del key
        value = params["w"] + 0.0 * jnp.sum(batch)
        return value, {"loss": value}

    return Agent(
        init=lambda key, obs: {"w": jnp.zeros(())},
        act=None,
        prepare=lambda params, agent_state, traj, mean_fn: traj.reward.reshape(-1),
        loss=loss,
    )


def index_trajectory(num_steps, num_envs):
    """A trajectory whose rewards are the sample indices ``0 .. T * B - 1``."""
    zeros = jnp.zeros((num_steps, num_envs))
    return Trajectory(
        obs=zeros[..., None],
        reward=jnp.arange(num_steps * num_envs, dtype=jnp.float32).reshape(num_steps, num_envs),
        terminated=zeros.astype(bool),
        truncated=zeros.astype(bool),
        bootstrap_obs=zeros[..., None],
        behaviour=ActorOutput(zeros.astype(jnp.int32), zeros, zeros),
    )


@pytest.mark.slow
@pytest.mark.parametrize("anneal_lr", [True, False])
@pytest.mark.parametrize("spec", [ppo.SPEC, impala.SPEC], ids=["ppo", "impala"])
def test_learning_rate_reaches_zero_after_the_runs_last_optimizer_step(spec, anneal_lr):
    """With anneal_lr the rate is lr at the first optimizer step and falls linearly to 0 after
    exactly num_updates * num_epochs * num_minibatches steps, the steps the agent's learner
    takes over the run; an update after the run's last moves nothing. Without, it is constant."""
    lr, num_updates, num_epochs, num_minibatches = 0.01, 3, 2, 2
    config = spec.config_cls(
        lr=lr, anneal_lr=anneal_lr, num_epochs=num_epochs, num_minibatches=num_minibatches
    )
    steps_per_update = num_epochs * num_minibatches
    run_steps = num_updates * steps_per_update
    k = np.arange(run_steps + steps_per_update)  # the run's optimizer steps and one update's more
    rates = lr * np.maximum(0.0, 1 - k / run_steps) if anneal_lr else np.full(k.shape, lr)
    schedule = learning_rate(config, num_updates)
    if anneal_lr:
        np.testing.assert_allclose([schedule(i) for i in k], rates, rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(schedule(0), lr, rtol=1e-7)
        assert schedule(run_steps - 1) > 0 and schedule(run_steps) == 0.0
    else:
        assert schedule == lr

    # Through the agent's own optimizer and learner: each update is num_epochs *
    # num_minibatches optimizer steps, and the schedule counts exactly those.
    learner = spec.make_learner(
        constant_gradient_agent(), spec.make_optimizer(config, num_updates), config
    )
    state = learner.init(jax.random.key(0), jnp.zeros(1))
    update = jax.jit(learner.update)
    traj = index_trajectory(2, 4)
    for done in range(1, num_updates + 2):
        before = float(state.params["w"])
        state, _ = update(state, traj)
        moved = before - float(state.params["w"])
        np.testing.assert_allclose(
            -float(state.params["w"]), rates[: done * steps_per_update].sum(), rtol=1e-4
        )
        if done <= num_updates or not anneal_lr:
            assert moved > 0
        else:  # the update after the run's last: the rate is 0, the update exactly 0
            assert moved == 0.0


# --- the learner's epochs -----------------------------------------------------------------------


@pytest.mark.parametrize("unroll", [1, True])
def test_each_epoch_reshuffles_and_covers_every_sample_once(unroll):
    """The loss records, through a callback, which samples each minibatch holds: every epoch's
    minibatches partition the batch, and the two epochs (and the next update) cut it apart
    differently."""
    seen = []

    def loss(params, batch, key):
        del key
        jax.debug.callback(
            lambda ids: seen.append(np.asarray(ids).astype(int)), batch, ordered=True
        )
        value = params["w"] * jnp.mean(batch)
        return value, {"loss": value}

    agent = constant_gradient_agent()._replace(loss=loss)
    num_epochs, num_minibatches, num_samples = 2, 4, 16
    learner = make_learner(
        agent, optax.sgd(0.1), num_epochs=num_epochs, num_minibatches=num_minibatches, unroll=unroll
    )
    state = learner.init(jax.random.key(0), jnp.zeros(1))
    update = jax.jit(learner.update)
    traj = index_trajectory(4, 4)
    for _ in range(2):
        state, _ = update(state, traj)
    jax.effects_barrier()

    assert len(seen) == 2 * num_epochs * num_minibatches
    partitions = []
    for start in range(0, len(seen), num_minibatches):
        epoch = seen[start : start + num_minibatches]
        assert all(ids.shape == (num_samples // num_minibatches,) for ids in epoch)
        np.testing.assert_array_equal(np.sort(np.concatenate(epoch)), np.arange(num_samples))
        partitions.append({frozenset(ids.tolist()) for ids in epoch})
    assert len({frozenset(p) for p in partitions}) == len(partitions), partitions
    in_order = {frozenset(range(i, i + 4)) for i in range(0, num_samples, 4)}
    assert in_order not in partitions


# --- what an update evaluates: the passes over the trajectory ----------------------------------


def dot_rows(fn, *args) -> list[int]:
    """The leading sizes of the left operands of every ``dot_general`` in ``fn``'s jaxpr, sub-
    jaxprs (loops, conditionals, ``shard_map``) included: the rows each matrix product of a
    network pass takes."""
    rows = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                rows.append(eqn.invars[0].aval.shape[0])
            for param in eqn.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return rows


@pytest.mark.parametrize("shared_torso", [True, False])
def test_an_update_without_policy_lag_evaluates_the_trajectory_once_with_a_shared_torso(
    shared_torso,
):
    """With no policy lag (Anakin) and one torso for policy and value, PPO's update takes the
    actors' values and runs no network pass over the whole ``[T, B]`` trajectory outside its
    minibatches; with policy lag (Sebulba) it makes the one pass its targets need. Torsos of
    their own keep the pass (the actors' value would cost T small passes instead of one:
    ``Agent.prepare_no_lag``). No update evaluates every ``bootstrap_obs``: truncations take
    ``B``-row passes (:func:`podracer.core.returns.bootstrap_values`)."""
    num_steps, num_envs = 8, 4
    config = PPOConfig(hidden_sizes=(16,), num_minibatches=2, shared_torso=shared_torso)
    agent = ppo.make_agent(config, 3)
    assert (agent.prepare_no_lag is not None) == shared_torso
    params = agent.init(jax.random.key(0), jnp.zeros(OBS_DIM))
    traj = random_trajectory(agent, params, jax.random.key(1), num_steps, num_envs)
    whole, minibatch = num_steps * num_envs, num_steps * num_envs // 2
    for no_policy_lag in (True, False):
        learner = make_learner(
            agent, optax.adam(1e-3), num_epochs=1, num_minibatches=2, no_policy_lag=no_policy_lag
        )
        rows = dot_rows(learner.update, learner.init(jax.random.key(2), jnp.zeros(OBS_DIM)), traj)
        assert set(rows) <= {whole, minibatch, num_envs}, rows
        passes = rows.count(whole)
        reused = no_policy_lag and shared_torso
        # A pass of the 1-layer value network is 2 products (hidden, head), shared or not.
        assert passes == (0 if reused else 2), (no_policy_lag, rows)


@pytest.mark.parametrize("shared_torso", [True, False])
def test_the_anakin_update_uses_the_actors_values(shared_torso):
    """Anakin builds its learner with ``no_policy_lag``: its compiled step makes no pass over
    the whole trajectory with a shared torso, the critic's one pass with torsos of their own."""
    from podracer.loops.anakin import AnakinConfig, build

    config = PPOConfig(hidden_sizes=(16,), num_minibatches=2, shared_torso=shared_torso)
    loop = AnakinConfig(num_envs=4, rollout_len=8)
    system = build("gymnax:CartPole-v1", config, loop, total_timesteps=loop.steps_per_update)
    rows = dot_rows(system.make_step(1), system.init(0))
    whole = loop.steps_per_update // system.mesh.devices.size  # one device's share
    assert rows.count(whole) == (0 if shared_torso else 2), rows
