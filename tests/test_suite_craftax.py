"""Craftax through podracer's adapter (podracer.envs.jax.craftax): 200 steps of 4 Craftax-Classic
environments equal Craftax's own reset / step driven here with the adapter's key convention and
same-step auto-reset (its batch step, which resets only the ended episodes, equals its step
vmapped), with the time limit a truncation and a death a termination; inside
shard_map its step needs check_vma=False (Craftax's renderer fails shard_map's varying-axes
check: the adapter names the problem, and the environment's check_vma = False makes Anakin run
unchecked); params, specs and errors.

A 25-step limit truncates many episodes in 200 steps; a random player seldom dies that soon,
so the test kills some (``player_health`` set to 0 in both sides' states before a step), one of
them on its episode's last allowed step (a death at the time limit is a termination).

Craftax compiles slowly on CPU: each side's program is compiled once for the module, with XLA's
cheaper CPU passes, and the other checks trace (lower) without compiling. The full Craftax is
only traced."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.errors import ConfigValueError
from podracer.types import DiscreteActionSpec, ObservationSpec

craftax = pytest.importorskip("craftax")

NAME = "Craftax-Classic-Symbolic-v1"
MAX_STEPS = 25
N, STEPS = 4, 200
# XLA's cheaper CPU passes: the programs compile in about half the time, with the same values
# on both sides of the comparison (each side is compiled with them).
FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
LAVA = 14  # craftax_classic.constants.BlockType.LAVA


@pytest.fixture(scope="module")
def env():
    return envs.make(f"craftax:{NAME}", max_timesteps=MAX_STEPS)


def inputs(num_actions):
    """Reset keys [N], step keys [STEPS, N] and random actions [STEPS, N]."""
    reset_key, step_key, action_key = jax.random.split(jax.random.key(5), 3)
    return (
        jax.random.split(reset_key, N),
        jax.random.split(step_key, (STEPS, N)),
        jax.random.randint(action_key, (STEPS, N), 0, num_actions, jnp.int32),
    )


def kill_some(state, t):
    """Craftax states ``[N]`` with some players dead before step ``t``: environment 0 every
    29 steps, environment 3 on its episode's last allowed step (so it dies at the limit)."""
    dead = jnp.zeros(N, bool).at[0].set(t % 29 == 10)
    dead = dead.at[3].set((state.timestep[3] == MAX_STEPS - 1) & (t > 100))
    health = jnp.where(dead, 0, state.player_health).astype(state.player_health.dtype)
    return state.replace(player_health=health)


def adapter_rollout(env, batched=True):
    """Resets ``[N]`` and scans ``STEPS`` steps of the adapter (not jitted: the caller wraps):
    its ``step_batch`` (what the loops step with: only the ended episodes reset), or ``step``
    vmapped."""
    params = env.default_params
    step = env.step_batch if batched else jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(reset_keys, step_keys, actions):
        state, first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)

        def body(state, x):
            t, key, action = x
            state = kill_some(state, t)
            return step(key, state, action, params)

        _, traj = jax.lax.scan(body, state, (jnp.arange(STEPS), step_keys, actions))
        return first, traj

    return rollout


