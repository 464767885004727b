"""Jumanji through podracer's adapter (podracer.envs.jax.jumanji): 200 steps of 4 environments equal
Jumanji's own reset / step driven here with the adapter's key convention and same-step
auto-reset; the adapter under jit(vmap) and inside shard_map; specs, refusals and errors.

Snake on a 5x5 grid with Jumanji's 10-step time limit, which Jumanji ends with a termination
(discount 0), wrapped here to end some episodes earlier with ``jumanji.types.truncation``
(discount 1, at a limit of 6 to 13 steps drawn at each reset), so that both flags occur many
times. Actions are random among the legal ones of each observation's action_mask, drawn
inside the rollout from the observation each side sees. Inside shard_map the rollout runs
unchecked (check_vma=False), as Anakin runs it; Maze (nested observations) does not trace in a
checked one: the test checks the adapter's error."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.errors import ConfigValueError
from podracer.types import ACTION_MASK, DiscreteActionSpec, ObservationSpec, is_spec_leaf

jumanji = pytest.importorskip("jumanji")

from jumanji.environments.routing.maze.generator import RandomGenerator  # noqa: E402
from jumanji.wrappers import Wrapper  # noqa: E402

from podracer.envs.jax.jumanji import JumanjiEnvironment, to_dict  # noqa: E402

N, STEPS = 4, 200
LAST = 2  # jumanji.types.StepType.LAST


class TruncateAt(Wrapper):
    """Ends an episode with a truncation (``StepType.LAST``, discount 1) after a number of
    steps drawn at its reset from ``{low, ..., high - 1}``, unless Jumanji ended it first."""

    def __init__(self, env, low, high):
        super().__init__(env)
        self.low, self.high = low, high

    def reset(self, key):
        state, timestep = self._env.reset(key)
        limit = jax.random.randint(jax.random.fold_in(key, 1), (), self.low, self.high)
        return (state, jnp.zeros((), jnp.int32), limit), timestep

    def step(self, state, action):
        inner, count, limit = state
        inner, timestep = self._env.step(inner, action)
        count = count + 1
        cut = (count >= limit) & ~timestep.last()
        timestep = timestep.replace(
            step_type=jnp.where(cut, jnp.int8(LAST), timestep.step_type),
            discount=jnp.where(cut, jnp.ones_like(timestep.discount), timestep.discount),
        )
        return (inner, count, limit), timestep


TIME_LIMIT = 10


def snake():
    lib = jumanji.make("Snake-v1", num_rows=5, num_cols=5, time_limit=TIME_LIMIT)
    return JumanjiEnvironment("jumanji:Snake-v1", TruncateAt(lib, 6, 14))


def maze():
    return envs.make("jumanji:Maze-v0", generator=RandomGenerator(5, 5))


def legal_action(key, mask):
    """A random legal action (any action where none is legal)."""
    mask = mask | ~mask.any()
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


def inputs():
    """Reset keys [N], step keys [STEPS, N] and action keys [STEPS, N]."""
    reset_key, step_key, action_key = jax.random.split(jax.random.key(5), 3)
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


def library_rollout(lib):
    """Jumanji's own reset / step, auto-reset here at a ``LAST`` timestep (the library's reset
    gets the second half of the step's key)."""

    def step(key, state, obs, action_key):
        _, reset_key = jax.random.split(key)
        action = legal_action(action_key, obs.action_mask)
        stepped, timestep = lib.step(state, action)
        last = timestep.step_type == LAST
        fresh, first = lib.reset(reset_key)
        pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(last, x, y), a, b)  # noqa: E731
        state, next_obs = pick((fresh, first.observation), (stepped, timestep.observation))
        return (state, next_obs), {
            "obs": next_obs,
            "reward": timestep.reward,
            "terminated": last & (timestep.discount == 0),
            "truncated": last & (timestep.discount == 1),
            "final_obs": timestep.observation,
            "action": action,
        }

    def rollout(reset_keys, step_keys, action_keys):
        state, first = jax.vmap(lib.reset)(reset_keys)

        def body(carry, x):
            return jax.vmap(step)(x[0], *carry, x[1])

        _, traj = jax.lax.scan(body, (state, first.observation), (step_keys, action_keys))
        return first.observation, traj

    return rollout


