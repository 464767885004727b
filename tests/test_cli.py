"""The ``podracer`` command line, run as a user runs it (a subprocess)."""

import json
import os
import subprocess
import sys

import pytest

from podracer.cli import parse_train_args

REQUIRED = {"total_steps", "sps", "compile_s", "final_return", "params_checksum"}


def podracer(*args, timeout=240):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run(
        [sys.executable, "-m", "podracer.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_train_prints_progress_and_a_final_json_line():
    proc = podracer(
        "train",
        "--arch",
        "anakin",
        "--agent",
        "ppo",
        "--env",
        "gymnax:CartPole-v1",
        "--total-timesteps",
        "4096",
        "--seed",
        "3",
        "--arch.num-envs",
        "8",
        "--agent.num_minibatches",
        "2",
        "--arch.rollout-len",
        "64",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(summary) >= REQUIRED
    assert summary["total_steps"] == 4096 and summary["seed"] == 3
    assert isinstance(summary["params_checksum"], float)
    assert "steps" in proc.stderr and "sps" in proc.stderr  # the progress display


def test_overrides_reach_the_configs():
    selectors, agent, arch = parse_train_args(
        [
            "--agent",
            "ppo",
            "--agent.lr",
            "3e-4",
            "--agent.num-minibatches",
            "8",
            "--arch.num_envs",
            "64",
            "--agent.hidden-sizes",
            "32",
            "32",
            "32",
            "--seed",
            "5",
        ]
    )
    assert agent.lr == 3e-4 and agent.num_minibatches == 8
    assert agent.hidden_sizes == (32, 32, 32) and arch.num_envs == 64 and selectors.seed == 5
    selectors, agent, arch = parse_train_args(["--agent", "qlambda"])
    assert selectors.env == "catch" and arch.num_envs == 128 and arch.rollout_len == 16


@pytest.mark.parametrize(
    "args, message",
    [
        (["--agent", "sarsa"], "--agent='sarsa' is not allowed: choose one of ppo, qlambda"),
        (["--env", "gymnax:Cartpole-v1"], "unknown environment id 'gymnax:Cartpole-v1'"),
        (["--arch", "podrace"], "--arch='podrace' is not allowed"),
        (["--arch.num-envs", "3", "--agent.num-minibatches", "1"], "AnakinConfig.num_envs=3"),
        (["--total-timesteps", "-5"], "--total-timesteps=-5 is not allowed"),
    ],
)
def test_bad_values_exit_non_zero_with_one_line(args, message, monkeypatch):
    from podracer import cli

    # conftest gives this process two devices: num_envs=3 cannot be split over them.
    errors = []
    monkeypatch.setattr(sys, "stderr", type("E", (), {"write": errors.append, "flush": id})())
    code = cli.main(
        ["train", *args, "--total-timesteps", "512"]
        if "--total-timesteps" not in args
        else ["train", *args]
    )
    assert code == 2
    text = "".join(errors)
    assert message in text and "Traceback" not in text
    assert text.count("\n") == 1


def test_help_lists_fields():
    proc = podracer("train", "--agent", "ppo", "--help", timeout=60)
    assert proc.returncode == 0
    for flag in ("--agent.lr", "--agent.num-minibatches", "--arch.num-envs", "--total-timesteps"):
        assert flag in proc.stdout


def test_sebulba_from_the_command_line():
    proc = podracer(
        "train",
        "--arch",
        "sebulba",
        "--agent",
        "ppo",
        "--env",
        "envpool:CartPole-v1",
        "--total-timesteps",
        "2048",
        "--arch.envs-per-actor",
        "8",
        "--arch.rollout-len",
        "32",
        "--agent.num-minibatches",
        "2",
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(summary) >= REQUIRED and summary["arch"] == "sebulba"
    assert summary["total_steps"] == 2048 and summary["num_updates"] == 8
    bad = podracer("train", "--arch", "sebulba", "--env", "envpool:Cartpole-v1", timeout=60)
    assert bad.returncode == 2 and "envpool:CartPole-v1" in bad.stderr
    assert "Traceback" not in bad.stderr
