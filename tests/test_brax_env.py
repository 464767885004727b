"""brax environments (podracer.envs.jax.brax): TimeStep semantics checked against brax's own env,
options in the id, errors. brax:inverted_pendulum on the generalized backend keeps the compiles
short; it terminates within a few steps under a full push."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import envs
from podracer.envs.jax import brax as brax_envs
from podracer.errors import ConfigValueError
from podracer.types import BoundedActionSpec

brax = pytest.importorskip("brax")

ENV_ID = "brax:inverted_pendulum?backend=generalized&episode_length=5"


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def env():
    return envs.make(ENV_ID)


@pytest.fixture(scope="module")
def jitted(env):
    """The adapter's reset and step and brax's own, each compiled once for the module."""
    raw = env.unwrapped
    return jax.jit(env.reset), jax.jit(env.step), jax.jit(raw.reset), jax.jit(raw.step)


def terminating_state(env, jitted):
    """A state whose next step under action +1 terminates (the pole falls), and that step."""
    reset, step, _, _ = jitted
    state, _ = reset(jax.random.key(7), ())
    push = jnp.ones(1)
    for t in range(50):
        previous = state
        # steps held at 0: the time limit never cuts the search.
        state, ts = step(jax.random.key(t), state.replace(steps=jnp.int32(0)), push, ())
        if bool(ts.terminated):
            return previous
    raise AssertionError("the pendulum did not fall")


def test_specs_and_id(env):
    assert env.id == ENV_ID
    assert env.backend == "generalized" and env.episode_length == 5 and env.action_repeat == 1
    assert env.observation_spec.shape == (4,) and env.observation_spec.dtype == jnp.float32
    spec = env.action_spec
    assert isinstance(spec, BoundedActionSpec) and spec.shape == (1,) and spec.dtype == "float32"
    # inverted_pendulum maps [-1, 1] onto its actuator's control range [-3, 3] itself.
    assert np.asarray(env.unwrapped.sys.actuator.ctrl_range).tolist() == [[-3.0, 3.0]]
    assert isinstance(spec.low, np.ndarray) and spec.low.dtype == np.float32
    np.testing.assert_array_equal(spec.low, [-1.0])
    np.testing.assert_array_equal(spec.high, [1.0])
    assert env.default_params == ()


@pytest.mark.slow
def test_truncation_matches_brax(env, jitted):
    reset, step, raw_reset, raw_step = jitted
    state, ts = reset(jax.random.key(0), ())
    ref = raw_reset(jax.random.key(0))
    close(ts.obs, ref.obs)
    close(ts.final_obs, ref.obs)
    assert ts.reward.dtype == jnp.float32 and ts.reward.shape == ()
    assert not bool(ts.terminated | ts.truncated)
    for t in range(1, 6):
        action = jnp.array([0.1 * np.sin(t)], jnp.float32)
        key = jax.random.key(100 + t)
        state, ts = step(key, state, action, ())
        ref = raw_step(ref, action)
        assert ts.reward.dtype == jnp.float32 and ts.obs.dtype == jnp.float32
        close(ts.reward, ref.reward)
        close(ts.final_obs, ref.obs)  # the observation brax's env, never reset, gives
        assert not bool(ts.terminated) and not bool(ref.done)
        if t < 5:
            assert not bool(ts.truncated) and int(state.steps) == t
            close(ts.obs, ref.obs)
        else:  # truncated exactly at episode_length, and reset with a key split from the step's
            assert bool(ts.truncated) and int(state.steps) == 0
            fresh = raw_reset(jax.random.split(key)[1])
            close(ts.obs, fresh.obs)
            assert not np.allclose(ts.obs, ts.final_obs)
    # The episode goes on from the reset state.
    action = jnp.array([0.3], jnp.float32)
    state, ts = step(jax.random.key(200), state, action, ())
    close(ts.obs, raw_step(fresh, action).obs)
    assert int(state.steps) == 1 and not bool(ts.truncated)


def test_termination_on_the_time_limit_is_a_termination(env, jitted):
    _, step, raw_reset, raw_step = jitted
    before = terminating_state(env, jitted)
    push = jnp.ones(1)
    ref = raw_step(before.env_state, push)
    for steps in (0, 4):  # 4: this step also reaches episode_length 5
        key = jax.random.key(300 + steps)
        state, ts = step(key, before.replace(steps=jnp.int32(steps)), push, ())
        assert bool(ts.terminated) and not bool(ts.truncated)
        close(ts.final_obs, ref.obs)
        assert abs(float(ts.final_obs[1])) > 0.2  # the pole fell
        close(ts.obs, raw_reset(jax.random.split(key)[1]).obs)
        assert np.all(np.abs(np.asarray(ts.obs)) <= 0.01)  # a fresh episode
        close(ts.reward, ref.reward)
        assert int(state.steps) == 0


@pytest.mark.slow
def test_vmap_and_scan(env):
    num_envs, length = 4, 12

    @jax.jit
    def rollout(key):
        reset_key, run_key = jax.random.split(key)
        state, ts0 = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_envs), ()
        )

        def body(state, key):
            action_key, step_key = jax.random.split(key)
            actions = jax.random.uniform(action_key, (num_envs, 1), minval=-1.0, maxval=1.0)
            keys = jax.random.split(step_key, num_envs)
            return jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, ())

        state, ts = jax.lax.scan(body, state, jax.random.split(run_key, length))
        return ts0, ts

    ts0, ts = rollout(jax.random.key(1))
    assert ts0.obs.shape == (num_envs, 4)
    assert ts.obs.shape == (length, num_envs, 4) and ts.final_obs.shape == ts.obs.shape
    assert ts.reward.shape == (length, num_envs) and ts.reward.dtype == jnp.float32
    assert ts.terminated.dtype == jnp.bool_ and ts.truncated.dtype == jnp.bool_
    assert not np.any(ts.terminated & ts.truncated)
    done = np.asarray(ts.terminated | ts.truncated)
    obs, final = np.asarray(ts.obs), np.asarray(ts.final_obs)
    np.testing.assert_array_equal(obs[~done], final[~done])
    assert not np.any(np.all(obs[done] == final[done], axis=-1))
    assert np.any(ts.truncated)
    for i in range(num_envs):  # truncated exactly at the episode's fifth step, unless terminated
        steps = 0
        for t in range(length):
            steps += 1
            assert bool(ts.truncated[t, i]) == (steps == 5 and not bool(ts.terminated[t, i]))
            if done[t, i]:
                steps = 0


@pytest.mark.slow
def test_action_repeat_sums_rewards_and_stops_at_a_termination(env, jitted):
    _, _, raw_reset, raw_step = jitted
    options = {"backend": "generalized", "episode_length": 4, "action_repeat": 2}
    repeated = envs.make("brax:inverted_pendulum", **options)
    query = "&".join(f"{key}={value}" for key, value in options.items())
    assert repeated.id == f"brax:inverted_pendulum?{query}"
    step = jax.jit(repeated.step)
    state, ts = repeated.reset(jax.random.key(0), ())
    ref = raw_reset(jax.random.key(0))
    action = jnp.array([0.2], jnp.float32)
    for t in (1, 2):  # 2 x 2 brax steps: truncated at the second step
        state, ts = step(jax.random.key(t), state, action, ())
        first = raw_step(ref, action)
        ref = raw_step(first, action)
        close(ts.reward, first.reward + ref.reward)
        close(ts.final_obs, ref.obs)
        assert bool(ts.truncated) == (t == 2) and not bool(ts.terminated)

    # A termination on the first repeat: the second is not taken and its reward not added.
    before = terminating_state(env, jitted)
    push = jnp.ones(1)
    fell = raw_step(before.env_state, push)
    assert bool(fell.done)
    _, ts = step(jax.random.key(9), before.replace(steps=jnp.int32(0)), push, ())
    assert bool(ts.terminated) and not bool(ts.truncated)
    close(ts.reward, fell.reward)
    close(ts.final_obs, fell.obs)


def test_query_string_options_parse():
    name, options = brax_envs.parse_id(
        "brax:ant?backend=generalized&episode_length=100&action_repeat=2"
    )
    assert name == "ant"
    assert options == {"backend": "generalized", "episode_length": 100, "action_repeat": 2}
    assert isinstance(options["episode_length"], int)
    assert brax_envs.parse_id("brax:hopper") == ("hopper", {})

    env = envs.make("brax:ant?backend=positional&episode_length=100")
    assert env.id == "brax:ant?backend=positional&episode_length=100"
    assert (env.backend, env.episode_length, env.action_repeat) == ("positional", 100, 1)
    assert env.unwrapped.backend == "positional"
    assert env.observation_spec.shape == (27,) and env.action_spec.shape == (8,)
    np.testing.assert_array_equal(env.action_spec.low, -np.ones(8, np.float32))
    np.testing.assert_array_equal(env.action_spec.high, np.ones(8, np.float32))


def test_defaults():
    env = envs.make("brax:reacher")
    assert env.id == "brax:reacher"
    assert (env.backend, env.episode_length, env.action_repeat) == ("positional", 1000, 1)
    assert envs.make("brax:reacher", episode_length=7).id == "brax:reacher?episode_length=7"


def test_unknown_names_and_options_are_config_errors():
    with pytest.raises(ConfigValueError) as info:
        envs.make("brax:antt")
    message = str(info.value)
    assert "'antt'" in message and "Did you mean 'ant'" in message
    assert all(name in message for name in brax_envs.BRAX_IDS) and "\n" not in message

    with pytest.raises(ConfigValueError) as info:
        envs.make("brax:ant?episode_lenght=5")
    message = str(info.value)
    assert "'episode_lenght'" in message and "Did you mean 'episode_length'" in message
    assert "backend, episode_length, action_repeat" in message

    with pytest.raises(ConfigValueError, match="unknown brax environment 'nope'"):
        envs.make("brax:nope?backend=positional")
    with pytest.raises(ConfigValueError, match="episode_length='abc' is not an integer"):
        envs.make("brax:ant?episode_length=abc")
    with pytest.raises(ConfigValueError, match="action_repeat=0 is not allowed"):
        envs.make("brax:ant?action_repeat=0")
    with pytest.raises(ConfigValueError, match=r"backend 'positionl'. Did you mean 'positional'"):
        envs.make("brax:ant?backend=positionl")
    with pytest.raises(ConfigValueError, match="'backend' twice"):
        envs.make("brax:ant?backend=spring&backend=mjx")
    with pytest.raises(ConfigValueError, match="episode_length given both"):
        envs.make("brax:ant?episode_length=5", episode_length=6)
    with pytest.raises(ConfigValueError, match="unknown brax option 'n_frames'"):
        envs.make("brax:ant", n_frames=2)


def test_brax_ids_cover_brax_registry():
    from brax import envs as registry

    # fast: a test stub; swimmer: does not step with this jax (jnp.clip(a_min=...))
    assert set(brax_envs.BRAX_IDS) == set(registry._envs) - {"fast", "swimmer"}
    assert all(f"brax:{name}" in envs.KNOWN_IDS for name in brax_envs.BRAX_IDS)


def test_rescaled_envs_are_those_that_map_actions_onto_the_control_range():
    import inspect

    from brax import envs as registry

    rescaling = {
        name
        for name in brax_envs.BRAX_IDS
        if "ctrl_range" in inspect.getsource(registry._envs[name].step)
    }
    assert rescaling == set(brax_envs.RESCALED)


def test_podracer_envs_imports_brax_only_for_a_brax_id():
    code = "import sys, podracer.envs; assert 'brax' not in sys.modules, 'brax imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def lower_in_shard_map(env):
    """Traces and lowers reset and step of 2 environments inside shard_map (as Anakin runs
    them) on a 1-device mesh; no compile."""
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((1,), ("data",))

    def run(keys):
        state, _ = jax.vmap(env.reset, in_axes=(0, None))(keys, ())
        actions = jnp.zeros((keys.shape[0], *env.action_spec.shape))
        _, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, ())
        return ts.reward

    spec = PartitionSpec("data")
    sharded = jax.shard_map(run, mesh=mesh, in_specs=spec, out_specs=spec)
    keys = jax.device_put(jax.random.split(jax.random.key(0), 2), NamedSharding(mesh, spec))
    return jax.jit(sharded).lower(keys)


def test_default_backend_runs_in_shard_map_and_generalized_says_why_not(env):
    lower_in_shard_map(envs.make("brax:inverted_pendulum"))  # positional
    with pytest.raises(ConfigValueError, match="'generalized' pipeline does not trace inside"):
        lower_in_shard_map(env)
