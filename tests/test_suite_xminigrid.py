"""xminigrid through podracer's adapter (podracer.envs.jax.xminigrid): 200 steps of 4 environments
equal xminigrid's own reset / step driven here with the adapter's key convention and same-step
auto-reset; the adapter under jit(vmap) and inside shard_map, where its step needs
check_vma=False (xminigrid's conds fail shard_map's varying-axes check: the adapter names the
problem, and the environment's check_vma = False makes Anakin run unchecked); params, specs,
errors.

MiniGrid-EmptyRandom-5x5 with an 8-step limit: random starts, some next to the goal, so random
actions reach it (termination) a few times in 200 steps and run out of time (truncation) many
times."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.errors import ConfigValueError
from podracer.types import DiscreteActionSpec, ObservationSpec

xminigrid = pytest.importorskip("xminigrid")

NAME = "MiniGrid-EmptyRandom-5x5"
MAX_STEPS = 8
N, STEPS = 4, 200
# XLA's cheaper CPU passes: the programs compile in half the time, with the same values on both
# sides of every comparison (each side is compiled with them).
FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


@pytest.fixture(scope="module")
def env():
    return envs.make(f"xminigrid:{NAME}", max_steps=MAX_STEPS)


def inputs(num_actions):
    """Reset keys [N], step keys [STEPS, N] and random actions [STEPS, N]."""
    reset_key, step_key, action_key = jax.random.split(jax.random.key(3), 3)
    return (
        jax.random.split(reset_key, N),
        jax.random.split(step_key, (STEPS, N)),
        jax.random.randint(action_key, (STEPS, N), 0, num_actions, jnp.int32),
    )


def adapter_rollout(env):
    """Resets ``[N]`` and scans ``STEPS`` steps of the adapter (not jitted: the caller wraps)."""

    params = env.default_params

    def rollout(reset_keys, step_keys, actions):
        state, first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)

        def body(state, x):
            key, action = x
            return jax.vmap(env.step, in_axes=(0, 0, 0, None))(key, state, action, params)

        _, traj = jax.lax.scan(body, state, (step_keys, actions))
        return first, traj

    return rollout


def library_rollout(lib, params):
    """xminigrid's own reset / step, auto-reset here at the step that ends an episode (the
    library's reset gets the second half of the step's key)."""

    def step(key, timestep, action):
        _, reset_key = jax.random.split(key)
        stepped = lib.step(params, timestep, action)
        done = stepped.last()
        fresh = lib.reset(params, reset_key)
        carried = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)
        return carried, {
            "obs": carried.observation,
            "reward": stepped.reward,
            "terminated": done & (stepped.discount == 0),  # LAST, discount 0
            "truncated": done & (stepped.discount == 1),  # LAST, discount 1
            "final_obs": stepped.observation,
        }

    def rollout(reset_keys, step_keys, actions):
        first = jax.vmap(lambda key: lib.reset(params, key))(reset_keys)

        def body(timestep, x):
            return jax.vmap(step)(x[0], timestep, x[1])

        _, traj = jax.lax.scan(body, first, (step_keys, actions))
        return first.observation, traj

    return rollout


@pytest.fixture(scope="module")
def rollouts(env):
    args = inputs(env.action_spec.num_actions)
    ours = jax.jit(adapter_rollout(env), compiler_options=FAST)(*args)
    theirs = jax.jit(library_rollout(env.unwrapped, env.default_params), compiler_options=FAST)(
        *args
    )
    return args, ours, theirs


@pytest.mark.slow
def test_parity_with_xminigrid_over_auto_resets(rollouts):
    _, (first, traj), (lib_first, lib) = rollouts
    np.testing.assert_array_equal(first.obs, lib_first)
    np.testing.assert_array_equal(first.final_obs, lib_first)
    assert not first.terminated.any() and not first.truncated.any()
    assert first.reward.dtype == jnp.float32 and not first.reward.any()

    np.testing.assert_array_equal(traj.obs, lib["obs"])
    np.testing.assert_array_equal(traj.final_obs, lib["final_obs"])
    np.testing.assert_allclose(traj.reward, lib["reward"], rtol=1e-6)
    np.testing.assert_array_equal(traj.terminated, lib["terminated"])
    np.testing.assert_array_equal(traj.truncated, lib["truncated"])
    assert traj.reward.dtype == jnp.float32
    assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_

    # Several episodes ended both ways, so the comparison went across auto-resets.
    assert int(traj.terminated.sum()) >= 3 and int(traj.truncated.sum()) >= 5
    assert not (traj.terminated & traj.truncated).any()
    done = np.asarray(traj.terminated | traj.truncated)
    # The time limit counts from each reset: no episode runs past MAX_STEPS steps.
    for env_index in range(N):
        ends = np.flatnonzero(done[:, env_index])
        assert np.diff(np.concatenate([[-1], ends])).max() <= MAX_STEPS
    # final_obs is obs where the episode goes on; at an end it is the ended episode's last one.
    same = np.all(np.asarray(traj.obs) == np.asarray(traj.final_obs), axis=(2, 3, 4))
    assert same[~done].all()
    assert not same[done].all()


def test_inside_shard_map(env, rollouts):
    """xminigrid's lax.conds mix the state with constants (varying against replicated in
    shard_map's types): under shard_map's default check the adapter's step names the
    problem; its reset traces there, and without the check (check_vma=False) the whole
    rollout runs there and equals jit(vmap)'s."""
    from podracer.envs import EpisodeStatistics
    from podracer.loops.anakin import env_checks_vma

    # The environment asks for an unchecked shard_map, which Anakin gives it.
    assert env.check_vma is False and not env_checks_vma(EpisodeStatistics(env))
    args, expected, _ = rollouts
    mesh = jax.make_mesh((1,), ("data",))
    batch, time_batch = P("data"), P(None, "data")
    placed = [
        jax.device_put(arg, NamedSharding(mesh, spec))
        for arg, spec in zip(args, (batch, time_batch, time_batch), strict=True)
    ]

    def reset(keys):
        return jax.vmap(env.reset, in_axes=(0, None))(keys, env.default_params)[1]

    # The reset traces under the default check (lowered only: its values are compared below).
    jax.jit(jax.shard_map(reset, mesh=mesh, in_specs=batch, out_specs=batch)).lower(placed[0])

    def sharded(check_vma):
        return jax.jit(
            jax.shard_map(
                adapter_rollout(env),
                mesh=mesh,
                in_specs=(batch, time_batch, time_batch),
                out_specs=(batch, time_batch),
                check_vma=check_vma,
            ),
            compiler_options=FAST,
        )

    with pytest.raises(ConfigValueError, match=r"code does not trace inside a jax\.shard_map"):
        sharded(True).lower(*placed)
    for ours, theirs in zip(
        jax.tree.leaves(sharded(False)(*placed)), jax.tree.leaves(expected), strict=True
    ):
        np.testing.assert_array_equal(ours, theirs)


