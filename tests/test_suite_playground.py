"""MuJoCo Playground through podracer's adapter (podracer.envs.jax.playground): 200 steps of 4
environments equal Playground's own reset / step driven here with the adapter's key convention,
action repeat, time limit and same-step auto-reset; the adapter inside shard_map (MJX's loops
need the adapter's varying control flow there) equals it under jit(vmap); specs, dict
observations and errors.

CartpoleBalance with a 1 s physics step (ctrl_dt = sim_dt = 1.0, against 0.01 by default),
each action repeated twice and a limit of 25 Playground steps (13 podracer steps): the Control
Suite's only termination is a NaN in the physics, which this step size brings within a few
dozen steps, so episodes end by termination (some at the first of two repeats, which then
stop) and by truncation many times in 200 steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.envs.wrappers import EpisodeStatistics
from podracer.errors import ConfigValueError
from podracer.types import BoundedActionSpec, ObservationSpec

pytest.importorskip("mujoco_playground")

NAME = "CartpoleBalance"
EPISODE_LENGTH = 25  # Playground steps
ACTION_REPEAT = 2
MAX_STEPS = -(-EPISODE_LENGTH // ACTION_REPEAT)  # podracer steps of the longest episode
UNSTABLE = {"ctrl_dt": 1.0, "sim_dt": 1.0}
N, STEPS = 4, 200
# XLA's backend optimisations off: MJX's programs compile in about two thirds of the time, and
# both sides of each comparison are compiled alike.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


@pytest.fixture(scope="module")
def env():
    return envs.make(
        f"playground:{NAME}",
        episode_length=EPISODE_LENGTH,
        action_repeat=ACTION_REPEAT,
        config_overrides=UNSTABLE,
    )


def plain(tree):
    """The leaves of ``tree``, PRNG keys as their raw bits."""
    return [
        jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        for x in jax.tree.leaves(tree)
    ]


def inputs(action_size):
    """Reset keys [N], step keys [STEPS, N] and random actions [STEPS, N, action_size]."""
    reset_key, step_key, action_key = jax.random.split(jax.random.key(3), 3)
    return (
        jax.random.split(reset_key, N),
        jax.random.split(step_key, (STEPS, N)),
        jax.random.uniform(action_key, (STEPS, N, action_size), minval=-1.0, maxval=1.0),
    )


def adapter_rollout(env):
    """Resets ``[N]`` and scans ``STEPS`` steps of the adapter (not jitted: the caller wraps);
    the first timestep and the trajectory. (Not the states: XLA then drops the work whose
    results only the states hold, which halves the compile time.)"""

    def rollout(reset_keys, step_keys, actions):
        state, first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, ())

        def body(state, x):
            key, action = x
            return jax.vmap(env.step, in_axes=(0, 0, 0, None))(key, state, action, ())

        _, traj = jax.lax.scan(body, state, (step_keys, actions))
        return first, traj

    return rollout


def library_rollout(lib):
    """Playground's own reset / step, with the action repeated (the repeats stop at a
    termination), the time limit counted in Playground steps and the auto-reset done here at
    the step that ends an episode (the library's reset gets the second half of the step's key;
    its step takes none)."""

    def where(cond, a, b):
        return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)

    def step(key, carry, action):
        state, steps = carry
        _, reset_key = jax.random.split(key)
        reward, ended, first_ended = jnp.zeros(()), jnp.zeros((), bool), None
        stepped = state
        for _ in range(ACTION_REPEAT):
            # a copy: Playground's step writes into the state's dicts
            following = lib.step(jax.tree.map(lambda x: x, stepped), action)
            reward = reward + jnp.where(ended, 0.0, following.reward)
            stepped = where(ended, stepped, following)
            ended = ended | (stepped.done > 0)
            first_ended = ended if first_ended is None else first_ended
        steps = steps + ACTION_REPEAT
        truncated = ~ended & (steps >= EPISODE_LENGTH)
        done = ended | truncated
        carried = where(done, lib.reset(reset_key), stepped)
        return (carried, jnp.where(done, 0, steps)), {
            "obs": carried.obs,
            "reward": reward,
            "terminated": ended,
            "truncated": truncated,
            "final_obs": stepped.obs,
            "ended_at_first_repeat": first_ended,
        }

    def rollout(reset_keys, step_keys, actions):
        first = jax.vmap(lib.reset)(reset_keys)

        def body(carry, x):
            return jax.vmap(step)(x[0], carry, x[1])

        start = (first, jnp.zeros(reset_keys.shape, jnp.int32))
        _, traj = jax.lax.scan(body, start, (step_keys, actions))
        return first.obs, traj

    return rollout


@pytest.fixture(scope="module")
def rollouts(env):
    args = inputs(env.action_spec.shape[0])
    ours = jax.jit(adapter_rollout(env), compiler_options=FAST_COMPILE)(*args)
    theirs = jax.jit(library_rollout(env.unwrapped), compiler_options=FAST_COMPILE)(*args)
    return args, ours, theirs


@pytest.mark.slow
def test_parity_with_playground_over_auto_resets(rollouts):
    _, (first, traj), (lib_first, lib) = rollouts
    np.testing.assert_array_equal(first.obs, lib_first)
    np.testing.assert_array_equal(first.final_obs, lib_first)
    assert not first.terminated.any() and not first.truncated.any()
    assert first.reward.dtype == jnp.float32 and not first.reward.any()

    # NaNs (the physics blown up) compare equal where both have them.
    np.testing.assert_allclose(traj.obs, lib["obs"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traj.final_obs, lib["final_obs"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traj.reward, lib["reward"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(traj.terminated, lib["terminated"])
    np.testing.assert_array_equal(traj.truncated, lib["truncated"])
    assert traj.obs.dtype == jnp.float32 and traj.reward.dtype == jnp.float32
    assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_

    # Several episodes ended both ways, so the comparison went across auto-resets, and some
    # ended at the first repeat of their last action.
    assert int(traj.terminated.sum()) >= 5 and int(traj.truncated.sum()) >= 5
    assert lib["ended_at_first_repeat"].any()
    assert not (traj.terminated & traj.truncated).any()
    done = np.asarray(traj.terminated | traj.truncated)
    # The time limit counts from each reset: no episode runs past MAX_STEPS steps.
    for env_index in range(N):
        ends = np.flatnonzero(done[:, env_index])
        assert np.diff(np.concatenate([[-1], ends])).max() <= MAX_STEPS
    # A termination is the physics blown up (a NaN); the next episode starts afresh.
    final_nan = np.isnan(np.asarray(traj.final_obs)).any(axis=-1)
    np.testing.assert_array_equal(final_nan, np.asarray(traj.terminated))
    assert np.isfinite(np.asarray(traj.obs)).all()
    # final_obs is obs where the episode goes on; at an end it is the ended episode's last one.
    same = np.all(np.asarray(traj.obs) == np.asarray(traj.final_obs), axis=-1)
    assert same[~done].all()
    assert not same[done].any()


@pytest.mark.slow
def test_inside_shard_map(env, rollouts):
    """MJX's solver and Playground's substep loop build carries and cond branches from
    constants, which shard_map's varying-axes check refuses against per-device values: the
    environment says check_vma = False, unchecked the rollout equals jit(vmap)'s, and a checked
    shard_map gives a one-line error that says so."""
    args, expected, _ = rollouts
    assert EpisodeStatistics(env).check_vma is False
    mesh = jax.make_mesh((1,), ("data",))
    batch, time_batch = P("data"), P(None, "data")
    placed = [
        jax.device_put(arg, NamedSharding(mesh, spec))
        for arg, spec in zip(args, (batch, time_batch, time_batch), strict=True)
    ]

    def sharded(check_vma):
        return jax.jit(
            jax.shard_map(
                adapter_rollout(env),
                mesh=mesh,
                in_specs=(batch, time_batch, time_batch),
                out_specs=(batch, time_batch),
                check_vma=check_vma,
            ),
            compiler_options=FAST_COMPILE,
        )

    for ours, theirs in zip(plain(sharded(False)(*placed)), plain(expected), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigValueError, match=r"does not trace inside a jax\.shard_map"):
        sharded(True).lower(*placed)


def test_specs(env, rollouts):
    _, (first, _), _ = rollouts
    assert env.id == f"playground:{NAME}"
    assert repr(env) == f"PlaygroundEnvironment('playground:{NAME}')"
    assert env.default_params == ()
    assert env.impl == "jax" and env.unwrapped.mjx_model.impl.value == "jax"
    assert env.episode_length == EPISODE_LENGTH and env.action_repeat == ACTION_REPEAT
    spec = env.action_spec
    assert isinstance(spec, BoundedActionSpec) and spec.shape == (1,) and spec.dtype == "float32"
    np.testing.assert_array_equal(spec.low, [-1.0])
    np.testing.assert_array_equal(spec.high, [1.0])
    assert env.observation_spec == ObservationSpec((5,), jnp.dtype(jnp.float32))
    assert first.obs.shape[1:] == env.observation_spec.shape
    assert first.obs.dtype == env.observation_spec.dtype


def test_library_defaults():
    env = envs.make(f"playground:{NAME}")
    assert env.episode_length == 1000 and env.action_repeat == 1  # Playground's config
    # Reset's and step's states have one type (a loop carries them; the rollouts above carry
    # those of the repeated step).
    state, _ = jax.eval_shape(env.reset, jax.random.key(0), ())
    stepped, ts = jax.eval_shape(env.step, jax.random.key(1), state, jnp.zeros(1), ())
    assert jax.tree.structure(state) == jax.tree.structure(stepped)
    assert jax.tree.leaves(state) == jax.tree.leaves(stepped)
    assert ts.obs.dtype == ts.reward.dtype == jnp.float32 and ts.terminated.dtype == jnp.bool_
    if jax.default_backend() == "cpu":  # MJX's Warp bindings leak a tracer in the auto-reset
        with pytest.raises(ConfigValueError, match="impl='warp' does not run on a CPU"):
            envs.make(f"playground:{NAME}", config_overrides={"impl": "warp"})


def make_dict_cartpole(config, config_overrides=None):
    """A Playground environment with a locomotion task's dict observation (Cartpole's
    observation as "state", with the positions appended as "privileged_state")."""
    from mujoco_playground._src.dm_control_suite import cartpole

    class DictCartpole(cartpole.Balance):
        def _get_obs(self, data, info):
            state = super()._get_obs(data, info)
            return {"state": state, "privileged_state": jnp.concatenate([state, data.qpos])}

    return DictCartpole(False, False, config=config, config_overrides=config_overrides)


@pytest.fixture
def dict_env_name():
    from mujoco_playground._src import dm_control_suite
    from mujoco_playground._src.dm_control_suite import cartpole

    name = "PodracerDictCartpole"
    dm_control_suite.register_environment(name, make_dict_cartpole, cartpole.default_config)
    yield name
    del dm_control_suite._envs[name], dm_control_suite._cfgs[name]


def test_dict_observation(dict_env_name):
    env_id = f"playground:{dict_env_name}"
    env = envs.make(env_id)  # the actor's "state" by default
    assert env.observation_spec == ObservationSpec((5,), jnp.dtype(jnp.float32))
    whole = envs.make(env_id, observation_key=None)
    assert whole.observation_spec == {
        "state": ObservationSpec((5,), jnp.dtype(jnp.float32)),
        "privileged_state": ObservationSpec((7,), jnp.dtype(jnp.float32)),
    }
    state, first = jax.eval_shape(whole.reset, jax.random.key(0), ())
    _, ts = jax.eval_shape(whole.step, jax.random.key(1), state, jnp.zeros(1), ())
    for timestep in (first, ts):
        assert set(timestep.obs) == {"state", "privileged_state"}
        assert timestep.obs["privileged_state"].shape == (7,)
        assert timestep.final_obs["state"].shape == (5,)
    with pytest.raises(ConfigValueError, match="observation_key 'pixels' is not in"):
        envs.make(env_id, observation_key="pixels")


def test_names_and_errors():
    from podracer.envs.jax import playground

    assert set(playground.KNOWN) <= set(playground.names())
    assert "Go1JoystickFlatTerrain" in playground.names()
    with pytest.raises(ConfigValueError, match="Did you mean 'playground:CartpoleBalance'"):
        envs.make("playground:CartpoleBalanse")
    with pytest.raises(ConfigValueError, match="is not one of the playground: environments"):
        envs.make("playground:PandaPickCube")  # manipulation: not adapted
    with pytest.raises(ConfigValueError, match=r"do not fit its config: .*nope"):
        envs.make(f"playground:{NAME}", config_overrides={"nope": 1})
    with pytest.raises(ConfigValueError, match="impl must be 'jax' or 'warp'"):
        envs.make(f"playground:{NAME}", impl="cpp")
    with pytest.raises(ConfigValueError, match="disagree"):
        envs.make(f"playground:{NAME}", impl="warp", config_overrides={"impl": "jax"})
    with pytest.raises(ConfigValueError, match="at least 1"):
        envs.make(f"playground:{NAME}", episode_length=0)


def test_locomotion_without_menagerie_says_how_to_fetch_it():
    from mujoco_playground._src import mjx_env

    if mjx_env.MENAGERIE_PATH.exists():
        pytest.skip("MuJoCo Menagerie is installed")
    deps = mjx_env.EXTERNAL_DEPS_PATH.exists()
    with pytest.raises(ConfigValueError, match="needs the MuJoCo Menagerie"):
        envs.make("playground:Go1JoystickFlatTerrain")
    assert mjx_env.EXTERNAL_DEPS_PATH.exists() == deps  # no clone was started


@pytest.mark.slow
def test_a_run_checkpoints_and_resumes_exactly(tmp_path, one_device):
    """A training run on MuJoCo Playground with checkpoints (MJX's state holds arrays of no
    elements, which orbax refuses alone: podracer.runs.checkpoint stores them as nothing), resumed
    from its first checkpoint to the same params as the run that went straight on."""
    from resume_check import straight_and_resumed

    from podracer import runs
    from podracer.agents import PPOConfig
    from podracer.loops.anakin import AnakinConfig

    spec = runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env="playground:CartpoleBalance",
        seed=0,
        total_timesteps=4 * 4 * 8,
        agent_config=PPOConfig(
            num_epochs=1, num_minibatches=1, hidden_sizes=(16,), normalize_observations=True
        ),
        arch_config=AnakinConfig(num_envs=4, rollout_len=8, updates_per_call=2),
        options=runs.RunOptions(checkpoint_interval=2),
    )
    straight_and_resumed(spec, tmp_path, one_device, [2, 4])
