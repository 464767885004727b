"""``benchmarks/continuous.py``: the smoke run prints one JSON line per configuration with the
house keys and writes its learning curves; the curve of a run directory is drawn.

brax's configuration is left out: even at smoke sizes it takes about 85 s on 2 CPU cores (most
of it compiling brax's physics twice, for training and for the environment alone).
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
SCRIPT = ROOT / "benchmarks" / "continuous.py"

KEYS = (
    "config",
    "env",
    "agent",
    "arch",
    "num_envs",
    "rollout_len",
    "total_steps",
    "sps",
    "compile_s",
    "env_only_sps",
    "ratio",
    "peak_rss_mb",
    "final_return",
    "jax",
    "backend",
    "device_kind",
    "plot",
)
POSITIVE = ("num_envs", "rollout_len", "total_steps", "sps", "compile_s", "env_only_sps", "ratio")


def load_module():
    """The script as a module, its folder first on the path as when it runs (it imports its
    neighbours)."""
    spec = importlib.util.spec_from_file_location("continuous_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


@pytest.mark.slow
def test_smoke_run_prints_json_lines_and_writes_curves(tmp_path):
    configs = ["pendulum"]  # the Sebulba configuration is timed by hand (CI's budget)
    figures = tmp_path / "figures"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--only", ",".join(configs), "--plot", figures],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,  # mujoco may leave a log file in the working directory
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [line["config"] for line in lines] == configs
    for line in lines:
        missing = [k for k in KEYS if k not in line]
        assert not missing, (line["config"], missing)
        for key in POSITIVE:
            assert isinstance(line[key], int | float) and line[key] > 0, (line["config"], key)
        assert line["peak_rss_mb"] > 0
        assert math.isclose(line["ratio"], line["sps"] / line["env_only_sps"])
        # The smoke sizes are chosen so that episodes end in the last update.
        assert isinstance(line["final_return"], float), line
        png = Path(line["plot"])
        assert png == figures / f"{line['config']}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_curves_from_history_and_from_a_run_directory(tmp_path):
    continuous = load_module()
    history = {
        "episodes": np.array([[0, 2, 0, 0, 4]]),
        "return_sum": np.array([[0.0, -10.0, 0.0, 0.0, 8.0]]),
    }
    curve = continuous.curve_from_history(history, steps_per_update=100, label="x", points=5)
    np.testing.assert_array_equal(curve.steps, [200, 500])  # updates with no episode left out
    np.testing.assert_allclose(curve.returns, [-5.0, 2.0])
    coarse = continuous.curve_from_history(history, steps_per_update=100, label="x", points=2)
    np.testing.assert_array_equal(coarse.steps, [300, 500])  # windows of 3 updates
    np.testing.assert_allclose(coarse.returns, [-5.0, 2.0])

    run = tmp_path / "run"
    run.mkdir()
    records = [
        {"kind": "train", "step": 0, "episode_return": None},
        {"kind": "train", "step": 2048, "episode_return": -300.0},
        {"kind": "eval", "step": 2048, "eval_return": 1.0},
        {"kind": "train", "step": 4096, "episode_return": -250.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "config.json").write_text(json.dumps({"arch": "sebulba", "agent": "ppo", "env": "e"}))
    out = tmp_path / "curve.png"
    assert continuous.main(["--curve-from-run", str(run), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curve = continuous.curve_from_run(run)
    assert curve.label == "sebulba ppo e"
    np.testing.assert_array_equal(curve.steps, [2048, 4096])
    np.testing.assert_allclose(curve.returns, [-300.0, -250.0])
    (run / "metrics.jsonl").write_text(json.dumps(records[0]) + "\n")
    with pytest.raises(ValueError, match="no 'train' record"):
        continuous.curve_from_run(run)
