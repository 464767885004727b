"""MuZero (podracer/agents/muzero.py): the search on a hand-built model (one device and under a
checked shard_map over two), the window targets against NumPy, the two-hot and h-transform
against rlax, the gradient scaling of the dynamics, reanalyse's policy targets and the value
targets' bootstrap, bad config values, exact resume, a Sebulba run on gymnasium's CartPole and
learning catch."""

import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("mctx")

import rlax

from podracer import runs
from podracer.agents import muzero, muzero_model
from podracer.agents.muzero import MuZeroConfig
from podracer.core.learner.buffers import window_buffer
from podracer.errors import ConfigError
from podracer.loops.anakin import AnakinConfig
from podracer.runs.checkpoint import Checkpointer, to_raw
from podracer.types import ACTION_MASK

A = 4
GOOD = 2  # the action with the higher value


def toy_model(config: MuZeroConfig) -> muzero_model.Model:
    """A deterministic model of one decision: at the root (the observation plus 1, positive)
    every action but GOOD earns 0 and GOOD earns ``params``; every action leads to the
    absorbing state 0, where nothing is earned (the prior is uniform, every value 0)."""

    def two_hot_logits(x, support):  # exactly x after the softmax (exp(-1e4) is 0)
        probs = muzero_model.scalar_to_logits_target(x, support)
        return jnp.where(probs > 0, jnp.log(jnp.maximum(probs, 1e-30)), -1e4)

    def represent(params, obs):
        return obs + 1.0

    def dynamics(params, state, action):
        reward = jnp.where((action == GOOD) & (state[:, 0] > 0), params, 0.0)
        return jnp.zeros_like(state), two_hot_logits(reward, config.reward_support_size)

    def predict(params, state):
        b = state.shape[0]
        return jnp.zeros((b, A)), two_hot_logits(jnp.zeros((b,)), config.support_size)

    return muzero_model.Model(represent, dynamics, predict)


SEARCHES = {
    "gumbel": MuZeroConfig(num_simulations=16, gumbel_scale=1.0),
    "puct": MuZeroConfig(search="puct", num_simulations=32, temperature=0.25),
}


MASK = np.array(
    [[True] * A] * 3 + [[True, False, True, True]] * 3 + [[True, True, False, False]] * 2
)
"""The observations' legal actions: GOOD is legal in the first 6 rows and illegal in the last
2."""


@pytest.fixture(scope="module", params=list(SEARCHES))
def searched(request, two_devices):
    """The search of the toy model on 8 observations with legal-action masks: alone (jitted,
    one device, each half with its key) and under jax.shard_map over two devices with
    check_vma=True (the same keys for the same halves)."""
    config = SEARCHES[request.param]
    model = toy_model(config)._replace(represent=lambda p, obs: obs["position"] + 1.0)
    search = muzero_model.make_search(config, model, A)
    obs = {"position": jnp.tile(jnp.arange(8.0)[:, None], (1, 3)), ACTION_MASK: jnp.asarray(MASK)}
    keys = jax.random.split(jax.random.key(0), 2)
    mesh = jax.make_mesh((2,), ("data",), devices=two_devices)
    sharded = jax.jit(
        jax.shard_map(
            lambda p, o, k: search(p, o, k[0]),
            mesh=mesh,
            in_specs=(jax.P(), jax.P("data"), jax.P("data")),
            out_specs=jax.P("data"),
            check_vma=True,
        )
    )
    place = jax.NamedSharding(mesh, jax.P("data"))
    split = sharded(1.0, jax.device_put(obs, place), jax.device_put(keys, place))
    halves = [jax.tree.map(lambda x, i=i: x[4 * i : 4 * i + 4], obs) for i in range(2)]
    alone = [jax.jit(search)(1.0, halves[i], keys[i]) for i in range(2)]
    alone = jax.tree.map(lambda *x: jnp.concatenate(x), *alone)
    return alone, split


@pytest.mark.slow
def test_the_search_picks_the_better_action_and_its_weights_favour_it(searched):
    alone, _ = searched
    action, weights = np.asarray(alone.action), np.asarray(alone.weights)
    good = MASK[:, GOOD]
    np.testing.assert_array_equal(action[good], GOOD)
    assert weights.shape == (8, A)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    prior = 1.0 / MASK.sum(-1)  # uniform over the legal actions
    assert np.all(weights[good, GOOD] > prior[good] + 0.1)
    assert np.all(weights[good, GOOD] == weights[good].max(-1))
    assert np.all(np.asarray(alone.value)[good] > 0.0)  # the root's value learnt the reward
    np.testing.assert_allclose(np.asarray(alone.value)[~good], 0.0, atol=1e-5)


