"""Environment options (``--env-param``, ``--env-observe``): the values reach the environment
every loop builds (Anakin's, a JAX environment on Sebulba's host, envpool), the mask keeps
exactly the chosen columns of ``obs`` and ``final_obs``, and the probe of each loop sees what
the run's environments are."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import agents, envs, loops
from podracer.agents import PPOConfig
from podracer.envs import EnvOptions
from podracer.envs import host as host_envs
from podracer.envs.factory import param_defaults, resolve
from podracer.envs.options import as_options
from podracer.errors import ConfigError
from podracer.loops import anakin
from podracer.loops.sebulba import SebulbaConfig
from podracer.loops.sebulba.loop import env_factory, probe
from podracer.types import ObservationSpec

PPO = agents.get("ppo")
MEMORY = "gymnax:MemoryChain-bsuite"
LONG_MEMORY = EnvOptions(params={"memory_length": 10})
POSITIONS = EnvOptions(observe=(0, 2))  # CartPole's cart position and pole angle


def episode_lengths(env, num_envs: int, steps: int, action: int = 0, seed: int = 0):
    """``[steps, num_envs]`` episode lengths (0 where no episode ended) of a JAX environment
    stepped under ``jit`` with a constant action, its ``default_params`` as the loops use them."""
    env = envs.EpisodeStatistics(env)
    params = env.default_params

    @jax.jit
    def run(key):
        state, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def one(state, key):
            keys = jax.random.split(key, num_envs)
            actions = jnp.full((num_envs,), action, jnp.int32)
            state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, params)
            return state, ts

        _, ts = jax.lax.scan(one, state, jax.random.split(jax.random.fold_in(key, 1), steps))
        return ts

    return run(jax.random.key(seed))


def test_memory_length_changes_memory_chain_in_anakin():
    """MemoryChain's episode lasts ``memory_length + 1`` steps: 6 by default, 11 with
    ``memory_length=10``, in the environment Anakin's recipe builds (``recipe.make_env``)."""
    lengths = {}
    for name, options in (("default", EnvOptions()), ("long", LONG_MEMORY)):
        system = loops.build(
            "anakin",
            MEMORY,
            PPOConfig(),
            anakin.AnakinConfig(num_envs=2, rollout_len=8),
            total_timesteps=16,
            devices=jax.devices()[:1],
            env_options=options,
        )
        assert system.recipe.env_options == options
        env = system.recipe.make_env()
        ts = episode_lengths(env, num_envs=2, steps=24)
        ended = np.asarray(ts.info.episode_length)[np.asarray(ts.info.done)]
        lengths[name] = sorted(set(ended.tolist()))
        # the episode ends on steps L, 2L, ... of every environment
        length = lengths[name][0]
        done_steps = np.nonzero(np.asarray(ts.done)[:, 0])[0] + 1
        np.testing.assert_array_equal(done_steps, np.arange(length, 25, length))
    assert lengths == {"default": [6], "long": [11]}
    assert system.recipe.make_env().default_params.memory_length == 10


def test_memory_length_changes_memory_chain_on_sebulbas_host():
    """The same on a JAX environment stepped on Sebulba's host: the actors' factory
    (``sebulba.train.env_factory``, given the recipe's options) builds 11-step episodes."""
    config = SebulbaConfig(envs_per_actor=2, rollout_len=4)
    for options, length in ((EnvOptions(), 6), (LONG_MEMORY, 11)):
        env = env_factory(MEMORY, config, 0, options)(0)
        env.reset()
        done_at = []
        for t in range(1, 23):
            ts = env.step(np.zeros(2, np.int32))
            if ts.done.any():
                assert ts.done.all()
                np.testing.assert_array_equal(ts.info.episode_length, [length, length])
                done_at.append(t)
        env.close()
        assert done_at == list(range(length, 23, length))


def test_env_param_values_are_typed_by_the_defaults():
    typed = resolve(MEMORY, EnvOptions(params={"memory_length": "10"}))
    assert typed.params == (("memory_length", 10),)
    pendulum = resolve("gymnax:Pendulum-v1", {"max_torque": "1", "g": 9})
    assert pendulum.param_dict == {"g": 9.0, "max_torque": 1.0}
    assert isinstance(pendulum.param_dict["g"], float)
    env = envs.make_with_options("gymnax:Pendulum-v1", pendulum)
    assert float(env.default_params.max_torque) == 1.0
    np.testing.assert_array_equal(env.action_spec.high, [1.0])  # the spec follows the params
    gym = param_defaults("gymnasium:CartPole-v1")
    assert gym["sutton_barto_reward"] is False and gym["max_episode_steps"] == 500
    for text, value in (("true", True), ("1", True), ("False", False), ("0", False)):
        flag = resolve("gymnasium:CartPole-v1", {"sutton_barto_reward": text})
        assert flag.param_dict == {"sutton_barto_reward": value}
    with pytest.raises(ConfigError, match=r"sutton_barto_reward=2 is not allowed.*true or false"):
        resolve("gymnasium:CartPole-v1", {"sutton_barto_reward": "2"})
    with pytest.raises(ConfigError, match=r"memory_length=2.5 is not allowed.*takes an integer"):
        resolve(MEMORY, {"memory_length": 2.5})
    assert param_defaults("envpool:CartPole-v1") == {
        "max_episode_steps": 500,
        "thread_affinity_offset": -1,
    }