@pytest.fixture(scope="module")
def env():
    return snake()


@pytest.fixture(scope="module")
def rollouts(env):
    args = inputs()
    ours, theirs = adapter_rollout(env), library_rollout(env.unwrapped)
    # One program for both sides: one compilation.
    return args, *jax.jit(lambda *x: (ours(*x), theirs(*x)))(*args)


def assert_tree_equal(ours, theirs):
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_parity_with_jumanji_over_auto_resets(rollouts):
    _, (first, (traj, actions)), (lib_first, lib) = rollouts
    assert_tree_equal(first.obs, to_dict(lib_first))
    assert_tree_equal(first.final_obs, to_dict(lib_first))
    assert not first.terminated.any() and not first.truncated.any()
    assert first.reward.dtype == jnp.float32 and not first.reward.any()

    np.testing.assert_array_equal(actions, lib["action"])
    assert_tree_equal(traj.obs, to_dict(lib["obs"]))
    assert_tree_equal(traj.final_obs, to_dict(lib["final_obs"]))
    np.testing.assert_allclose(traj.reward, lib["reward"], rtol=1e-6)
    np.testing.assert_array_equal(traj.terminated, lib["terminated"])
    np.testing.assert_array_equal(traj.truncated, lib["truncated"])
    assert traj.reward.dtype == jnp.float32
    assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_

    # Several episodes ended both ways, so the comparison went across auto-resets.
    assert int(traj.terminated.sum()) >= 5 and int(traj.truncated.sum()) >= 5
    assert not (traj.terminated & traj.truncated).any()
    assert traj.reward.any()
    # Every episode ended at its 10th step (Snake's time limit: a Jumanji termination) or
    # before it (the wrapper's truncation): the step count restarts at each auto-reset.
    done = np.asarray(traj.terminated | traj.truncated)
    terminated, truncated = np.asarray(traj.terminated), np.asarray(traj.truncated)
    for env_index in range(N):
        ends = np.flatnonzero(done[:, env_index])
        lengths = np.diff(np.concatenate([[-1], ends]))
        assert (lengths[terminated[ends, env_index]] == TIME_LIMIT).all()
        assert (lengths[truncated[ends, env_index]] < TIME_LIMIT).all()
    # final_obs is obs where the episode goes on; at an end it is the ended episode's last one.
    same = np.ones_like(done)
    for a, b in zip(jax.tree.leaves(traj.obs), jax.tree.leaves(traj.final_obs), strict=True):
        same &= np.all(np.reshape(a == b, (*done.shape, -1)), axis=-1)
    assert same[~done].all()
    assert not same[done].any()  # the step count differs


def sharded_rollout(env, check_vma):
    mesh = jax.make_mesh((1,), ("data",))
    batch, time_batch = P("data"), P(None, "data")
    specs = (batch, time_batch, time_batch)
    sharded = jax.jit(
        jax.shard_map(
            adapter_rollout(env),
            mesh=mesh,
            in_specs=specs,
            out_specs=(batch, time_batch),
            check_vma=check_vma,
        )
    )
    placed = [
        jax.device_put(arg, NamedSharding(mesh, spec))
        for arg, spec in zip(inputs(), specs, strict=True)
    ]
    return sharded, placed


@pytest.mark.slow
def test_runs_inside_shard_map_as_under_jit(env, rollouts):
    """Unchecked, as Anakin runs it (the environment's check_vma = False); Snake traces in a
    checked shard_map too."""
    from podracer.envs import EpisodeStatistics
    from podracer.loops.anakin import env_checks_vma

    assert env.check_vma is False and not env_checks_vma(EpisodeStatistics(env))
    _, ours, _ = rollouts
    sharded, placed = sharded_rollout(env, check_vma=False)
    assert_tree_equal(sharded(*placed), ours)
    checked, placed = sharded_rollout(env, check_vma=True)
    jax.eval_shape(checked, *placed)


