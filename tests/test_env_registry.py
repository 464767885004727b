"""The environment registry (podracer.envs.registry): one row per family. A family added the
documented way (one adapter module, one row) is made, stepped, typed for --env-param, stepped on
the host and trained through the normal entry points; the built-in rows answer what the former
if-chains and tables did."""

import sys
import textwrap

import jax
import numpy as np
import pytest

from podracer import envs
from podracer.envs import host as host_envs
from podracer.envs import registry
from podracer.envs.factory import param_defaults
from podracer.errors import ConfigValueError

ADAPTER = '''
"""A family of lines: ``line:<n>``, a walk from cell 0 to cell n - 1 (action 1 right, 0 left),
reward 1 at the end (terminated), truncated after ``max_steps``."""

import jax
import jax.numpy as jnp
from flax import struct

from podracer.types import DiscreteActionSpec, ObservationSpec, TimeStep


@struct.dataclass
class LineParams:
    max_steps: int = 20


@struct.dataclass
class LineState:
    cell: jax.Array
    steps: jax.Array


class Line:
    def __init__(self, env_id, length):
        self.id, self.length = env_id, length
        self.default_params = LineParams()
        self.observation_spec = ObservationSpec((length,), jnp.float32)
        self.action_spec = DiscreteActionSpec(2)

    def _obs(self, cell):
        return jax.nn.one_hot(cell, self.length, dtype=jnp.float32)

    def reset(self, key, params):
        del key, params
        state = LineState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        obs, false = self._obs(state.cell), jnp.zeros((), bool)
        return state, TimeStep(obs, jnp.zeros((), jnp.float32), false, false, obs)

    def step(self, key, state, action, params):
        cell = jnp.clip(state.cell + 2 * jnp.asarray(action, jnp.int32) - 1, 0, self.length - 1)
        steps = state.steps + 1
        terminated = cell == self.length - 1
        truncated = ~terminated & (steps >= params.max_steps)
        done = terminated | truncated
        final_obs = self._obs(cell)
        state = LineState(jnp.where(done, 0, cell), jnp.where(done, 0, steps))
        reward = terminated.astype(jnp.float32)
        return state, TimeStep(self._obs(state.cell), reward, terminated, truncated, final_obs)


def make(env_id, **kwargs):
    return Line(env_id, int(env_id.removeprefix("line:")), **kwargs)
'''


@pytest.fixture
def line_family(tmp_path, monkeypatch):
    """The adapter module ``line_adapter`` on sys.path and its one row, removed afterwards."""
    (tmp_path / "line_adapter.py").write_text(textwrap.dedent(ADAPTER))
    monkeypatch.syspath_prepend(str(tmp_path))
    row = registry.add(registry.Family("line:", jax="line_adapter:make", presets="line"))
    yield row
    registry.remove("line:")
    sys.modules.pop("line_adapter", None)


def test_a_family_added_by_one_row_is_made_stepped_and_typed(line_family):
    env = envs.make("line:3")
    assert env.id == "line:3" and env.action_spec.num_actions == 2
    params = env.default_params
    state, ts = env.reset(jax.random.key(0), params)
    for _ in range(2):
        state, ts = env.step(jax.random.key(1), state, 1, params)
    assert bool(ts.terminated) and float(ts.reward) == 1.0
    np.testing.assert_array_equal(ts.final_obs, [0, 0, 1])
    np.testing.assert_array_equal(ts.obs, [1, 0, 0])  # reset at the same step
    assert registry.preset_family("line:3") == "line"
    assert param_defaults("line:3") == {"max_steps": 20}
    short = envs.make_with_options("line:3", envs.EnvOptions(params={"max_steps": 1}))
    state, _ = short.reset(jax.random.key(0), short.default_params)
    _, ts = short.step(jax.random.key(2), state, 0, short.default_params)
    assert bool(ts.truncated)
    with pytest.raises(ValueError, match="built-in id"):
        envs.register("line:4", object)
    with pytest.raises(ValueError, match="overlaps"):
        registry.add(registry.Family("line:", jax="line_adapter:make"))


def test_a_family_without_a_host_maker_steps_on_the_host(line_family):
    env = host_envs.make("line:3", num_envs=2, seed=0)
    env.reset()
    for _ in range(2):
        ts = env.step(np.ones(2, np.int32))
    assert ts.terminated.tolist() == [True, True] and ts.info.episode_length.tolist() == [2, 2]
    env.close()


def test_ppo_trains_on_an_added_family(line_family, tmp_path):
    from podracer import runs
    from podracer.agents.ppo import PPOConfig
    from podracer.loops.anakin import AnakinConfig

    spec = runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env="line:4",
        seed=0,
        total_timesteps=4 * 16 * 3,
        agent_config=PPOConfig(),
        arch_config=AnakinConfig(num_envs=4, rollout_len=16),
        options=runs.RunOptions(tensorboard=False),
    )
    summary = runs.train(spec, str(tmp_path / "run"), console=False, devices=jax.devices()[:1])
    assert summary["total_steps"] == 4 * 16 * 3 and np.isfinite(summary["params_checksum"])


def test_the_built_in_rows():
    assert registry.host_prefixes() == ("envpool:", "gymnasium:")
    assert registry.family_of("catch").jax and registry.family_of("catchy") is None
    assert registry.family_of("my_envs:make_env") is None  # a module:attribute
    presets = {
        "envpool:HalfCheetah-v4": "mujoco",
        "gymnasium:Ant-v5": "mujoco",
        "gymnax:Breakout-MinAtar": "minatar",
        "gymnax:CartPole-v1": "classic_control",
        "envpool:Pendulum-v1": "classic_continuous",
        "brax:ant?backend=positional": "brax",
        "jumanji:Snake-v1": "snake",
        "jumanji:Maze-v0": "jumanji",
        "navix:Navix-Empty-5x5-v0": "minigrid",
        "xminigrid:MiniGrid-Empty-5x5": "minigrid",
        "trading:synthetic": "trading",
        "catch": "catch",
        "gymnax:MemoryChain-bsuite": None,
    }
    assert {env_id: registry.preset_family(env_id) for env_id in presets} == presets
    with pytest.raises(ConfigValueError, match="is a host environment"):
        envs.make("gymnasium:CartPole-v1")
    with pytest.raises(ValueError, match="neither a jax nor a host maker"):
        registry.add(registry.Family("nothing:"))
