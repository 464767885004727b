"""A run that resumes from its first checkpoint ends where the straight run ends: the check the
suite tests share."""

import os
import shutil

from podracer import runs
from podracer.runs.checkpoint import Checkpointer


def straight_and_resumed(spec, tmp_path, devices, checkpoints):
    """Trains ``spec`` straight into ``tmp_path/straight`` (its checkpoints must be
    ``checkpoints``), then resumes a copy from the first checkpoint; asserts both end with the
    same params and returns the straight run's directory and summary."""
    straight = str(tmp_path / "straight")
    summary = runs.train(spec, straight, console=False, devices=devices)
    assert Checkpointer(straight).steps() == checkpoints
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    for step in checkpoints[1:]:
        shutil.rmtree(os.path.join(resumed, "checkpoints", str(step)))
    again = runs.train(spec, resumed, resume=True, console=False, devices=devices)
    assert again["start_update"] == checkpoints[0]
    assert again["params_checksum"] == summary["params_checksum"]
    return straight, summary
