"""Every agent's defaults work on any device count a user has: each built-in agent, on each
loop, with and without memory, passes ``podracer train --dry-run`` on 1, 2 and 4 devices (the
dry run traces one update, so a size that does not divide fails there as in the run)."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from podracer import agents, loops
from podracer.agents import PPOConfig, PQNConfig
from podracer.agents.policy import auto_window, describe_window

WORKER = Path(__file__).resolve().parent / "defaults_worker.py"


def expected_rows():
    rows = set()
    for name, spec in agents.AGENTS.items():
        fields = {field.name for field in dataclasses.fields(spec.config_cls)}
        memories = ("none", "gru") if "memory" in fields else ("none",)
        rows |= {(name, loop, memory) for loop in loops.names() for memory in memories}
    return rows


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_every_agents_defaults_pass_the_dry_run_on(devices):
    done = subprocess.run(
        [sys.executable, str(WORKER), str(devices)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {(r["agent"], r["loop"], r["memory"]) for r in records} == expected_rows()
    failed = [(r["agent"], r["loop"], r["memory"], r["error"]) for r in records if r["code"]]
    assert not failed
    for record in records:
        assert record["plan"]["devices"] == devices
    # SAC's default on Sebulba is its own task through envpool, not the loop's CartPole
    sac = next(r for r in records if r["agent"] == "sac" and r["loop"] == "sebulba")
    assert sac["plan"]["config"]["env"] == "envpool:Pendulum-v1"
    # recurrent PPO's 4 environments over the devices: 128-step rollouts cut so that each
    # device holds a multiple of 4 (num_minibatches) sequences
    ppo = next(
        r for r in records if (r["agent"], r["loop"], r["memory"]) == ("ppo", "anakin", "gru")
    )
    window = {1: 128, 2: 64, 4: 32}[devices]
    assert ppo["plan"]["memory"].startswith(f"sequences of {window} steps")
    assert ppo["plan"]["memory"].endswith("4 per device")


def test_the_automatic_window_is_the_longest_that_splits_into_minibatches():
    assert auto_window(128, 4, 4) == 128  # one device: the whole rollout, as before
    assert auto_window(128, 2, 4) == 64  # 2 envs x 2 windows = 4 sequences
    assert auto_window(128, 1, 4) == 32
    assert auto_window(64, 8, 16) == 32  # PQN's 32 envs over 4 devices
    assert auto_window(12, 3, 4) == 3  # 3 x 4 = 12 sequences; 6 (3 x 2) does not split
    assert auto_window(10, 3, 4) == 10  # none splits: the learner names the sizes
    assert auto_window(16, 5, 1) == 16
    assert PPOConfig(memory="gru", sequence_window=8).window(128, 1) == 8  # a set window stays
    assert PQNConfig(memory="gru").window(64, 8) == 32


def test_the_plan_names_the_window_only_for_memory():
    assert describe_window(PPOConfig(), 128, 2) is None
    line = describe_window(PPOConfig(memory="gru"), 128, 2)
    assert line == (
        "sequences of 64 steps (sequence_window=0: the longest that splits into "
        "num_minibatches), 4 per device"
    )
    assert describe_window(PPOConfig(memory="gru", sequence_window=16), 128, 2) == (
        "sequences of 16 steps (sequence_window=16), 16 per device"
    )
