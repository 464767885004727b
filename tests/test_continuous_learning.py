"""PPO learns continuous control through the command line, with the documented defaults (the
``classic_continuous`` preset, ``podracer/loops/presets.py``): Anakin on ``gymnax:Pendulum-v1`` and
Sebulba on ``envpool:Pendulum-v1``. Random play scores about -1,200 on Pendulum.

Thresholds from measured runs on 2 CPU cores with these commands: Anakin, 3e5 steps, seeds
0-3 one at a time: -187, -175, -182, -181 (the curve is flat at about -190 from 1e5 steps:
``benchmarks/figures/pendulum.png``); Sebulba, 3e5 steps: -186 (about 60 s).
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the full tier (docs/design.md, "Tests")


def podracer(*args, timeout=280):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_anakin_ppo_learns_pendulum_with_the_preset(tmp_path):
    done, summary = podracer(
        "train",
        "--agent",
        "ppo",
        "--env",
        "gymnax:Pendulum-v1",
        "--total-timesteps",
        "200000",
        "--arch.num-seeds",
        "2",
        "--quiet",
        "--no-tensorboard",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert "preset 'classic_continuous'" in done.stderr
    returns = summary["final_return_per_seed"]
    assert len(returns) == 2 and min(returns) >= -300.0, returns


@pytest.mark.slow
def test_sebulba_ppo_learns_envpool_pendulum_with_the_preset(tmp_path):
    done, summary = podracer(
        "train",
        "--agent",
        "ppo",
        "--arch",
        "sebulba",
        "--env",
        "envpool:Pendulum-v1",
        "--total-timesteps",
        "300000",
        "--quiet",
        "--no-tensorboard",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert "preset 'classic_continuous'" in done.stderr
    assert summary["final_return"] >= -400.0, summary
