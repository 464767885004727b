"""POPGym Arcade through podracer's adapter (podracer.envs.jax.popgym_arcade): 200 steps of 4
environments equal POPGym Arcade's own reset_env / step_env driven here with the adapter's key
convention and same-step auto-reset; the adapter under jit(vmap) and inside an unchecked
shard_map, as Anakin runs it (and its one-line error where POPGym Arcade's code fails a checked
one); the time-limit rule of Breakout; specs, options and errors.

CountRecallEasy, partially observable (26 cards to answer, a 126-step limit), with random
actions that confirm (fire) with probability 1/2 in two environments, which answer every card
before the limit (terminations), and 1/10 in the other two, which run out of time
(truncations). The images are compared inside the program (equal or not, per step), so that
4 x 200 of them do not cross to the host."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from podracer import envs
from podracer.errors import ConfigValueError
from podracer.types import DiscreteActionSpec, ObservationSpec

popgym_arcade = pytest.importorskip("popgym_arcade")

NAME = "CountRecallEasy"
FIRE = 4
FIRE_PROBS = jnp.array([0.5, 0.5, 0.1, 0.1])
N, STEPS = 4, 200


@pytest.fixture(scope="module")
def env():
    return envs.make(f"popgym_arcade:{NAME}", partial_obs=True)  # no history drawn: quicker


def inputs():
    """Reset keys [N], step keys [STEPS, N] and actions [STEPS, N] (fire with FIRE_PROBS, else
    one of the other four uniformly)."""
    reset_key, step_key, fire_key, other_key = jax.random.split(jax.random.key(7), 4)
    fire = jax.random.uniform(fire_key, (STEPS, N)) < FIRE_PROBS
    other = jax.random.randint(other_key, (STEPS, N), 0, FIRE, jnp.int32)
    return (
        jax.random.split(reset_key, N),
        jax.random.split(step_key, (STEPS, N)),
        jnp.where(fire, FIRE, other),
    )


def adapter_rollout(env):
    """Resets ``[N]`` and scans ``STEPS`` steps of the adapter (not jitted: the caller wraps);
    the observations whole, or only whether each equals its final_obs."""

    def rollout(reset_keys, step_keys, actions, *, whole=True):
        params = env.default_params
        state, first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)

        def body(state, x):
            key, action = x
            state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(key, state, action, params)
            if not whole:
                same = jnp.all(ts.obs == ts.final_obs, axis=(1, 2, 3))
                ts = ts._replace(obs=jnp.zeros(N, jnp.uint8), final_obs=same)
            return state, ts

        _, traj = jax.lax.scan(body, state, (step_keys, actions))
        return first, traj

    return rollout


def library_rollout(game, params):
    """POPGym Arcade's own reset_env / step_env, auto-reset here where its info says the
    episode terminated or was truncated (step_env gets the first half of the step's key,
    reset_env the second)."""

    def step(key, state, action):
        step_key, reset_key = jax.random.split(key)
        obs, stepped, reward, done, info = game.step_env(step_key, state, action, params)
        ended = info["terminated"] | info["truncated"]
        fresh_obs, fresh = game.reset_env(reset_key, params)
        pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(ended, x, y), a, b)  # noqa: E731
        state, next_obs = pick((fresh, fresh_obs), (stepped, obs))
        return state, {
            "obs": next_obs,
            "final_obs": obs,
            "reward": reward,
            "done": done,
            "terminated": info["terminated"],
            "truncated": info["truncated"] & ~info["terminated"],
        }

    def rollout(reset_keys, step_keys, actions):
        first_obs, state = jax.vmap(game.reset_env, in_axes=(0, None))(reset_keys, params)

        def body(state, x):
            return jax.vmap(step)(x[0], state, x[1])

        _, traj = jax.lax.scan(body, state, (step_keys, actions))
        return first_obs, traj

    return rollout


@pytest.fixture(scope="module")
def rollouts(env):
    """Both rollouts in one program (one compilation), the images compared inside it."""
    ours, theirs = adapter_rollout(env), library_rollout(env.unwrapped, env.default_params)

    def compare(*args):
        (first, traj), (lib_first, lib) = ours(*args), theirs(*args)
        images = {
            "first": jnp.all(first.obs == lib_first, axis=(1, 2, 3)),
            "first_final": jnp.all(first.final_obs == lib_first, axis=(1, 2, 3)),
            "obs": jnp.all(traj.obs == lib["obs"], axis=(2, 3, 4)),
            "final_obs": jnp.all(traj.final_obs == lib["final_obs"], axis=(2, 3, 4)),
            "obs_is_final": jnp.all(traj.obs == traj.final_obs, axis=(2, 3, 4)),
            "first_shape": first.obs[0],
        }
        first = first._replace(obs=(), final_obs=())
        traj = traj._replace(obs=(), final_obs=())
        lib = {k: v for k, v in lib.items() if k not in ("obs", "final_obs")}
        return images, first, traj, lib

    args = inputs()
    return args, jax.jit(compare)(*args)


@pytest.mark.slow
def test_parity_with_popgym_arcade_over_auto_resets(rollouts):
    _, (images, first, traj, lib) = rollouts
    for name in ("first", "first_final", "obs", "final_obs"):
        assert np.asarray(images[name]).all(), name
    assert not first.terminated.any() and not first.truncated.any()
    assert first.reward.dtype == jnp.float32 and not first.reward.any()

    np.testing.assert_allclose(traj.reward, lib["reward"], rtol=1e-6)
    np.testing.assert_array_equal(traj.terminated, lib["terminated"])
    np.testing.assert_array_equal(traj.truncated, lib["truncated"])
    np.testing.assert_array_equal(traj.terminated | traj.truncated, lib["done"])
    assert traj.reward.dtype == jnp.float32
    assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_

    # Episodes ended both ways, so the comparison went across auto-resets: the confirming
    # environments answer all 26 cards, the others reach the 126-step limit.
    terminated, truncated = np.asarray(traj.terminated), np.asarray(traj.truncated)
    assert terminated[:, :2].sum() >= 4 and truncated[:, 2:].sum() >= 2
    assert not (terminated & truncated).any()
    assert traj.reward.any()
    limit = 100 + 26  # CountRecallEasy's max_steps_in_episode
    for env_index in range(N):
        done = terminated[:, env_index] | truncated[:, env_index]
        ends = np.flatnonzero(done)
        lengths = np.diff(np.concatenate([[-1], ends]))
        assert (lengths[truncated[ends, env_index]] == limit).all()
        assert (lengths[terminated[ends, env_index]] < limit).all()
    # final_obs is obs where the episode goes on; at an end it is the ended episode's last one.
    done = terminated | truncated
    same = np.asarray(images["obs_is_final"])
    assert same[~done].all()
    assert not same[done].any()


def sharded_rollout(env, check_vma):
    mesh = jax.make_mesh((1,), ("data",))
    batch, time_batch = P("data"), P(None, "data")
    specs = (batch, time_batch, time_batch)
    rollout = adapter_rollout(env)
    sharded = jax.jit(
        jax.shard_map(
            lambda *args: rollout(*args, whole=False),
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


def test_runs_inside_shard_map_as_under_jit(env, rollouts):
    """Unchecked, as Anakin runs it (the environment's check_vma = False); CountRecall traces
    in a checked shard_map too."""
    from podracer.envs import EpisodeStatistics
    from podracer.loops.anakin import env_checks_vma

    assert env.check_vma is False and not env_checks_vma(EpisodeStatistics(env))
    _, (images, first, traj, _) = rollouts
    sharded, placed = sharded_rollout(env, check_vma=False)
    sharded_first, sharded_traj = sharded(*placed)
    np.testing.assert_array_equal(sharded_traj.final_obs, images["obs_is_final"])
    for name in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(sharded_traj, name), getattr(traj, name))
        np.testing.assert_array_equal(getattr(sharded_first, name), getattr(first, name))
    checked, placed = sharded_rollout(env, check_vma=True)
    jax.eval_shape(checked, *placed)


def test_a_library_that_fails_a_checked_shard_map_is_reported_in_one_line():
    """MineSweeper's jitted render under vmap fails inside a checked shard_map (JAX's "pvary is
    a invariant->variant collective"), which the adapter names in one line; unchecked, it
    traces."""
    env = envs.make("popgym_arcade:MineSweeperEasy")
    sharded, placed = sharded_rollout(env, check_vma=True)
    with pytest.raises(ConfigValueError, match=r"trace inside a jax\.shard_map") as error:
        jax.eval_shape(sharded, *placed)
    assert "\n" not in str(error.value) and "popgym_arcade:MineSweeperEasy" in str(error.value)
    assert "check_vma=False" in str(error.value)
    sharded, placed = sharded_rollout(env, check_vma=False)
    jax.eval_shape(sharded, *placed)


def test_breakout_time_limit_is_a_truncation():
    """Breakout's info["terminated"] includes its time limit (params.max_steps_in_episode);
    the adapter reads an episode that reaches it as truncated, from the params it is given."""
    game = envs.make("popgym_arcade:BreakoutEasy")
    assert game.default_params.max_steps_in_episode == 2000
    params = game.default_params.replace(max_steps_in_episode=3)
    short = game.with_params(params)
    assert short.default_params is params and game.default_params is not params

    def run(key):
        state, _ = short.reset(key, params)

        def body(state, step_key):
            state, ts = short.step(step_key, state, jnp.int32(4), params)
            return state, (ts.terminated, ts.truncated)

        return jax.lax.scan(body, state, jax.random.split(key, 4))[1]

    terminated, truncated = jax.jit(run)(jax.random.key(0))
    np.testing.assert_array_equal(terminated, [False] * 4)  # the ball is not lost so soon
    np.testing.assert_array_equal(truncated, [False, False, True, False])  # and reset


@pytest.mark.slow
def test_specs_and_options(env, rollouts):
    _, (images, _, _, _) = rollouts
    assert env.id == f"popgym_arcade:{NAME}"
    assert repr(env) == f"PopGymArcadeEnvironment('popgym_arcade:{NAME}')"
    assert env.action_spec == DiscreteActionSpec(5)
    assert env.observation_spec == ObservationSpec((128, 128, 3), jnp.dtype(jnp.uint8))
    first = images["first_shape"]
    assert first.shape == env.observation_spec.shape and first.dtype == jnp.uint8
    assert type(env.default_params).__name__ == "EnvParams"
    assert env.unwrapped.partial_obs
    # The class's options: the image side.
    big = envs.make("popgym_arcade:MineSweeperEasy", obs_size=256)
    assert big.observation_spec == ObservationSpec((256, 256, 3), jnp.dtype(jnp.uint8))
    assert big.action_spec == DiscreteActionSpec(5) and not big.unwrapped.partial_obs
    _, ts = jax.eval_shape(big.reset, jax.random.key(0), big.default_params)
    assert (ts.obs.shape, ts.obs.dtype) == big.observation_spec
    with pytest.raises(ConfigValueError, match="obs_size=64; POPGym Arcade draws images"):
        envs.make(f"popgym_arcade:{NAME}", obs_size=64)
    with pytest.raises(ConfigValueError, match="unexpected keyword argument 'time_limit'"):
        envs.make(f"popgym_arcade:{NAME}", time_limit=5)


def test_names_and_errors(monkeypatch):
    from podracer.envs.jax import popgym_arcade as arcade_envs

    assert set(arcade_envs.KNOWN) <= set(arcade_envs.names()) and len(arcade_envs.names()) == 30
    with pytest.raises(ConfigValueError, match="Did you mean 'popgym_arcade:CountRecallEasy'"):
        envs.make("popgym_arcade:CountRecalEasy")
    monkeypatch.setitem(sys.modules, "popgym_arcade", None)
    with pytest.raises(ConfigValueError) as error:
        envs.make(f"popgym_arcade:{NAME}")
    assert "pip install --no-deps -r requirements/popgym-arcade.txt" in str(error.value)
    assert "\n" not in str(error.value)
