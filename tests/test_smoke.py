"""A smoke run of every built-in agent on each loop, at tiny sizes, through the command line in
this process: the run ends with its final JSON line, having done the updates its sizes make
(counted here by hand), with finite parameters that moved from where they started, and a
checkpoint that holds them. The learning thresholds are the full tier's (``-m slow``)."""

import json
import math

import numpy as np
import pytest

from podracer import agents, loops, parallel
from podracer.cli import main as cli
from podracer.loops.common import params_checksum
from podracer.runs import load_spec, restore_run
from podracer.runs.checkpoint import Checkpointer

# per loop: the flags that make it tiny, and the environment steps of one update
LOOP_FLAGS = {
    "anakin": ["--arch.num-envs", "4", "--arch.rollout-len", "8"],
    "sebulba": ["--arch.envs-per-actor", "4", "--arch.rollout-len", "8"],
}
STEPS_PER_UPDATE = 32  # 4 environments x 8 steps, on both loops (one actor, one member)
TOTAL = 96  # 3 updates
# 2 simulations, and windows of 2 unrolled steps and 2-step targets that fit 3 short updates
MUZERO = ["--agent.num-simulations", "2", "--agent.num-unroll-steps", "2", "--agent.n-step", "2"]
REPLAY = ["--agent.learning-starts", "32", "--agent.batch-size", "8", "--agent.buffer-size", "256"]
AGENT_FLAGS = {
    "ppo": ["--agent.num-minibatches", "2", "--agent.num-epochs", "1"],
    "qlambda": [],
    "impala": [],
    "pqn": ["--agent.num-minibatches", "2", "--agent.num-epochs", "1"],
    "dqn": REPLAY,
    "sac": REPLAY,
    "muzero": [*REPLAY, *MUZERO],
}


def test_every_built_in_agent_has_smoke_flags():
    assert set(agents.AGENTS) == set(AGENT_FLAGS)


@pytest.mark.parametrize("loop", loops.names())
@pytest.mark.parametrize("agent", sorted(agents.AGENTS))
def test_smoke_run(agent, loop, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(parallel, "use_cpu_cores", lambda *a, **k: None)
    run_dir = tmp_path / "run"
    argv = ["train", "--arch", loop, "--agent", agent, *LOOP_FLAGS[loop], *AGENT_FLAGS[agent]]
    argv += ["--total-timesteps", str(TOTAL), "--no-tensorboard", "--quiet"]
    argv += ["--run-dir", str(run_dir), "--checkpoint-interval", "1"]
    assert cli.main(argv) == 0, capsys.readouterr().err[-2000:]
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["agent"] == agent and summary["arch"] == loop
    assert summary["num_updates"] == TOTAL // STEPS_PER_UPDATE
    assert summary["total_steps"] == TOTAL
    assert math.isfinite(summary["params_checksum"])
    with Checkpointer(str(run_dir), keep=3) as checkpointer:
        steps = checkpointer.steps()
    assert steps and max(steps) == TOTAL // STEPS_PER_UPDATE
    # the saved params sum to the reported checksum, and differ from update 1's
    saved = [_params_sum(run_dir, step) for step in (1, max(steps))]
    assert np.isclose(saved[1], summary["params_checksum"], rtol=1e-5, atol=1e-4)
    assert saved[0] != saved[1]


def _params_sum(run_dir, step: int) -> float:
    """The checksum of the params in the run's checkpoint of update ``step``."""
    _, state, _ = restore_run(load_spec(str(run_dir)), str(run_dir), step=step)
    return params_checksum(state.learner.params)