def test_specs_and_params(env, rollouts):
    from xminigrid.environment import EnvParams

    _, (first, _), _ = rollouts
    assert env.id == f"xminigrid:{NAME}"
    assert repr(env) == f"XMiniGridEnvironment('xminigrid:{NAME}')"
    assert isinstance(env.default_params, EnvParams) and env.default_params.max_steps == MAX_STEPS
    assert env.action_spec == DiscreteActionSpec(6)
    assert env.observation_spec == ObservationSpec((7, 7, 2), jnp.dtype(jnp.uint8))
    assert first.obs.shape[1:] == env.observation_spec.shape
    assert first.obs.dtype == env.observation_spec.dtype
    # Other params: the specs follow them.
    narrow = env.with_params(env.default_params.replace(view_size=5))
    assert narrow.default_params.view_size == 5 and env.default_params.view_size == 7
    assert narrow.observation_spec == ObservationSpec((5, 5, 2), jnp.dtype(jnp.uint8))
    _, ts = jax.eval_shape(narrow.reset, jax.random.key(0), narrow.default_params)
    assert ts.obs.shape == (5, 5, 2)
    # XLand: its ruleset is an array leaf of the params, which a batch may vary.
    xland = envs.make("xminigrid:XLand-MiniGrid-R1-9x9", max_steps=30)
    assert xland.observation_spec == ObservationSpec((5, 5, 2), jnp.dtype(jnp.uint8))
    params = jax.tree.map(lambda x: jnp.stack([x, x]), xland.default_params)
    keys = jax.random.split(jax.random.key(0), 2)

    def one(key, params):
        state, _ = xland.reset(key, params)
        return xland.step(key, state, jnp.int32(0), params)[1]

    ts = jax.eval_shape(jax.vmap(one), keys, params)
    assert ts.obs.shape == (2, 5, 5, 2) and ts.terminated.shape == (2,)


def test_names_and_errors():
    from podracer.envs.jax import xminigrid as xminigrid_envs

    assert set(xminigrid_envs.KNOWN) <= set(xminigrid_envs.names())
    assert "MiniGrid-Empty-5x5" in xminigrid_envs.names()
    with pytest.raises(ConfigValueError, match="Did you mean 'xminigrid:MiniGrid-Empty-5x5'"):
        envs.make("xminigrid:MiniGrid-Empty-5x4")
    with pytest.raises(ConfigValueError, match="max_step not among xminigrid's parameters"):
        envs.make("xminigrid:MiniGrid-Empty-5x5", max_step=3)
