"""``benchmarks/envs.py``: the smoke run prints one JSON line per family with the house keys,
the environment alone and PPO measured in the same run; random actions are legal ones."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "envs.py"
KEYS = {
    "family",
    "env",
    "num_envs",
    "rollout_len",
    "env_only_sps",
    "env_compile_s",
    "sps",
    "compile_s",
    "ratio",
    "peak_rss_mb",
    "jax",
    "backend",
    "device_kind",
}


@pytest.mark.slow
def test_smoke_prints_one_line_per_family():
    pytest.importorskip("navix")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--only", "navix"],
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout
    (line,) = lines
    assert set(line) >= KEYS, sorted(KEYS - set(line))
    assert line["env"] == "navix:Navix-Empty-5x5-v0" and line["num_envs"] == 4
    for key in ("env_only_sps", "sps", "compile_s", "ratio"):
        assert line[key] > 0, (key, line[key])
    assert line["ratio"] == pytest.approx(line["sps"] / line["env_only_sps"])


def test_random_actions_are_legal_and_uniform():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from envs import random_legal_actions
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from podracer.types import DiscreteActionSpec

    n = 9000
    mask = jnp.broadcast_to(jnp.array([False, True, True, False, True]), (n, 5))
    actions = np.asarray(
        random_legal_actions(jax.random.key(0), DiscreteActionSpec(5), {"action_mask": mask}, n)
    )
    counts = np.bincount(actions, minlength=5)
    assert counts[[0, 3]].sum() == 0
    assert np.all(np.abs(counts[[1, 2, 4]] - n / 3) < 5 * np.sqrt(n * 2 / 9)), counts
