"""Legal-action masks and dict observations (podracer.types.ACTION_MASK): every discrete agent
acts only among the legal actions, its losses treat the illegal ones as absent (checked against
NumPy), and a dict observation is the same to a network as the same numbers flattened by hand."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from masked_env import MaskedChoice

import podracer
from podracer import agents, envs
from podracer.agents import DQNConfig, IMPALAConfig, PPOConfig, PQNConfig, QLambdaConfig
from podracer.agents.policy import EpsilonGreedy, categorical_head
from podracer.core.learner.replay import NStepItem, ReplayBatch
from podracer.errors import ConfigError
from podracer.networks import ActorCritic, mask_logits
from podracer.types import zero_observation

NUM_ACTIONS = 5
ENV = MaskedChoice(NUM_ACTIONS)
SMALL = dict(hidden_sizes=(16,))
CONFIGS = {
    "ppo": PPOConfig(**SMALL),
    "ppo-gru": PPOConfig(**SMALL, memory="gru", memory_size=8),
    "impala": IMPALAConfig(**SMALL),
    "dqn": DQNConfig(**SMALL),
    "dqn-gru": DQNConfig(**SMALL, memory="gru", memory_size=8),
    "pqn": PQNConfig(**SMALL),
    "qlambda": QLambdaConfig(**SMALL),
}


def observations(key, masks):
    """A batch of the environment's observations with the given masks [N, A]."""
    board_key, position_key = jax.random.split(key)
    n = masks.shape[0]
    return {
        "action_mask": jnp.asarray(masks),
        "board": jax.random.normal(board_key, (n, 3, 3)),
        "position": jax.random.normal(position_key, (n, 2)),
    }


def built(config):
    agent, _ = agents.build(config, ENV.action_spec, 10, ENV.observation_spec)
    key = jax.random.key(0)
    params = agent.init(key, zero_observation(ENV.observation_spec, xp=jnp))
    acting = agent.actor_params(params, agent.init_state(key, params))
    return agent, params, acting


def act(agent, acting, obs, key):
    n = obs["action_mask"].shape[0]
    return agent.act(acting, agent.initial_actor_state(n), obs, key)[1]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_legal_action_is_always_taken(name):
    agent, _, acting = built(CONFIGS[name])
    n = 256
    allowed = np.arange(n) % NUM_ACTIONS
    masks = np.eye(NUM_ACTIONS, dtype=bool)[allowed]
    obs = observations(jax.random.key(1), masks)
    exploring = [acting]
    if isinstance(acting, EpsilonGreedy):  # both the random and the greedy branch
        exploring = [acting._replace(epsilon=jnp.float32(e)) for e in (0.0, 1.0)]
    for acting_params in exploring:
        for seed in range(3):
            out = act(agent, acting_params, obs, jax.random.key(seed))
            np.testing.assert_array_equal(np.asarray(out.action), allowed)
            assert np.all(np.isfinite(np.asarray(out.log_prob)))
            np.testing.assert_allclose(np.asarray(out.log_prob), 0.0, atol=1e-6)  # prob 1
        greedy = agent.greedy(out)
        np.testing.assert_array_equal(np.asarray(greedy), allowed)


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_masked_actions_never_sampled(name):
    agent, _, acting = built(CONFIGS[name])
    if isinstance(acting, EpsilonGreedy):
        acting = acting._replace(epsilon=jnp.float32(1.0))  # uniform among the legal ones
    n = 10_000
    mask = np.array([True, False, True, False, True])
    obs = observations(jax.random.key(2), np.broadcast_to(mask, (n, NUM_ACTIONS)))
    actions = np.asarray(act(agent, acting, obs, jax.random.key(3)).action)
    counts = np.bincount(actions, minlength=NUM_ACTIONS)
    assert counts[~mask].sum() == 0, counts
    assert np.all(counts[mask] > 0), counts
    if name == "dqn":  # uniform over the 3 legal actions: each within 5 sigma of n / 3
        assert np.all(np.abs(counts[mask] - n / 3) < 5 * np.sqrt(n * (1 / 3) * (2 / 3)))


def numpy_masked(logits, mask):
    """log pi and entropy of the softmax over the legal actions only."""
    logits = np.where(mask, logits.astype(np.float64), -np.inf)
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    p = np.exp(log_p)
    entropy = -np.sum(np.where(mask, p * np.where(mask, log_p, 0.0), 0.0), axis=-1)
    return log_p, entropy