def test_the_search_never_chooses_an_illegal_action(searched):
    alone, _ = searched
    assert np.all(MASK[np.arange(8), np.asarray(alone.action)])
    np.testing.assert_array_equal(np.asarray(alone.weights)[~MASK], 0.0)


def test_the_search_under_a_checked_shard_map_equals_the_search_alone(searched):
    alone, split = searched
    np.testing.assert_array_equal(np.asarray(split.action), np.asarray(alone.action))
    np.testing.assert_allclose(np.asarray(split.weights), np.asarray(alone.weights), atol=1e-6)
    np.testing.assert_allclose(np.asarray(split.value), np.asarray(alone.value), atol=1e-6)


# --- targets --------------------------------------------------------------------------------


def numpy_targets(reward, terminated, truncated, gamma, n, k):
    """The window targets by the rules of docs/muzero.md, one window and position at a time."""
    b, w = reward.shape
    out = {
        name: np.zeros((b, k + 1))
        for name in ("value", "value_mask", "reward", "reward_mask", "policy_mask", "discount")
    }
    out["last"] = np.zeros((b, k + 1), np.int64)
    for i in range(b):
        ends = [j for j in range(w) if terminated[i, j] or truncated[i, j]]
        first = ends[0] if ends else w
        by_termination = bool(ends) and bool(terminated[i, first])
        for pos in range(k + 1):
            ended = first < pos  # an end at a step before this position
            ret, scale, last, cut = 0.0, 1.0, pos, False
            for step in range(pos, min(pos + n, w)):
                ret += scale * reward[i, step]
                scale *= gamma
                last = step
                if terminated[i, step]:
                    scale, cut = 0.0, True
                if terminated[i, step] or truncated[i, step]:
                    break
            del cut
            out["last"][i, pos] = last
            if not ended:
                out["value"][i, pos], out["discount"][i, pos] = ret, scale
                out["value_mask"][i, pos] = out["policy_mask"][i, pos] = 1.0
            elif by_termination:
                out["value_mask"][i, pos] = 1.0  # value 0, discount 0
            if pos > 0:
                if first >= pos - 1:  # step pos - 1 is in the episode (or ends it)
                    out["reward"][i, pos] = reward[i, pos - 1]
                    out["reward_mask"][i, pos] = 1.0
                elif by_termination:
                    out["reward_mask"][i, pos] = 1.0  # reward 0
    return out


def test_window_targets_equal_numpy_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    b, k, n, gamma = 64, 5, 3, 0.9
    w = k + n
    reward = rng.normal(size=(b, w)).astype(np.float32)
    ends = rng.random((b, w))
    terminated = ends < 0.08
    truncated = (ends >= 0.08) & (ends < 0.16)
    got = muzero.window_targets(
        jnp.asarray(reward), jnp.asarray(terminated), jnp.asarray(truncated), gamma, n, k
    )
    want = numpy_targets(reward, terminated, truncated, gamma, n, k)
    assert terminated.any(axis=1).sum() > 10 and truncated.any(axis=1).sum() > 10
    for name in ("value_mask", "reward_mask", "policy_mask"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), want[name])
    for name, mask in (
        ("value", "value_mask"),
        ("reward", "reward_mask"),
        ("discount", "value_mask"),
    ):
        got_masked = np.asarray(getattr(got, name)) * want[mask]
        np.testing.assert_allclose(got_masked, want[name], atol=1e-5)
    live = want["discount"] > 0
    np.testing.assert_array_equal(np.asarray(got.bootstrap_index)[live], want["last"][live])


def test_windows_never_cross_environments():
    """Windows of the agent's replay are consecutive steps of one environment."""
    config = MuZeroConfig(buffer_size=64, batch_size=32, learning_starts=8)
    envs, steps, window = 4, 12, config.window
    buffer = window_buffer(config, window, 1, envs, 32)
    item = {"env": jnp.zeros((), jnp.int32), "t": jnp.zeros((), jnp.int32)}
    state = buffer.init(item)
    t = jnp.arange(steps)[:, None] * jnp.ones((1, envs), jnp.int32)
    env = jnp.ones((steps, 1), jnp.int32) * jnp.arange(envs)[None]
    state = buffer.add(state, {"env": env, "t": t})
    sample = buffer.sample(state, jax.random.key(0)).experience
    env_ids, times = np.asarray(sample["env"]), np.asarray(sample["t"])
    assert env_ids.shape == (32, window)
    assert np.all(env_ids == env_ids[:, :1])
    assert np.all(np.diff(times, axis=1) == 1)