def library_rollout(lib, params):
    """Craftax's own reset / step (made without auto-reset), auto-reset here at the step that
    ends an episode; terminated and truncated from the parts of Craftax-Classic's
    ``is_game_over``: a death or lava against the time limit."""

    def step(key, state, action):
        step_key, reset_key = jax.random.split(key)
        obs, stepped, reward, done, info = lib.step(step_key, state, action, params)
        reset_obs, reset_state = lib.reset(reset_key, params)
        carried = jax.tree.map(lambda a, b: jnp.where(done, a, b), reset_state, stepped)
        position = stepped.player_position
        dies = (stepped.player_health <= 0) | (stepped.map[position[0], position[1]] == LAVA)
        at_limit = stepped.timestep >= params.max_timesteps
        return carried, {
            "obs": jnp.where(done, reset_obs, obs),
            "reward": reward,
            "terminated": done & dies,
            "truncated": done & ~dies,
            "final_obs": obs,
            "done": done,
            "at_limit": at_limit,
            "discount": info["discount"],
        }

    def rollout(reset_keys, step_keys, actions):
        first_obs, state = jax.vmap(lib.reset, in_axes=(0, None))(reset_keys, params)

        def body(state, x):
            t, key, action = x
            return jax.vmap(step)(key, kill_some(state, t), action)

        _, traj = jax.lax.scan(body, state, (jnp.arange(STEPS), step_keys, actions))
        return first_obs, traj

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
def test_parity_with_craftax_over_auto_resets(rollouts):
    _, (first, traj), (lib_first, lib) = rollouts
    np.testing.assert_array_equal(first.obs, lib_first)
    np.testing.assert_array_equal(first.final_obs, lib_first)
    assert not first.terminated.any() and not first.truncated.any()
    assert first.reward.dtype == jnp.float32 and not first.reward.any()

    np.testing.assert_array_equal(traj.obs, lib["obs"])
    np.testing.assert_array_equal(traj.final_obs, lib["final_obs"])
    np.testing.assert_allclose(traj.reward, lib["reward"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(traj.terminated, lib["terminated"])
    np.testing.assert_array_equal(traj.truncated, lib["truncated"])
    assert traj.obs.dtype == jnp.float32 and traj.reward.dtype == jnp.float32
    assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_

    done = np.asarray(lib["done"])
    # Craftax's done is a death or the time limit, and its discount is 0 at both: the adapter
    # tells them apart.
    np.testing.assert_array_equal(done, np.asarray(traj.terminated | traj.truncated))
    assert (np.asarray(lib["discount"])[done] == 0).all()
    at_limit = np.asarray(lib["at_limit"])
    terminated, truncated = np.asarray(traj.terminated), np.asarray(traj.truncated)
    assert terminated.sum() >= 5 and truncated.sum() >= 10
    assert not (terminated & truncated).any()
    assert at_limit[truncated].all()
    assert (terminated & at_limit).any(), "no death on a time limit's last step"
    assert (terminated & ~at_limit).any()
    # final_obs is obs where the episode goes on; at an end it is the ended episode's last one.
    same = np.all(np.asarray(traj.obs) == np.asarray(traj.final_obs), axis=-1)
    assert same[~done].all()
    assert not same[done].any()


@pytest.mark.slow
def test_step_batch_equals_step_vmapped(env, rollouts):
    """The batch step resets only the ended episodes (a switch on how many: none, one of the 4,
    or all): the same values as the step vmapped, which resets every environment."""
    args, ours, _ = rollouts
    vmapped = jax.jit(adapter_rollout(env, batched=False), compiler_options=FAST)(*args)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(vmapped), strict=True):
        np.testing.assert_array_equal(a, b)
    done = np.asarray(ours[1].terminated | ours[1].truncated).sum(axis=1)
    # Every branch ran: steps where no episode ended, one did, and two or more did.
    assert (done == 0).any() and (done == 1).any() and (done >= 2).any()


def test_inside_shard_map(env, rollouts):
    """Craftax's renderer scans from a constant map to a state-dependent one (replicated against
    varying in shard_map's types): under shard_map's default check the adapter's step names the
    problem; its reset traces there, and without the check (check_vma=False) the rollout does
    (lowered only: Craftax compiles slowly)."""
    from podracer.envs import EpisodeStatistics
    from podracer.loops.anakin import env_checks_vma

    # The environment asks for an unchecked shard_map, which Anakin gives it.
    assert env.check_vma is False and not env_checks_vma(EpisodeStatistics(env))
    args, _, _ = rollouts
    mesh = jax.make_mesh((1,), ("data",))
    batch, time_batch = P("data"), P(None, "data")
    placed = [
        jax.device_put(arg, NamedSharding(mesh, spec))
        for arg, spec in zip(args, (batch, time_batch, time_batch), strict=True)
    ]

    def reset(keys):
        return jax.vmap(env.reset, in_axes=(0, None))(keys, env.default_params)[1]

    jax.jit(jax.shard_map(reset, mesh=mesh, in_specs=batch, out_specs=batch)).lower(placed[0])

    def sharded(check_vma):
        return jax.jit(
            jax.shard_map(
                adapter_rollout(env),
                mesh=mesh,
                in_specs=(batch, time_batch, time_batch),
                out_specs=(batch, time_batch),
                check_vma=check_vma,
            )
        )

    with pytest.raises(ConfigValueError, match=r"code does not trace inside a jax\.shard_map"):
        sharded(True).lower(*placed)
    sharded(False).lower(*placed)


def test_specs_and_params(env, rollouts):
    from craftax.craftax_classic.envs.craftax_state import EnvParams

    _, (first, _), _ = rollouts
    assert env.id == f"craftax:{NAME}"
    assert repr(env) == f"CraftaxEnvironment('craftax:{NAME}')"
    assert isinstance(env.default_params, EnvParams)
    assert env.default_params.max_timesteps == MAX_STEPS
    assert env.action_spec == DiscreteActionSpec(17)
    assert env.observation_spec == ObservationSpec((1345,), jnp.dtype(jnp.float32))
    assert first.obs.shape[1:] == env.observation_spec.shape
    assert first.obs.dtype == env.observation_spec.dtype
    longer = env.with_params(env.default_params.replace(max_timesteps=100))
    assert longer.default_params.max_timesteps == 100 and env.default_params.max_timesteps == 25
    assert longer.observation_spec == env.observation_spec


def _texture_cache_built() -> bool:
    from craftax.craftax import constants

    return os.path.exists(constants.TEXTURE_CACHE_FILE)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "num_actions", "shape", "trace"),
    [
        ("Craftax-Symbolic-v1", 43, (8268,), "step"),
        ("Craftax-Classic-Pixels-v1", 17, (63, 63, 3), "reset"),
        ("Craftax-Pixels-v1", 43, (130, 110, 3), None),
    ],
)
def test_other_variants_trace(name, num_actions, shape, trace):
    """The other three: specs (as Craftax's observation spaces give them) equal to what reset
    returns and, for the full Craftax (whose end is also the final boss beaten), to what step
    returns (traced, not compiled; the pixel renderers' steps take seconds to trace). The full
    Craftax's pixels are not traced: its first render builds Craftax's texture cache, about
    three minutes of a fresh install's CPU (every CI run). For the same reason the full
    Craftax's pixels are made only where that cache is already built (a developer's install
    after its first pixel run): Craftax's own pixel class builds it in its constructor."""
    if name == "Craftax-Pixels-v1" and not _texture_cache_built():
        pytest.skip("Craftax's texture cache is not built: making Craftax-Pixels-v1 takes minutes")
    env = envs.make(f"craftax:{name}")
    assert env.action_spec == DiscreteActionSpec(num_actions)
    assert env.observation_spec == ObservationSpec(shape, jnp.dtype(jnp.float32))
    if trace is None:
        return
    with_step = trace == "step"

    def one(key):
        state, first = env.reset(key, env.default_params)
        if not with_step:
            return (first,)
        return first, env.step(key, state, jnp.int32(0), env.default_params)[1]

    steps = jax.eval_shape(one, jax.random.key(0))
    for ts in steps:
        assert ObservationSpec(ts.obs.shape, ts.obs.dtype) == env.observation_spec
        assert ObservationSpec(ts.final_obs.shape, ts.final_obs.dtype) == env.observation_spec
        assert ts.terminated.dtype == jnp.bool_ and ts.truncated.dtype == jnp.bool_
        assert ts.reward.dtype == jnp.float32


def test_names_and_errors():
    from podracer.envs.jax import craftax as craftax_envs

    assert craftax_envs.names() == craftax_envs.KNOWN
    with pytest.raises(ConfigValueError, match="Did you mean 'craftax:Craftax-Symbolic-v1'"):
        envs.make("craftax:Craftax-Symbolc-v1")
    with pytest.raises(ConfigValueError, match="max_steps not among Craftax's parameters"):
        envs.make(f"craftax:{NAME}", max_steps=3)


def test_reset_sizes_hold_every_count_within_four_times():
    from podracer.envs.jax.craftax import reset_sizes

    assert reset_sizes(4) == [0, 1, 4] and reset_sizes(1) == [0, 1]
    assert reset_sizes(64) == [0, 1, 4, 16, 64]
    assert reset_sizes(1024) == [0, 4, 16, 64, 256, 1024]
    for batch in (1, 3, 64, 100, 1024, 4096):
        sizes = reset_sizes(batch)
        for ended in range(1, batch + 1):
            chosen = min(size for size in sizes if size >= ended)  # what the switch picks
            assert chosen <= max(4 * ended, batch // 256, 1) or chosen == batch, (batch, ended)
