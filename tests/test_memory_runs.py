"""Memory through the run layer: exact resume with carries (Anakin recurrent PPO and DQN with
sequence replay, Sebulba deterministic mode), a population whose members keep their own carries,
and learning on MemoryChain (with memory against without)."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from podracer import runs
from podracer.agents import DQNConfig, PPOConfig
from podracer.envs import EnvOptions
from podracer.loops.anakin import AnakinConfig
from podracer.loops.common import params_checksum
from podracer.loops.sebulba import SebulbaConfig
from podracer.runs.checkpoint import Checkpointer, to_raw

MEMORY_CHAIN = "gymnax:MemoryChain-bsuite"


def latest_state(spec, run_dir, devices):
    template = runs.build_system(spec, devices).init(spec.seed)
    with Checkpointer(run_dir) as checkpointer:
        state, meta = checkpointer.restore(template)
    return state, meta


@pytest.mark.slow
@pytest.mark.parametrize(
    "agent, agent_config",
    [
        ("ppo", PPOConfig(memory="gru", memory_size=16, hidden_sizes=(16,), num_minibatches=2)),
        (
            "dqn",
            DQNConfig(
                memory="lstm",
                memory_size=8,
                hidden_sizes=(16,),
                buffer_size=256,
                batch_size=16,
                learning_starts=64,
                burn_in=2,
                sequence_length=4,
                prioritised=True,
            ),
        ),
    ],
    ids=["ppo-gru", "dqn-lstm"],
)
def test_anakin_resume_with_memory_is_bitwise_exact(tmp_path, agent, agent_config):
    """A run stopped at update 4 and resumed ends bitwise where the straight run ends: params,
    optimizer state, the replay's windows and priorities, and the actors' carries."""
    one = jax.devices()[:1]
    spec = runs.RunSpec(
        arch="anakin",
        agent=agent,
        env=MEMORY_CHAIN,
        seed=1,
        total_timesteps=8 * 4 * 16,
        agent_config=agent_config,
        arch_config=AnakinConfig(num_envs=4, rollout_len=16, updates_per_call=2),
        options=runs.RunOptions(checkpoint_interval=4, eval_interval=0, tensorboard=False),
        env_options=EnvOptions(params={"memory_length": 3}),
    )
    straight = str(tmp_path / "straight")
    summary = runs.train(spec, straight, console=False, devices=one)
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "8"))
    again = runs.train(spec, resumed, resume=True, console=False, devices=one)
    assert again["start_update"] == 4
    assert again["params_checksum"] == summary["params_checksum"]
    a, _ = latest_state(spec, straight, one)
    b, _ = latest_state(spec, resumed, one)
    carries = jax.tree.leaves(a.rollout.actor_state)
    assert carries and np.abs(np.asarray(carries[0])).max() > 0  # the carries were saved
    if agent == "dqn":
        assert int(np.sum(np.asarray(a.learner.replay.priorities) > 0)) > 0
        assert len(set(np.asarray(a.learner.replay.priorities).ravel().tolist())) > 2
    for x, y in zip(jax.tree.leaves(to_raw(a)), jax.tree.leaves(to_raw(b)), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_sebulba_resume_with_memory_restores_the_uninterrupted_state(tmp_path, two_devices):
    """Deterministic Sebulba with a recurrent agent: the checkpoint of a run stopped at update 2
    is bitwise the uninterrupted run's state at update 2 (the actors' carries start afresh with
    their environments, as every Sebulba resume does)."""
    spec = runs.RunSpec(
        arch="sebulba",
        agent="ppo",
        env="envpool:CartPole-v1",
        seed=0,
        total_timesteps=4 * 8 * 16,
        agent_config=PPOConfig(
            memory="gru", memory_size=8, num_minibatches=2, hidden_sizes=(16,), anneal_lr=False
        ),
        arch_config=SebulbaConfig(
            learner_device_ids=(1,), envs_per_actor=8, rollout_len=16, deterministic=True
        ),
        options=runs.RunOptions(tensorboard=False, checkpoint_interval=2, keep_checkpoints=4),
    )
    whole = str(tmp_path / "whole")
    runs.train(spec, whole, console=False, devices=two_devices)
    interrupted = str(tmp_path / "interrupted")
    runs.train(
        dataclasses.replace(spec, total_timesteps=2 * 8 * 16),
        interrupted,
        console=False,
        devices=two_devices,
    )
    template = runs.build_system(spec, two_devices).init(spec.seed)
    with Checkpointer(whole) as checkpointer:
        uninterrupted, _ = checkpointer.restore(template, 2)
    with Checkpointer(interrupted) as checkpointer:
        saved, meta = checkpointer.restore(template)
    assert meta["updates"] == 2
    for x, y in zip(
        jax.tree.leaves(to_raw(uninterrupted)), jax.tree.leaves(to_raw(saved)), strict=True
    ):
        np.testing.assert_array_equal(x, y)
    resumed = runs.train(spec, interrupted, resume=True, console=False, devices=two_devices)
    assert resumed["start_update"] == 2
    with Checkpointer(interrupted) as checkpointer:
        final, _ = checkpointer.restore(template)
    assert params_checksum(final.learner.params) == resumed["params_checksum"]


@pytest.mark.slow
def test_a_population_with_memory_keeps_each_members_carries(tmp_path):
    """A tournament over recurrent PPO members: each member acts with its own carries (the
    state holds [members, envs, memory]), and greedy evaluation runs with carries."""
    from podracer.population.ensemble import PopulationConfig

    spec = runs.RunSpec(
        arch="anakin",
        agent="ppo",
        env=MEMORY_CHAIN,
        seed=0,
        total_timesteps=4 * 4 * 16,
        agent_config=PPOConfig(memory="gru", memory_size=8, hidden_sizes=(16,)),
        arch_config=AnakinConfig(num_envs=4, rollout_len=16, num_seeds=4),
        options=runs.RunOptions(tensorboard=False, eval_interval=2, eval_episodes=2),
        population=PopulationConfig(
            size=4, interval=2, init=("lr=1e-4:1e-2",), eval_episodes=2, eval_max_steps=20
        ),
        env_options=EnvOptions(params={"memory_length": 3}),
    )
    run_dir = str(tmp_path / "pop")
    summary = runs.train(spec, run_dir, console=False, devices=jax.devices()[:1])
    assert summary["population"] == 4 and summary["num_updates"] == 4
    state, _ = latest_state(spec, run_dir, jax.devices()[:1])
    carries = np.asarray(state.rollout.actor_state)
    assert carries.shape == (4, 4, 8)
    assert not np.allclose(carries[0], carries[1])  # members act on their own
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert evals and all(-1.0 <= r <= 1.0 for e in evals for r in e["eval_returns"])


@pytest.mark.slow
def test_recurrent_ppo_learns_memory_chain_and_feed_forward_does_not(tmp_path):
    """MemoryChain with a memory of 5 steps: the context is shown at the first step and asked
    for at the last; a policy without memory can do no better than chance (mean return 0).
    With a GRU, seed 0's return was 0.99 at 18K steps and 1.0 from 38K (4 envs x 128 steps);
    the test trains 40K."""
    returns = {}
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for memory in ("gru", "none"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "podracer.cli.main",
                "train",
                "--agent",
                "ppo",
                "--agent.memory",
                memory,
                "--env",
                MEMORY_CHAIN,
                "--env-param",
                "memory_length=5",
                "--total-timesteps",
                "40000",
                "--quiet",
                "--no-tensorboard",
                "--run-dir",
                str(tmp_path / memory),
            ],
            capture_output=True,
            text=True,
            timeout=280,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        returns[memory] = json.loads(done.stdout.strip().splitlines()[-1])["final_return"]
    assert returns["gru"] >= 0.8 and returns["none"] <= 0.3, returns