def test_masked_log_prob_and_entropy_equal_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(64, NUM_ACTIONS)).astype(np.float32) * 3
    mask = rng.random((64, NUM_ACTIONS)) < 0.5
    mask[np.arange(64), rng.integers(0, NUM_ACTIONS, 64)] = True
    action = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
    head = categorical_head()
    log_prob, entropy = head.log_prob_and_entropy(mask_logits(jnp.asarray(logits), mask), action)
    want_log_p, want_entropy = numpy_masked(logits, mask)
    np.testing.assert_allclose(log_prob, want_log_p[np.arange(64), action], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(entropy, want_entropy, rtol=1e-5, atol=1e-6)
    # no action legal (a terminal state may say so): all are, the entropy is log A
    _, entropy = head.log_prob_and_entropy(
        mask_logits(jnp.zeros((1, NUM_ACTIONS)), np.zeros((1, NUM_ACTIONS), bool)), np.zeros(1)
    )
    np.testing.assert_allclose(entropy, np.log(NUM_ACTIONS), rtol=1e-6)


@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_target_takes_the_max_over_legal_actions(double_q):
    config = DQNConfig(**SMALL, double_q=double_q, n_step=1)
    agent, params, _ = built(config)
    network = config.q_network(NUM_ACTIONS)
    target_params = jax.tree.map(lambda x: x * 1.5, params)  # a target network that differs
    rng = np.random.default_rng(1)
    n = 32
    masks = rng.random((n, NUM_ACTIONS)) < 0.4
    masks[:, 0] |= ~masks.any(-1)
    obs = observations(jax.random.key(4), np.ones((n, NUM_ACTIONS), bool))
    next_obs = observations(jax.random.key(5), masks)
    items = NStepItem(
        obs=obs,
        action=jnp.asarray(rng.integers(0, NUM_ACTIONS, n), jnp.int32),
        n_step_return=jnp.asarray(rng.normal(size=n), jnp.float32),
        discount=jnp.asarray(rng.choice([0.0, 0.99], n), jnp.float32),
        next_obs=next_obs,
    )
    state = agent.init_state(jax.random.key(0), params)._replace(target_params=target_params)
    batch = ReplayBatch(items=items, weights=jnp.ones(n), agent_state=state)
    _, out = agent.loss(params, batch, jax.random.key(0))

    def raw_q(p, o):  # the network's q-values with every action legal
        unmasked = {**o, "action_mask": np.ones((n, NUM_ACTIONS), bool)}
        return np.asarray(network.apply(p, unmasked), np.float64)

    q_next_target = np.where(masks, raw_q(target_params, next_obs), -np.inf)
    if double_q:
        best = np.argmax(np.where(masks, raw_q(params, next_obs), -np.inf), axis=-1)
    else:
        best = np.argmax(q_next_target, axis=-1)
    target = (
        np.asarray(items.n_step_return)
        + np.asarray(items.discount) * q_next_target[np.arange(n), best]
    )
    q_taken = raw_q(params, obs)[np.arange(n), np.asarray(items.action)]
    np.testing.assert_allclose(np.asarray(out.priority), q_taken - target, rtol=1e-4, atol=1e-4)


def test_dict_observation_equals_the_same_numbers_flattened_by_hand():
    network = ActorCritic(NUM_ACTIONS, hidden_sizes=(16, 16))
    obs = observations(jax.random.key(6), np.ones((8, NUM_ACTIONS), bool))
    unmasked = {key: value for key, value in obs.items() if key != "action_mask"}
    flat = jnp.concatenate([obs["board"].reshape(8, -1), obs["position"]], axis=-1)  # key order
    key = jax.random.key(7)
    params_dict = network.init(key, unmasked)
    params_flat = network.init(key, flat)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), params_dict, params_flat))
    for got, want in zip(
        jax.tree.leaves(network.apply(params_dict, obs)),
        jax.tree.leaves(network.apply(params_flat, flat)),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_leaf_torsos_give_an_entry_its_own_torso():
    config = PPOConfig(hidden_sizes=(16,), leaf_torsos=("board=minatar_cnn",), channels_first=False)
    env = MaskedChoice(NUM_ACTIONS)
    spec = {
        **env.observation_spec,
        "board": env.observation_spec["board"]._replace(shape=(5, 5, 2)),
    }
    agent, _ = agents.build(config, env.action_spec, 1, spec)
    params = agent.init(jax.random.key(0), zero_observation(spec, xp=jnp))
    names = set(params["params"]["actor_torso"])
    assert names == {"leaf_board", "MLP_0"}, names
    with pytest.raises(ConfigError, match=r"leaf_torsos entry 'board' is not allowed"):
        PPOConfig(leaf_torsos=("board",))
    bad = PPOConfig(leaf_torsos=("grid=mlp",))
    agent, _ = agents.build(bad, env.action_spec, 1, spec)
    with pytest.raises(ConfigError, match=r"leaf_torsos names grid.*dict of board, position"):
        agent.init(jax.random.key(0), zero_observation(spec, xp=jnp))


@pytest.fixture(scope="module")
def masked_choice_registered():
    envs.register("masked_choice", MaskedChoice)
    yield "masked_choice"
    envs.factory._REGISTRY.pop("masked_choice", None)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "impala", "dqn", "pqn", "qlambda"])
def test_training_on_anakin_takes_only_legal_actions(masked_choice_registered, name):
    """An illegal action ends the episode with -10; with the mask every episode is the full
    6 legal steps: a return of exactly 6."""
    config = CONFIGS[name]
    if name == "dqn":
        config = dataclasses.replace(config, learning_starts=64, buffer_size=256, batch_size=16)
    result = podracer.train(
        masked_choice_registered,
        config,
        podracer.AnakinConfig(num_envs=8, rollout_len=8),
        seed=0,
        total_timesteps=8 * 8 * 4,
    )
    assert result.summary["final_return"] == pytest.approx(6.0)


@pytest.mark.slow
def test_training_on_sebulba_takes_only_legal_actions(masked_choice_registered):
    result = podracer.train(
        masked_choice_registered,
        CONFIGS["ppo"],
        podracer.SebulbaConfig(envs_per_actor=4, rollout_len=8),
        seed=0,
        total_timesteps=4 * 8 * 4,
    )
    assert result.summary["final_return"] == pytest.approx(6.0)
