"""A run whose loss or parameters stop being finite stops there, names the update and the
metric, and keeps its last good checkpoint (``RunOptions.check_finite``)."""

import json
import os
import sys

import numpy as np
import pytest

from podracer.cli import main as cli
from podracer.loops.common import Diverged, check_finite, params_finite
from podracer.runs.checkpoint import CHECKPOINT_DIR


def test_check_finite_names_the_first_update_metric_and_member():
    metrics = {
        "loss": np.array([[1.0, 2.0, np.nan, np.nan], [1.0, 2.0, 3.0, np.inf]]),
        "grad_norm": np.array([[1.0, np.inf, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]),
    }
    with pytest.raises(Diverged, match=r"grad_norm is inf at update 12 \(member 0 of 2\)"):
        check_finite(metrics, first_update=10)
    metrics["grad_norm"][0, 1] = 1.0
    with pytest.raises(Diverged, match=r"loss is nan at update 13 \(member 0 of 2\)"):
        check_finite(metrics, first_update=10)
    with pytest.raises(Diverged, match=r"^the run diverged: loss is -inf at update 4$"):
        check_finite({"loss": np.float32(-np.inf), "kl": np.float32(0.1)}, first_update=3)
    check_finite({"loss": np.zeros((2, 3)), "steps": np.arange(3)}, first_update=0)  # no raise


def test_params_finite_looks_at_floating_leaves_only():
    assert params_finite({"w": np.ones(3, np.float32), "count": np.int32(7)})
    assert not params_finite({"w": np.array([1.0, np.nan], np.float32), "b": np.zeros(2)})


SIZES = ["--arch.rollout-len", "16", "--checkpoint-interval", "2", "--quiet"]
LOOPS = {
    "anakin": ["--arch", "anakin", "--arch.num-envs", "8", "--agent.num-minibatches", "2"],
    "sebulba": ["--arch", "sebulba", "--env", "gymnax:CartPole-v1", "--arch.envs-per-actor", "8"],
}


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(LOOPS))
def test_a_diverging_run_stops_and_keeps_its_last_good_checkpoint(arch, tmp_path, monkeypatch):
    """A healthy run saves update 4; resumed with a learning rate of 1e38 (config.json edited),
    its first update makes the params overflow: the run stops in that update with exit status 1,
    one line naming it, and update 4 stays the latest checkpoint. With --no-check-finite the same
    learning rate trains to the end and saves."""
    run = str(tmp_path / "run")
    steps = "512"  # 4 updates of 8 environments x 16 steps, either loop
    argv = ["train", "--run-dir", run, "--total-timesteps", steps, *LOOPS[arch], *SIZES]
    assert cli.main(argv) == 0
    assert sorted(os.listdir(os.path.join(run, CHECKPOINT_DIR))) == ["2", "4"]
    with open(os.path.join(run, "config.json")) as f:
        config = json.load(f)
    config["agent_config"]["lr"] = 1e38
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump(config, f)

    errors = []
    monkeypatch.setattr(sys, "stderr", type("E", (), {"write": errors.append, "flush": id})())
    more = str(2 * int(steps))
    assert cli.main(["train", "--resume", run, "--total-timesteps", more, "--quiet"]) == 1
    lines = "".join(errors).splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0].startswith("podracer: the run diverged: ")
    assert " is nan at update 5" in lines[0] or " is inf at update 5" in lines[0], lines
    assert "the latest checkpoint is of update 4" in lines[0]
    assert sorted(os.listdir(os.path.join(run, CHECKPOINT_DIR))) == ["2", "4"]

    if arch == "sebulba":
        return  # the check's flag is the loop's business no more than the check itself
    free = str(tmp_path / "free")
    argv = ["train", "--run-dir", free, "--total-timesteps", steps, *LOOPS[arch], *SIZES]
    assert cli.main([*argv, "--agent.lr", "1e38", "--no-check-finite"]) == 0
    assert sorted(os.listdir(os.path.join(free, CHECKPOINT_DIR))) == ["2", "4"]