def test_two_hot_and_h_transform_round_trip_and_match_rlax():
    s = 20
    x = jnp.array([-300.0, -7.5, -1.0, 0.0, 0.3, 1.0, 42.0, 350.0])
    got = muzero_model.scalar_to_logits_target(x, s)
    pair = rlax.muzero_pair(-s, s, 2 * s + 1, rlax.SIGNED_HYPERBOLIC_PAIR)
    np.testing.assert_allclose(np.asarray(got), np.asarray(pair.apply(x)), atol=1e-6)
    back = muzero_model.logits_to_scalar(jnp.log(got + 1e-30), s)
    np.testing.assert_allclose(
        np.asarray(back), np.asarray(pair.apply_inv(got)), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(np.asarray(back), np.asarray(x), rtol=1e-3, atol=1e-3)


def test_the_gradient_into_the_dynamics_is_scaled_at_each_step():
    """The losses at position k reach the root state through k dynamics steps: their gradient
    with respect to it with the scale 0.5 is 0.5 ** k times the unscaled one."""
    config = MuZeroConfig(hidden_sizes=(8,), model_hidden_sizes=(8,), embedding_size=6)
    network = muzero_model.MuZeroNetwork(config, A)
    model = muzero_model.model_of(network)._replace(represent=lambda p, state: state)
    root = jax.random.uniform(jax.random.key(0), (5, 6))
    actions = jnp.array([[0, 1, 2], [3, 2, 1], [1, 1, 1], [0, 0, 3], [2, 3, 0]])
    shapes = jax.eval_shape(network.init, jax.random.key(1), root[:1])
    rng = np.random.default_rng(1)  # random weights everywhere (the heads start at zero)
    params = jax.tree.map(lambda x: jnp.asarray(0.5 * rng.normal(size=x.shape), x.dtype), shapes)

    @jax.jit
    def root_grads(scale):
        def losses(state):  # [K + 1]: each position's losses
            policy, value, reward = muzero.unroll(model, params, state, actions, scale)
            per = jnp.sin(value).sum(-1) + jnp.cos(policy).sum(-1) + jnp.tanh(reward).sum(-1)
            return per.sum(0)

        return jax.jacrev(losses)(root)  # [K + 1, 5, 6]

    full, half = np.asarray(root_grads(1.0)), np.asarray(root_grads(0.5))
    for k in range(4):
        assert np.abs(full[k]).max() > 1e-3
        np.testing.assert_allclose(half[k], 0.5**k * full[k], rtol=1e-4, atol=1e-7)


# --- reanalyse ------------------------------------------------------------------------------

REANALYSE = dict(
    hidden_sizes=(16,),
    model_hidden_sizes=(16,),
    embedding_size=8,
    num_unroll_steps=1,
    n_step=2,
    num_simulations=4,
    gamma=0.9,
    batch_size=8,
)


def random_params(config: MuZeroConfig, obs, seed: int):
    """Random weights everywhere (the heads start at zero, whose searches are all uniform)."""
    network = muzero_model.MuZeroNetwork(config, A)
    shapes = jax.eval_shape(network.init, jax.random.key(0), obs[:1])
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(0.5 * rng.normal(size=x.shape), x.dtype), shapes)


@pytest.fixture(scope="module")
def reanalysed():
    """A batch of 8 random windows (terminations included), online and target params that
    differ, the loss's metrics (jitted, one key) without reanalyse and with a fraction of 0.5,
    and the search (the same key) of the target params and of the online params on the
    stored observations at positions 0..K."""
    from podracer.agents.dqn import DQNState
    from podracer.core.learner.replay import ReplayBatch

    config = MuZeroConfig(**REANALYSE)
    b, w, k = config.batch_size, config.window, config.num_unroll_steps
    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.normal(size=(b, w, 5)), jnp.float32)
    weights = rng.random((b, w, A)) + 0.05
    steps = muzero.Step(
        obs=obs,
        action=jnp.asarray(rng.integers(0, A, (b, w)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(b, w)), jnp.float32),
        terminated=jnp.asarray(rng.random((b, w)) < 0.15),
        truncated=jnp.zeros((b, w), bool),
        bootstrap_obs=jnp.asarray(rng.normal(size=(b, w, 5)), jnp.float32),
        search_policy=jnp.asarray(weights / weights.sum(-1, keepdims=True), jnp.float32),
        search_value=jnp.asarray(rng.normal(size=(b, w)), jnp.float32),
    )
    params, target = (random_params(config, obs[:, 0], seed) for seed in (1, 2))
    key = jax.random.key(7)

    losses = {}
    for fraction in (0.0, 0.5):
        agent = muzero.make_agent(dataclasses.replace(config, reanalyse_fraction=fraction), A)

        def metrics(steps, agent=agent):
            batch = ReplayBatch(steps, jnp.ones((b,)), DQNState(target, jnp.zeros((), jnp.int32)))
            return agent.loss(params, batch, key)[1].metrics

        losses[fraction] = jax.jit(metrics)
    search = jax.jit(
        muzero_model.make_search(
            config, muzero_model.model_of(muzero_model.MuZeroNetwork(config, A)), A
        )
    )

    def searched(p):  # the search of p on the stored observations at positions 0..K: [b, K+1, A]
        flat = obs[:, : k + 1].reshape(b * (k + 1), -1)
        return search(p, flat, key).weights.reshape(b, k + 1, A)

    return steps, losses, searched(target), searched(params)


