"""A user's own agent and JAX environment, in a module outside podracer, trained from the command
line by import path (``--agent my_module:SPEC``, ``--env my_module:Corridor``) with what a
built-in one has: config flags, a run directory, resume, evaluation, sweeps and populations."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

MODULE = '''
"""A user's agent (a linear softmax policy with a linear value: A2C) and environment."""
import dataclasses
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from podracer.agents import AgentSpec, Space
from podracer.agents.policy import make_categorical_act, select
from podracer.agents.spec import num_actions
from podracer.util.validation import check_positive
from podracer.core.returns import gae
from podracer.types import Agent, DiscreteActionSpec, ObservationSpec, TimeStep


@dataclasses.dataclass(frozen=True)
class LinearConfig:
    lr: float = 0.05
    gamma: float = 0.9
    num_epochs: int = 1
    num_minibatches: int = 1

    def __post_init__(self):
        check_positive(self, "lr")


class Linear(nn.Module):
    actions: int

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.actions)(obs), nn.Dense(1)(obs)[..., 0]


class Batch(NamedTuple):
    obs: jax.Array
    action: jax.Array
    advantage: jax.Array
    target: jax.Array


def make_agent(config, action_spec, num_updates):
    del num_updates
    network = Linear(num_actions(action_spec, "linear"))

    def prepare(params, agent_state, traj, mean_fn):
        T, B = traj.reward.shape
        value = lambda o: network.apply(params, o.reshape(T * B, -1))[1].reshape(T, B)
        v_tm1, v_t = value(traj.obs), value(traj.bootstrap_obs)
        adv = gae(traj.reward, v_tm1, v_t, traj.terminated, traj.truncated, config.gamma, 1.0)
        batch = Batch(traj.obs, traj.action, adv, adv + v_tm1)
        return jax.tree.map(lambda x: x.reshape(T * B, *x.shape[2:]), batch)

    def loss(params, batch, key):
        logits, value = network.apply(params, batch.obs)
        log_prob = select(jax.nn.log_softmax(logits), batch.action)
        total = -jnp.mean(log_prob * batch.advantage) + jnp.mean((value - batch.target) ** 2)
        return total, {"loss": total}

    return Agent(
        init=lambda key, obs: network.init(key, obs[None]),
        act=make_categorical_act(network),
        prepare=prepare,
        loss=loss,
    )


SPEC = AgentSpec(
    name="linear",
    config_cls=LinearConfig,
    make_agent=make_agent,
    make_optimizer=lambda config, num_updates: optax.sgd(config.lr),
    default_env="my_module:Corridor",
    loop_defaults={"anakin": {"num_envs": 8, "rollout_len": 16}},
    search_space={"lr": Space(1e-4, 1.0, log=True), "gamma": Space(0.5, 0.999)},
)


@struct.dataclass
class State:
    position: jax.Array
    t: jax.Array


class Corridor:
    """Start at cell 0 of 4; action 1 moves right; the right end pays 1 (terminated); 10 steps
    truncate. The observation is the one-hot position."""

    id = "my_module:Corridor"
    default_params = None
    observation_spec = ObservationSpec((4,), jnp.dtype(jnp.float32))
    action_spec = DiscreteActionSpec(2)

    def reset(self, key, params):
        obs = jax.nn.one_hot(0, 4)
        false = jnp.zeros((), bool)
        return State(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)), TimeStep(
            obs, jnp.zeros(()), false, false, obs
        )

    def step(self, key, state, action, params):
        position = jnp.clip(state.position + 2 * action - 1, 0, 3)
        terminated = position == 3
        truncated = ~terminated & (state.t + 1 >= 10)
        final_obs = jax.nn.one_hot(position, 4)
        done = terminated | truncated
        fresh, ts = self.reset(key, params)
        stepped = State(position.astype(jnp.int32), state.t + 1)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)
        obs = jnp.where(done, ts.obs, final_obs)
        reward = terminated.astype(jnp.float32)
        return state, TimeStep(obs, reward, terminated, truncated, final_obs)
'''


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("user")
    (path / "my_module.py").write_text(textwrap.dedent(MODULE))
    return path


def podracer(cwd, *args, timeout=240):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = ""  # the module is found in the current directory, not on PYTHONPATH
    quiet = [] if args[0] == "eval" else ["--quiet"]
    if args[0] in ("train", "sweep") and "--resume" not in args:
        quiet.append("--no-tensorboard")
    proc = subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", *args, *quiet],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_user_agent_and_env_train_resume_and_evaluate(user_dir):
    (summary,) = podracer(
        user_dir,
        "train",
        "--agent",
        "my_module:SPEC",
        "--agent.lr",
        "0.1",
        "--total-timesteps",
        "12800",
        "--run-dir",
        "run",
        "--checkpoint-interval",
        "50",
    )
    assert summary["env"] == "my_module:Corridor" and summary["agent"] == "my_module:SPEC"
    assert summary["num_updates"] == 100  # 8 envs x 16 steps (the spec's loop defaults)
    # The optimum is 1 per episode; a random walk on 4 cells often hits the 10-step limit.
    assert summary["final_return"] >= 0.9
    config = json.loads((user_dir / "run" / "config.json").read_text())
    assert config["agent"] == "my_module:SPEC" and config["agent_config"]["lr"] == 0.1

    # Resumed from the checkpoint at update 50, the run ends where the uninterrupted one did.
    (resumed,) = podracer(
        user_dir, "train", "--resume", "run", "--resume-step", "50", "--total-timesteps", "12800"
    )
    assert resumed["start_update"] == 50
    assert resumed["params_checksum"] == summary["params_checksum"]

    (evaluation,) = podracer(user_dir, "eval", "run", "--episodes", "4")
    assert evaluation["mean"] == 1.0  # the greedy policy walks straight to the goal


@pytest.mark.slow
def test_user_agent_sweeps_and_populations(user_dir):
    rows = podracer(
        user_dir,
        "sweep",
        "--agent",
        "my_module:SPEC",
        "--seeds",
        "2",
        "--sweep.lr",
        "0.001,0.1",
        "--total-timesteps",
        "6400",
        "--run-dir",
        "sweep",
    )
    assert [row["lr"] for row in rows] == pytest.approx([0.001, 0.1])
    assert rows[1]["mean"] > rows[0]["mean"]  # lr 0.001 barely moves the policy in 50 updates

    (summary,) = podracer(
        user_dir,
        "train",
        "--agent",
        "my_module:SPEC",
        "--env",
        "my_module:Corridor",
        "--population",
        "4",
        "--population.hparams",
        "lr",
        "--population.init",
        "lr=0.001:0.3",
        "--population.interval",
        "10",
        "--total-timesteps",
        "6400",
        "--run-dir",
        "pop",
    )
    assert summary["population"] == 4 and len(summary["final_scores"]) == 4
    assert summary["final_best_score"] == 1.0


@pytest.mark.slow
def test_unknown_user_paths_are_one_line_errors(user_dir):
    for args, culprit in (
        (("--agent", "no_module:SPEC"), "no module named 'no_module'"),
        (("--agent", "my_module:NOPE"), "has no 'NOPE'"),
        (("--agent", "my_module:Corridor"), "is not an AgentSpec"),
        (("--env", "my_module:Missing"), "has no 'Missing'"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "podracer.cli.main", "train", *args, "--total-timesteps", "100"],
            cwd=user_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and culprit in lines[0], proc.stderr
