"""NAVIX through podracer's adapter (podracer.envs.jax.navix): 200 steps of 4 environments equal
NAVIX's own reset / step driven here with the adapter's key convention and same-step
auto-reset; the adapter under jit(vmap) and inside shard_map, where its step needs
check_vma=False (NAVIX's conds fail shard_map's varying-axes check: the adapter names the
problem, and the environment's check_vma = False makes Anakin run unchecked); specs, errors.

Navix-Dynamic-Obstacles-5x5-Random-v0 with a 12-step limit: random actions hit a ball
(termination) or run out of time (truncation) many times in 200 steps, and the balls move with
the key kept in NAVIX's state, so the state's own randomness is compared too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.errors import ConfigValueError
from podracer.types import DiscreteActionSpec, ObservationSpec

navix = pytest.importorskip("navix")

NAME = "Navix-Dynamic-Obstacles-5x5-Random-v0"
MAX_STEPS = 12
N, STEPS = 4, 200
# XLA's cheaper CPU passes: the programs compile in half the time, with the same values on both
# sides of every comparison (each side is compiled with them).
FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


@pytest.fixture(scope="module")
def env():
    return envs.make(f"navix:{NAME}", max_steps=MAX_STEPS)


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

    def rollout(reset_keys, step_keys, actions):
        state, first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, ())

        def body(state, x):
            key, action = x
            return jax.vmap(env.step, in_axes=(0, 0, 0, None))(key, state, action, ())

        _, traj = jax.lax.scan(body, state, (step_keys, actions))
        return first, traj

    return rollout


def library_rollout(lib):
    """NAVIX's own reset / step, auto-reset here at the step that ends an episode (the
    library's reset gets the second half of the step's key)."""

    def step(key, timestep, action):
        _, reset_key = jax.random.split(key)
        stepped = lib.step(timestep, action)  # public step: no auto-reset on a running episode
        done = stepped.step_type > 0
        fresh = lib.reset(reset_key)
        carried = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)
        return carried, {
            "obs": carried.observation,
            "reward": stepped.reward,
            "terminated": stepped.step_type == 2,  # navix StepType.TERMINATION
            "truncated": stepped.step_type == 1,  # navix StepType.TRUNCATION
            "final_obs": stepped.observation,
        }

    def rollout(reset_keys, step_keys, actions):
        first = jax.vmap(lib.reset)(reset_keys)

        def body(timestep, x):
            return jax.vmap(step)(x[0], timestep, x[1])

        _, traj = jax.lax.scan(body, first, (step_keys, actions))
        return first.observation, traj

    return rollout


@pytest.fixture(scope="module")
def rollouts(env):
    args = inputs(env.action_spec.num_actions)
    ours = jax.jit(adapter_rollout(env), compiler_options=FAST)(*args)
    theirs = jax.jit(library_rollout(env.unwrapped), compiler_options=FAST)(*args)
    return args, ours, theirs


@pytest.mark.slow
def test_parity_with_navix_over_auto_resets(rollouts):
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
    assert int(traj.terminated.sum()) >= 5 and int(traj.truncated.sum()) >= 5
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
    """NAVIX's lax.conds mix the state's events with constant ones (varying against replicated
    in shard_map's types): under shard_map's default check the adapter's step names the
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
        return jax.vmap(env.reset, in_axes=(0, None))(keys, ())[1]

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


def test_specs(env, rollouts):
    _, (first, _), _ = rollouts
    assert env.id == f"navix:{NAME}"
    assert repr(env) == f"NavixEnvironment('navix:{NAME}')"
    assert env.default_params == ()
    assert env.action_spec == DiscreteActionSpec(7)
    assert env.observation_spec == ObservationSpec((5, 5, 3), jnp.dtype(jnp.uint8))
    assert first.obs.shape[1:] == env.observation_spec.shape
    assert first.obs.dtype == env.observation_spec.dtype
    # Another observation function: the spec follows what reset returns.
    rgb = envs.make("navix:Navix-Empty-5x5-v0", observation_fn=navix.observations.rgb)
    _, ts = jax.eval_shape(rgb.reset, jax.random.key(0), ())
    assert rgb.observation_spec == ObservationSpec(ts.obs.shape, ts.obs.dtype)
    assert ts.obs.dtype == jnp.uint8 and ts.obs.ndim == 3


def test_names_and_unknown_name():
    from podracer.envs.jax import navix as navix_envs

    assert set(navix_envs.KNOWN) <= set(navix_envs.names())
    assert "Navix-Empty-5x5-v0" in navix_envs.names()
    with pytest.raises(ConfigValueError, match="Did you mean 'navix:Navix-Empty-6x6-v0'"):
        envs.make("navix:Navix-Empty-5x6-v0")