def test_a_library_that_fails_a_checked_shard_map_is_reported_in_one_line():
    """Maze's generator (a fori_loop with a constant initial carry) fails a checked shard_map,
    which the adapter names in one line; unchecked, it traces."""
    env = maze()
    sharded, placed = sharded_rollout(env, check_vma=True)
    with pytest.raises(ConfigValueError, match=r"does not trace inside a jax\.shard_map") as error:
        jax.eval_shape(sharded, *placed)
    assert "\n" not in str(error.value) and "jumanji:Maze-v0" in str(error.value)
    assert "check_vma=False" in str(error.value)
    sharded, placed = sharded_rollout(env, check_vma=False)
    jax.eval_shape(sharded, *placed)


def test_specs(env, rollouts):
    _, (first, _), _ = rollouts
    assert env.id == "jumanji:Snake-v1"
    assert repr(env) == "JumanjiEnvironment('jumanji:Snake-v1')"
    assert env.default_params == ()
    assert env.action_spec == DiscreteActionSpec(4)
    assert env.observation_spec == {
        "grid": ObservationSpec((5, 5, 5), jnp.dtype(jnp.float32)),
        "step_count": ObservationSpec((), jnp.dtype(jnp.int32)),
        ACTION_MASK: ObservationSpec((4,), jnp.dtype(bool)),
    }
    for leaf, obs in zip(
        jax.tree.leaves(env.observation_spec, is_leaf=is_spec_leaf),
        jax.tree.leaves(first.obs),
        strict=True,
    ):
        assert (N, *leaf.shape) == obs.shape and leaf.dtype == obs.dtype
    # Maze's Position named tuples become nested dicts, in the spec as in what reset returns.
    maze_env = maze()
    spec = maze_env.observation_spec
    assert spec["agent_position"] == {
        "row": ObservationSpec((), jnp.dtype(jnp.int32)),
        "col": ObservationSpec((), jnp.dtype(jnp.int32)),
    }
    assert spec["walls"] == ObservationSpec((5, 5), jnp.dtype(bool))
    _, ts = jax.eval_shape(maze_env.reset, jax.random.key(0), ())
    assert jax.tree.map(lambda x: ObservationSpec(x.shape, x.dtype), ts.obs) == spec
    assert jax.tree.map(lambda x: ObservationSpec(x.shape, x.dtype), ts.final_obs) == spec


def test_names_refusals_and_errors(monkeypatch):
    from podracer.envs.jax import jumanji as jumanji_envs

    assert set(jumanji_envs.KNOWN) <= set(jumanji_envs.names())
    with pytest.raises(ConfigValueError, match="Did you mean 'jumanji:Snake-v1'"):
        envs.make("jumanji:Snek-v1")
    # Multi-dimensional and continuous actions are refused in one line.
    for name in ("RubiksCube-partly-scrambled-v0", "MultiCVRP-v0"):
        with pytest.raises(ConfigValueError, match="take one discrete action") as error:
            envs.make(f"jumanji:{name}")
        assert "\n" not in str(error.value)
    game = envs.make("jumanji:Game2048-v1")
    assert game.action_spec == DiscreteActionSpec(4)
    assert game.observation_spec == {
        "board": ObservationSpec((4, 4), jnp.dtype(jnp.int32)),
        ACTION_MASK: ObservationSpec((4,), jnp.dtype(bool)),
    }
    monkeypatch.setitem(sys.modules, "jumanji", None)
    with pytest.raises(ConfigValueError, match=r"pip install 'podracer\[jumanji\]'"):
        envs.make("jumanji:Snake-v1")