def with_policy(steps, policy, rows):
    """``steps`` whose stored policies at positions 0..K of the first ``rows`` windows are
    ``policy``'s."""
    k1 = policy.shape[1]
    new = steps.search_policy.at[:rows, :k1].set(policy[:rows])
    return steps._replace(search_policy=new)


def close(x, y):
    return all(np.allclose(x[name], y[name], rtol=1e-5, atol=1e-6) for name in x)


@pytest.mark.slow
def test_reanalyse_targets_are_the_target_params_search_on_the_stored_observations(reanalysed):
    """With a fraction of 0.5 the loss (each of its terms) equals the loss without reanalyse on
    windows whose first half stores a fresh search with the target params (the same key) and
    whose second half keeps its policies: the reanalysed windows' policy targets are that
    search, the others' the stored ones. The value targets do not change."""
    steps, losses, fresh, online = reanalysed
    half = steps.reward.shape[0] // 2
    assert not np.allclose(fresh, steps.search_policy[:, : fresh.shape[1]], atol=1e-2)
    assert not np.allclose(fresh, online, atol=1e-2)  # the target params' search, not the online
    stored = losses[0.0](steps)
    got = losses[0.5](steps)
    assert close(got, losses[0.0](with_policy(steps, fresh, half))), got
    assert not close(got, stored)
    assert not close(got, losses[0.0](with_policy(steps, online, half)))
    assert not close(got, losses[0.0](with_policy(steps, fresh, 2 * half)))
    np.testing.assert_allclose(got["value_target"], stored["value_target"], rtol=1e-6)
    np.testing.assert_allclose(got["value_loss"], stored["value_loss"], rtol=1e-5)


def test_value_targets_bootstrap_from_the_target_networks_value(reanalysed):
    """z_0 = the n-step return (NumPy) + its discount times the target params' value of the
    stored bootstrap observation, with or without reanalyse."""
    steps, losses, _, _ = reanalysed
    config = MuZeroConfig(**REANALYSE)
    k, n = config.num_unroll_steps, config.n_step
    want = numpy_targets(
        *(np.asarray(x) for x in (steps.reward, steps.terminated, steps.truncated)),
        config.gamma,
        n,
        k,
    )
    b = steps.reward.shape[0]
    model = muzero_model.model_of(muzero_model.MuZeroNetwork(config, A))
    target = random_params(config, steps.obs[:, 0], 2)
    boot = steps.bootstrap_obs[np.arange(b), want["last"][:, 0]]
    logits = model.predict(target, model.represent(target, boot))[1]
    value = muzero_model.logits_to_scalar(logits, config.support_size)
    z0 = want["value"][:, 0] + want["discount"][:, 0] * np.asarray(value)
    assert np.any(want["discount"][:, 0] == 0) and np.any(want["discount"][:, 0] > 0)
    for fraction in (0.0, 0.5):
        got = losses[fraction](steps)["value_target"]
        np.testing.assert_allclose(got, z0.mean(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "field, value",
    [
        ("search", "alphazero"),
        ("num_simulations", 0),
        ("num_unroll_steps", 0),
        ("n_step", -1),
        ("tau", 0.0),
        ("reanalyse_fraction", 1.5),
        ("dynamics_gradient_scale", 2.0),
        ("torso", "transformer"),
        ("model_hidden_sizes", ()),
        ("max_depth", -1),
    ],
)
def test_bad_config_values_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"{field}={value!r}"):
        MuZeroConfig(**{field: value})


# --- runs -----------------------------------------------------------------------------------

SMALL = dict(
    num_unroll_steps=2,
    n_step=2,
    hidden_sizes=(32,),
    model_hidden_sizes=(32,),
    embedding_size=32,
    num_simulations=4,
    buffer_size=512,
    batch_size=16,
    learning_starts=64,
    replay_ratio=0.0625,
)


