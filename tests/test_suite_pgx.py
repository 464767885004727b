"""pgx through podracer's adapter (podracer.envs.jax.pgx): 200 steps of 4 environments equal pgx's
own init / step driven here with the adapter's key convention and same-step auto-reset; the
adapter under jit(vmap) and inside an unchecked shard_map (as Anakin runs it: pgx's code fails
a checked one, for which the adapter has a one-line error); specs, refusals and errors.

MinAtar Breakout with pgx's sticky actions (their draws come from the step key, so the key
convention is compared too) and a 12-step limit: random legal actions lose the ball many times
(pgx's terminations) and reach the limit many times (the adapter's truncations)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.errors import ConfigValueError
from podracer.types import ACTION_MASK, DiscreteActionSpec, ObservationSpec

pgx = pytest.importorskip("pgx")

NAME = "minatar-breakout"
LIMIT = 12
N, STEPS = 4, 200


@pytest.fixture(scope="module")
def env():
    return envs.make(f"pgx:{NAME}", max_episode_steps=LIMIT)


def legal_action(key, mask):
    """A random legal action (any action where none is legal)."""
    mask = mask | ~mask.any()
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


def inputs():
    """Reset keys [N], step keys [STEPS, N] and action keys [STEPS, N]."""
    reset_key, step_key, action_key = jax.random.split(jax.random.key(11), 3)
    return (
        jax.random.split(reset_key, N),
        jax.random.split(step_key, (STEPS, N)),
        jax.random.split(action_key, (STEPS, N)),
    )


def adapter_rollout(env):
    """Resets ``[N]`` and scans ``STEPS`` steps of the adapter (not jitted: the caller wraps)."""

    def rollout(reset_keys, step_keys, action_keys):
        state, first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, ())

        def body(carry, x):
            state, obs = carry
            key, action_key = x
            action = jax.vmap(legal_action)(action_key, obs[ACTION_MASK])
            state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(key, state, action, ())
            return (state, ts.obs), (ts, action)

        _, traj = jax.lax.scan(body, (state, first.obs), (step_keys, action_keys))
        return first, traj

    return rollout


def library_rollout(game):
    """pgx's own init / step, auto-reset here where the game terminated or ran ``LIMIT`` steps
    (pgx's step gets the first half of the step's key, its init the second)."""

    def step(key, state, action_key):
        step_key, reset_key = jax.random.split(key)
        action = legal_action(action_key, state.legal_action_mask)
        stepped = game.step(state, action, step_key)
        terminated = stepped.terminated
        truncated = (stepped.truncated | (stepped._step_count >= LIMIT)) & ~terminated
        done = terminated | truncated
        fresh = game.init(reset_key)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)
        return state, {
            "observation": state.observation,
            "mask": state.legal_action_mask,
            "reward": stepped.rewards[0],
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": stepped.observation,
            "final_mask": stepped.legal_action_mask,
            "action": action,
        }

    def rollout(reset_keys, step_keys, action_keys):
        first = jax.vmap(game.init)(reset_keys)

        def body(state, x):
            return jax.vmap(step)(x[0], state, x[1])

        _, traj = jax.lax.scan(body, first, (step_keys, action_keys))
        return first, traj

    return rollout


@pytest.fixture(scope="module")
def rollouts(env):
    args = inputs()
    ours, theirs = adapter_rollout(env), library_rollout(env.unwrapped)
    # One program for both sides: one compilation.
    return args, *jax.jit(lambda *x: (ours(*x), theirs(*x)))(*args)


def test_parity_with_pgx_over_auto_resets(rollouts):
    _, (first, (traj, actions)), (lib_first, lib) = rollouts
    for obs in (first.obs, first.final_obs):
        np.testing.assert_array_equal(obs["observation"], lib_first.observation)
        np.testing.assert_array_equal(obs[ACTION_MASK], lib_first.legal_action_mask)
    assert not first.terminated.any() and not first.truncated.any()
    assert first.reward.dtype == jnp.float32 and not first.reward.any()

    np.testing.assert_array_equal(actions, lib["action"])
    np.testing.assert_array_equal(traj.obs["observation"], lib["observation"])
    np.testing.assert_array_equal(traj.obs[ACTION_MASK], lib["mask"])
    np.testing.assert_array_equal(traj.final_obs["observation"], lib["final_observation"])
    np.testing.assert_array_equal(traj.final_obs[ACTION_MASK], lib["final_mask"])
    np.testing.assert_allclose(traj.reward, lib["reward"], rtol=1e-6)
    np.testing.assert_array_equal(traj.terminated, lib["terminated"])
    np.testing.assert_array_equal(traj.truncated, lib["truncated"])
    assert traj.reward.dtype == jnp.float32
    assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_

    # Several episodes ended both ways, so the comparison went across auto-resets.
    assert int(traj.terminated.sum()) >= 5 and int(traj.truncated.sum()) >= 5
    assert not (traj.terminated & traj.truncated).any()
    assert traj.reward.any()
    done = np.asarray(traj.terminated | traj.truncated)
    truncated = np.asarray(traj.truncated)
    # Episodes end by LIMIT steps, truncations exactly there: the count restarts at each reset.
    for env_index in range(N):
        ends = np.flatnonzero(done[:, env_index])
        lengths = np.diff(np.concatenate([[-1], ends]))
        assert lengths.max() <= LIMIT
        assert (lengths[truncated[ends, env_index]] == LIMIT).all()
    # final_obs is obs where the episode goes on; at an end it is the ended episode's last one.
    same = np.all(
        np.reshape(traj.obs["observation"] == traj.final_obs["observation"], (*done.shape, -1)),
        axis=-1,
    )
    assert same[~done].all()
    assert not same[done].all()


def test_inside_shard_map(env, rollouts):
    """Unchecked, as Anakin runs it (the environment's check_vma = False), the rollout equals
    jit(vmap)'s; pgx's MinAtar code (a lax.cond with a branch of constants) fails a checked
    shard_map, which the adapter names in one line."""
    from podracer.envs import EpisodeStatistics
    from podracer.loops.anakin import env_checks_vma

    assert env.check_vma is False and not env_checks_vma(EpisodeStatistics(env))
    _, expected, _ = rollouts
    mesh = jax.make_mesh((1,), ("data",))
    batch, time_batch = P("data"), P(None, "data")
    specs = (batch, time_batch, time_batch)
    placed = [
        jax.device_put(arg, NamedSharding(mesh, spec))
        for arg, spec in zip(inputs(), specs, strict=True)
    ]

    def sharded(check_vma):
        return jax.jit(
            jax.shard_map(
                adapter_rollout(env),
                mesh=mesh,
                in_specs=specs,
                out_specs=(batch, time_batch),
                check_vma=check_vma,
            )
        )

    with pytest.raises(ConfigValueError, match=r"does not trace inside a jax\.shard_map") as error:
        jax.eval_shape(sharded(True), *placed)
    assert "\n" not in str(error.value) and f"pgx:{NAME}" in str(error.value)
    assert "check_vma=False" in str(error.value)
    ours = sharded(False)(*placed)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(a, b)


def test_specs(env, rollouts):
    _, (first, _), _ = rollouts
    assert env.id == f"pgx:{NAME}"
    assert repr(env) == f"PgxEnvironment('pgx:{NAME}', max_episode_steps={LIMIT})"
    assert env.default_params == ()
    assert env.action_spec == DiscreteActionSpec(3)  # the minimal action set
    assert env.observation_spec == {
        "observation": ObservationSpec((10, 10, 4), jnp.dtype(bool)),
        ACTION_MASK: ObservationSpec((3,), jnp.dtype(bool)),
    }
    for name, leaf in env.observation_spec.items():
        assert first.obs[name].shape == (N, *leaf.shape) and first.obs[name].dtype == leaf.dtype
    game = envs.make("pgx:2048")
    assert repr(game) == "PgxEnvironment('pgx:2048')" and game.max_episode_steps is None
    assert game.action_spec == DiscreteActionSpec(4)
    _, ts = jax.eval_shape(game.reset, jax.random.key(0), ())
    assert game.observation_spec == {
        "observation": ObservationSpec((4, 4, 31), jnp.dtype(bool)),
        ACTION_MASK: ObservationSpec((4,), jnp.dtype(bool)),
    }
    assert {k: ObservationSpec(v.shape, v.dtype) for k, v in ts.obs.items()} == (
        game.observation_spec
    )
    # The game's own options go to its class.
    full = envs.make("pgx:minatar-breakout", use_minimal_action_set=False, sticky_action_prob=0)
    assert full.action_spec == DiscreteActionSpec(6) and full.unwrapped.sticky_action_prob == 0


def test_names_refusals_and_errors(monkeypatch):
    from podracer.envs.jax import pgx as pgx_envs

    assert set(pgx_envs.KNOWN) <= set(pgx_envs.names())
    with pytest.raises(ConfigValueError, match="Did you mean 'pgx:minatar-breakout'"):
        envs.make("pgx:minatar-breakouts")
    for name, players in (("tic_tac_toe", 2), ("sparrow_mahjong", 3)):
        with pytest.raises(ConfigValueError, match=f"{players} players.*self-play") as error:
            envs.make(f"pgx:{name}")
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigValueError, match="unexpected keyword argument 'time_limit'"):
        envs.make("pgx:minatar-breakout", time_limit=5)
    with pytest.raises(ConfigValueError, match="max_episode_steps=0 must be >= 1"):
        envs.make("pgx:2048", max_episode_steps=0)
    monkeypatch.setitem(sys.modules, "pgx", None)
    with pytest.raises(ConfigValueError, match=r"pip install 'podracer\[pgx\]'"):
        envs.make("pgx:2048")
