"""``benchmarks/offpolicy.py``: the smoke run prints one JSON line per training configuration
with the house keys and writes its learning curves, and one line per replay-buffer case with
positive timings.

Left out of the subprocess run: ``sac-pendulum`` (about 15 s at smoke sizes on 2 CPU cores,
mostly compiling) and the two Sebulba Breakout configurations (envpool, 10-15 s each).
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "offpolicy.py"

TRAINING = ["dqn-cartpole"]  # pqn-minatar is timed by hand (CI's budget)
KEYS = (
    "config",
    "env",
    "agent",
    "arch",
    "agent_overrides",
    "num_envs",
    "rollout_len",
    "total_steps",
    "num_updates",
    "sps",
    "compile_s",
    "env_only_sps",
    "ratio",
    "peak_rss_mb",
    "final_return",
    "eval_return",
    "jax",
    "backend",
    "device_kind",
    "plot",
)
POSITIVE = (
    "num_envs",
    "rollout_len",
    "total_steps",
    "num_updates",
    "sps",
    "compile_s",
    "env_only_sps",
    "ratio",
    "peak_rss_mb",
)
BUFFER_KEYS = (
    "config",
    "case",
    "prioritised",
    "item",
    "item_bytes",
    "buffer_size",
    "buffer_mb",
    "add_batch",
    "sample_batch",
    "add_us",
    "sample_us",
    "set_priorities_us",
    "compile_s",
    "peak_rss_mb",
    "jax",
    "backend",
)
BUFFER_POSITIVE = (
    "item_bytes",
    "buffer_size",
    "buffer_mb",
    "add_batch",
    "sample_batch",
    "add_us",
    "sample_us",
    "compile_s",
)


def load_module():
    spec = importlib.util.spec_from_file_location("offpolicy_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positive(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


@pytest.mark.slow
def test_smoke_run_prints_json_lines_and_writes_curves(tmp_path):
    figures = tmp_path / "figures"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    only = ",".join([*TRAINING, "buffer"])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--only", only, "--plot", str(figures)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    training = [line for line in lines if line["config"] != "buffer"]
    buffers = [line for line in lines if line["config"] == "buffer"]
    assert [line["config"] for line in training] == TRAINING

    for line in training:
        missing = [k for k in KEYS if k not in line]
        assert not missing, (line["config"], missing)
        for key in POSITIVE:
            assert positive(line[key]), (line["config"], key, line[key])
        assert math.isclose(line["ratio"], line["sps"] / line["env_only_sps"])
        assert line["arch"] == "anakin"
        assert isinstance(line["eval_return"], float) and line["eval_return"] >= 0, line
        # The smoke sizes are chosen so that episodes end in the last update.
        assert isinstance(line["final_return"], float), line
        png = Path(line["plot"])
        assert png == figures / f"{line['config']}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Smoke: one buffer size, both items, uniform and prioritised.
    cases = {line["case"] for line in buffers}
    assert cases == {
        f"{kind}-{item}-1000"
        for kind in ("uniform", "prioritised")
        for item in ("cartpole", "atari")
    }
    for line in buffers:
        missing = [k for k in BUFFER_KEYS if k not in line]
        assert not missing, (line["case"], missing)
        assert "skipped" not in line, line
        for key in BUFFER_POSITIVE:
            assert positive(line[key]), (line["case"], key, line[key])
        if line["prioritised"]:
            assert positive(line["set_priorities_us"]), line
        else:
            assert line["set_priorities_us"] is None, line
    atari = next(line for line in buffers if line["item"] == "atari")
    assert atari["item_bytes"] == 2 * 4 * 84 * 84 + 3 * 4  # two frame stacks, three scalars


def test_curve_from_history_pools_windows():
    module = load_module()
    history = {
        "episodes": np.array([[0, 2, 0, 1]]),
        "return_sum": np.array([[0.0, 10.0, 0.0, 7.0]]),
    }
    curve = module.curve_from_history(history, steps_per_update=100, label="x", points=2)
    np.testing.assert_array_equal(curve.steps, [200, 400])
    np.testing.assert_allclose(curve.returns, [5.0, 7.0])
