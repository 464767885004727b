"""``benchmarks/suite.py --smoke``: one JSON line per smoke configuration with the house keys,
the learner-layout check, and the three plots.

The smoke run takes about two and a half minutes on 2 CPU cores, most of it compiling: PPO on
CartPole, Catch, MuZero on catch (about 70 s of it alone on one core), Sebulba IMPALA on envpool
Breakout, a population of 4.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "suite.py"
HAVE_ENVPOOL = importlib.util.find_spec("envpool") is not None

SMOKE = [
    "ppo-cartpole-8",
    "catch-8",
    "muzero-catch-16",
    "sebulba-impala-breakout-same",
    "sebulba-impala-breakout-split",  # skipped: one device
    "population-4-vmap",
    "peer-purejaxrl-ppo-4",  # skipped: no --purejaxrl DIR
    "peer-cleanba-ppo",  # skipped: no --cleanba DIR
    "peer-cleanba-impala",
]
PLATFORM = ("backend", "platform", "device_kind", "device_count", "jax", "date", "suite")
POSITIVE = ("sps", "env_only_sps", "ratio", "compile_s", "peak_rss_mb", "wall_s", "total_steps")


def positive(value) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@pytest.mark.slow
def test_smoke_run_writes_one_line_per_configuration_and_plots(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,  # 238 s on one core (taskset -c 0); a hang guard, not a timing
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "suite.jsonl").read_text().splitlines()]
    for line in lines:
        missing = [k for k in PLATFORM if k not in line]
        assert not missing, (line.get("config"), missing)
        assert line["backend"] == "cpu" and line["suite"] == "smoke"

    # The layout check ran first, on every configuration, on CPU and on simulated GPU and TPU.
    check, *configs = lines
    assert check["kind"] == "layout_check" and check["ok"] is True, check
    assert list(check["layouts"]) == SMOKE
    for platform in ("gpu", "tpu"):
        assert list(check["simulated"][platform]) == SMOKE
        for name, layout in check["simulated"][platform].items():
            assert layout == {"unroll": 1, "microbatch_steps": 0}, (platform, name, layout)
    # On CPU the image torso gets its CPU layout, so the check can tell the two apart.
    resnets = [n for n in SMOKE if n.startswith(("sebulba", "peer-cleanba"))]
    assert check["cpu_specific_on_cpu"] == resnets

    assert [line["config"] for line in configs] == SMOKE
    for line in configs:
        name = line["config"]
        if name.endswith("-split") or (name.startswith("sebulba") and not HAVE_ENVPOOL):
            assert line["kind"] == "skipped" and line["reason"], line
            continue
        if name.startswith("peer-"):  # no peer's path given: skipped, saying which flag
            flag = "--purejaxrl" if "purejaxrl" in name else "--cleanba"
            assert line["kind"] == "skipped" and flag in line["reason"], line
            continue
        assert line["kind"] == "benchmark", line
        for key in POSITIVE:
            assert positive(line[key]), (name, key, line.get(key))
        assert math.isclose(line["ratio"], line["sps"] / line["env_only_sps"])
        assert line["peak_device_bytes"] is None or positive(line["peak_device_bytes"])
        assert line["learner_layout"] == check["layouts"][name], line
    sebulba = next(line for line in configs if line["config"] == "sebulba-impala-breakout-same")
    if HAVE_ENVPOOL:
        assert sebulba["learner_layout"] == {"unroll": 1, "microbatch_steps": 32}  # CPU's

    for name in ("anakin.png", "population.png", "sebulba.png"):
        png = (tmp_path / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000, name


def test_layout_check_fails_loudly_on_a_cpu_layout_off_cpu(monkeypatch):
    spec = importlib.util.spec_from_file_location("suite_benchmark", SCRIPT)
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    image = suite.Bench(
        "image", "sebulba", "x", 1, types.SimpleNamespace(torso="impala_resnet"),
        suite.SebulbaConfig(), lambda: {},
    )  # fmt: skip
    assert suite.check_layouts([image], "cpu")["cpu_specific_on_cpu"] == ["image"]
    try:
        suite.check_layouts([image], "gpu")  # the real CPU devices give the CPU layout
    except suite.LayoutError as error:
        assert "image" in str(error) and "'gpu'" in str(error)
    else:
        raise AssertionError("a CPU layout on a GPU passed the check")
    assert not suite.is_accelerator_layout({"unroll": True, "microbatch_steps": 0})
    assert suite.is_accelerator_layout({"unroll": 1, "microbatch_steps": 0})