@pytest.mark.slow
def test_anakin_resume_is_bitwise_exact_buffer_included(tmp_path):
    one = jax.devices()[:1]
    spec = runs.RunSpec(
        arch="anakin",
        agent="muzero",
        env="catch",
        seed=3,
        total_timesteps=8 * 4 * 16,
        agent_config=MuZeroConfig(**SMALL, prioritised=True),
        arch_config=AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=2),
        options=runs.RunOptions(checkpoint_interval=4, eval_interval=0, tensorboard=False),
    )
    straight = str(tmp_path / "straight")
    summary = runs.train(spec, straight, console=False, devices=one)
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "8"))
    again = runs.train(spec, resumed, resume=True, console=False, devices=one)
    assert again["start_update"] == 4
    assert again["params_checksum"] == summary["params_checksum"]
    template = runs.build_system(spec, one).init(spec.seed)
    states = []
    for run_dir in (straight, resumed):
        with Checkpointer(run_dir) as checkpointer:
            states.append(checkpointer.restore(template)[0])
    priorities = np.asarray(states[0].learner.replay.priorities)
    assert len(set(priorities.ravel().tolist())) > 2  # the priorities were set and saved
    for x, y in zip(*(jax.tree.leaves(to_raw(s)) for s in states), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_sebulba_muzero_runs_on_gymnasium_cartpole(tmp_path):
    """Sebulba MuZero on gymnasium's CartPole (one device for actor and learner, tiny sizes):
    the run ends, its actors searched, its learner updated on windows (a finite loss), and its
    episodes returned. About 30 s on one CPU core, most of it compiling the actor's search and
    the learner. (Atari, envpool:Breakout-v5 with muzero_resnet: docs/muzero.md, about a minute.)"""
    pytest.importorskip("gymnasium")
    from podracer.loops.sebulba import SebulbaConfig

    small = dict(num_unroll_steps=1, num_simulations=2, buffer_size=256, learning_starts=32)
    config = MuZeroConfig(**{**SMALL, **small, "batch_size": 8})
    spec = runs.RunSpec(
        arch="sebulba",
        agent="muzero",
        env="gymnasium:CartPole-v1",
        seed=0,
        total_timesteps=2 * 8 * 12,
        agent_config=config,
        arch_config=SebulbaConfig(
            envs_per_actor=2,
            rollout_len=8,
            env_threads=1,
            actor_device_ids=(0,),
            learner_device_ids=(0,),
        ),
        options=runs.RunOptions(eval_interval=0, tensorboard=False),
    )
    run_dir = tmp_path / "run"
    summary = runs.train(spec, str(run_dir), console=False, devices=jax.devices()[:1])
    assert summary["total_steps"] == 2 * 8 * 12 and summary["sps"] > 0
    assert summary["actor_time_s"]["inference"] > 0 and summary["learner_time_s"]["update"] > 0
    assert summary["final_return"] is not None and summary["final_return"] > 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(np.isfinite(losses)) and losses[-1] > 0


LEARN = dict(num_simulations=4, lr=3e-3, batch_size=64)
LEARN_STEPS = 40_000


@pytest.mark.slow
def test_anakin_muzero_learns_catch(tmp_path):
    """Catch after LEARN_STEPS steps, the final params searching greedily on 32 episodes (the
    acting return, with Gumbel noise, lags it)."""
    # LEARN at 4e4 steps, seeds 0-2: greedy 1.0, 1.0, 1.0 (acting 1.0, 0.82, 0.99; about 65 s
    # each on one CPU core, 25 s of it compiling); at 3.2e4: 1.0, 0.81, 1.0. The defaults (16
    # simulations, lr 1e-3, batches of 128) reach 0.8 at 3.1e4 and 1.0 at 5e4 (acting,
    # docs/muzero.md). Random play: about -0.6.
    updates = LEARN_STEPS // 128
    spec = runs.RunSpec(
        arch="anakin",
        agent="muzero",
        env="catch",
        seed=0,
        total_timesteps=LEARN_STEPS,
        agent_config=MuZeroConfig(**LEARN),
        arch_config=AnakinConfig(num_envs=16, rollout_len=8),
        options=runs.RunOptions(eval_interval=updates, eval_episodes=32, tensorboard=False),
    )
    run_dir = tmp_path / "run"
    runs.train(spec, str(run_dir), console=False, devices=jax.devices()[:1])
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r.get("kind") == "eval"]
    assert evals and evals[-1]["updates"] == updates
    assert evals[-1]["eval_return"] >= 0.8, evals[-1]