def test_env_options_are_a_hashable_value():
    a = EnvOptions(params={"b": 1, "a": 2.0}, observe=[0, 2])
    b = EnvOptions(params=(("a", 2.0), ("b", 1)), observe=(0, 2))
    assert a == b and hash(a) == hash(b) and a.params == (("a", 2.0), ("b", 1))
    assert EnvOptions.from_dict(a.to_dict()) == a
    assert a.to_dict() == {"params": {"a": 2.0, "b": 1}, "observe": [0, 2]}
    assert EnvOptions().empty and not a.empty
    assert a.merged({"b": 3}, observe=(1,)) == EnvOptions(params={"a": 2.0, "b": 3}, observe=(1,))
    with pytest.raises(ConfigError, match="--env-observe 1,1 is not allowed: index 1 is given"):
        EnvOptions(observe=(1, 1))
    with pytest.raises(ConfigError, match="--env-observe 0,-1 is not allowed: index -1"):
        EnvOptions(observe=(0, -1))
    with pytest.raises(ConfigError, match="a value is an int, float, bool or str"):
        EnvOptions(params={"x": [1, 2]})


# --- the observation mask ------------------------------------------------------------------


def test_observe_keeps_cartpole_columns_on_a_jax_env():
    """Same seed and actions: the masked CartPole's ``obs`` and ``final_obs`` are the unmasked
    ones' columns 0 and 2 at every step, episode ends included."""
    full = episode_lengths(envs.make("gymnax:CartPole-v1"), num_envs=4, steps=40)
    masked_env = envs.make_with_options("gymnax:CartPole-v1", POSITIONS)
    assert masked_env.observation_spec == ObservationSpec((2,), np.dtype(np.float32))
    masked = episode_lengths(masked_env, num_envs=4, steps=40)
    assert np.asarray(full.done).sum() >= 8  # constant pushes: episodes of about 10 steps
    assert masked.obs.shape == masked.final_obs.shape == (40, 4, 2)
    np.testing.assert_array_equal(masked.obs, np.asarray(full.obs)[..., [0, 2]])
    np.testing.assert_array_equal(masked.final_obs, np.asarray(full.final_obs)[..., [0, 2]])
    done = np.asarray(full.done)
    assert not np.array_equal(np.asarray(masked.obs)[done], np.asarray(masked.final_obs)[done])
    np.testing.assert_array_equal(masked.reward, full.reward)
    np.testing.assert_array_equal(masked.done, full.done)


def host_rollout(env, steps):
    ts = [env.reset()]
    for _ in range(steps):
        ts.append(env.step(np.zeros(env.num_envs, np.int32)))
    env.close()
    return ts


@pytest.mark.parametrize(
    "env_id", ["envpool:CartPole-v1", "gymnasium:CartPole-v1", "gymnax:CartPole-v1"]
)
def test_observe_keeps_cartpole_columns_on_a_host_env(env_id):
    """The same on Sebulba's host environments: envpool and gymnasium (masked on the host)
    and a JAX environment on the host (masked on device)."""
    full = host_rollout(host_envs.make(env_id, num_envs=4, seed=3), 40)
    env = host_envs.make(env_id, num_envs=4, seed=3, env_options=POSITIONS)
    assert env.observation_spec == ObservationSpec((2,), np.dtype(np.float32))
    masked = host_rollout(env, 40)
    assert sum(int(t.done.sum()) for t in full) >= 8
    for a, b in zip(full, masked, strict=True):
        assert b.obs.shape == b.final_obs.shape == (4, 2)
        np.testing.assert_array_equal(b.obs, a.obs[:, [0, 2]])
        np.testing.assert_array_equal(b.final_obs, a.final_obs[:, [0, 2]])
        np.testing.assert_array_equal(b.info.episode_length, a.info.episode_length)


def test_observe_masks_envpool_in_async_mode():
    """Async ``recv``: each env's masked rows are its unmasked rows' columns 0 and 2 (constant
    actions, so each env's trajectory depends only on the seed, not on the order of ``recv``)."""

    def by_env(options):
        env = host_envs.make(
            "envpool:CartPole-v1", num_envs=4, batch_size=2, seed=5, env_options=options
        )
        rows = {i: [] for i in range(4)}
        env.async_reset()
        for _ in range(60):
            ts, ids = env.recv()
            for j, i in enumerate(ids):
                rows[int(i)].append((ts.obs[j], ts.final_obs[j]))
            env.send(np.zeros(len(ids), np.int32), ids)
        env.close()
        return rows

    full, masked = by_env(EnvOptions()), by_env(POSITIONS)
    for i in range(4):
        n = min(len(full[i]), len(masked[i]))  # rows of env i in both runs, in its own order
        assert n >= 10, (i, len(full[i]), len(masked[i]))
        for (obs, final), (m_obs, m_final) in zip(full[i][:n], masked[i][:n], strict=True):
            np.testing.assert_array_equal(m_obs, obs[[0, 2]])
            np.testing.assert_array_equal(m_final, final[[0, 2]])


def test_every_probe_builds_with_the_runs_options():
    """Each loop's probe sees the environment its systems build (Sebulba's probe used to
    ignore the options its actors were given)."""
    two = ObservationSpec((2,), np.dtype(np.float32))
    config = SebulbaConfig(envs_per_actor=2)
    assert probe("envpool:CartPole-v1", config, 0, POSITIONS).observation == two
    assert probe("gymnax:CartPole-v1", config, 0, POSITIONS).observation == two
    config = anakin.AnakinConfig()
    assert anakin.probe("gymnax:CartPole-v1", config, 0, POSITIONS).observation == two
    recipe = loops.make_recipe(
        loops.get("sebulba"),
        "envpool:CartPole-v1",
        PPO,
        PPOConfig(),
        SebulbaConfig(envs_per_actor=2),
        total_timesteps=1000,
        env_options=POSITIONS,
    )
    assert recipe.env_spec.observation == two and recipe.env_options == POSITIONS
    # the legacy mapping of a host environment's options is its params, made EnvOptions at the
    # edge (as_options); the loops take EnvOptions only
    recipe = loops.make_recipe(
        loops.get("sebulba"),
        "envpool:CartPole-v1",
        PPO,
        PPOConfig(),
        SebulbaConfig(envs_per_actor=2),
        total_timesteps=1000,
        env_options=as_options({"max_episode_steps": 20}),
    )
    assert recipe.env_options == EnvOptions(params={"max_episode_steps": 20})
    env = env_factory(recipe.env_id, SebulbaConfig(envs_per_actor=1), 0, EnvOptions())(0)
    env.close()
    with pytest.raises(TypeError, match=r"env_options=\{'max_episode_steps': 20\} is not allowed"):
        env_factory("envpool:CartPole-v1", SebulbaConfig(), 0, {"max_episode_steps": 20})


def test_envpool_time_limit_from_env_options():
    """``--env-param max_episode_steps=20`` on envpool: a balanced pole is cut at step 20."""
    env = host_envs.make(
        "envpool:CartPole-v1", num_envs=2, seed=0, env_options={"max_episode_steps": "20"}
    )
    ts = env.reset()
    for t in range(1, 21):
        obs = ts.obs
        ts = env.step((obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int32))
        assert bool(ts.truncated.all()) == (t == 20), t
    env.close()


def test_image_observations_cannot_be_masked():
    with pytest.raises(ConfigError, match=r"--env-observe 0,2 is not allowed.*\(10, 5\)"):
        envs.make_with_options("catch", POSITIONS)
    with pytest.raises(ConfigError, match=r"--env-observe 0,2 .*\(4, 84, 84\).*1-D"):
        host_envs.make("envpool:Breakout-v5", num_envs=1, env_options=POSITIONS)


def test_catch_params_resize_the_board():
    env = envs.make_with_options("catch", {"rows": 6, "columns": 3})
    assert env.observation_spec.shape == (6, 3)
    assert (env.default_params.rows, env.default_params.columns) == (6, 3)


@pytest.mark.slow
def test_anakin_trains_and_evaluates_on_the_masked_environment():
    """Anakin's rollout and evaluator build the masked CartPole (``recipe.make_env``): the
    network takes 2 inputs, one update runs, and the evaluator's episodes (greedy, untrained)
    end within CartPole's limits."""
    system = anakin.build(
        "gymnax:CartPole-v1",
        PPOConfig(num_minibatches=1, hidden_sizes=(8,)),
        anakin.AnakinConfig(num_envs=2, rollout_len=8),
        total_timesteps=16,
        devices=jax.devices()[:1],
        env_options=POSITIONS,
    )
    state = system.init(0)
    shapes = {x.shape for x in jax.tree.leaves(state.learner.params)}
    assert (1, 2, 8) in shapes and (1, 4, 8) not in shapes  # [seeds, inputs, hidden]
    result = system.run(state, seed=0)
    assert result.summary["num_updates"] == 1
    returns = system.evaluator(seed=0, episodes=2, greedy=True)(result.state, 1)
    assert returns.shape == (1, 2) and np.all((returns >= 8) & (returns <= 500))
