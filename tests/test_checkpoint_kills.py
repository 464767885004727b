"""A run killed (SIGKILL) at random moments while it checkpoints after every update resumes from
its newest complete checkpoint every time and ends bitwise where a run never killed ends
(``benchmarks/kill_during_checkpoint.py``; its 20-kill figure is in ``docs/design.md``)."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the full tier (docs/design.md, "Tests")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kill_during_checkpoint.py"


def test_three_kills_during_checkpoints_then_the_run_finishes_exactly(tmp_path):
    spec = importlib.util.spec_from_file_location("kill_during_checkpoint", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # The final params equal a run never killed's in the script's 20-kill run; here the
    # resumes and the restart from the newest complete step are what is checked (CI's time:
    # three kills, each at a moment drawn inside a checkpoint's write).
    result = script.run_kills(3, "anakin", tmp_path, seed=1, compare=False)
    print(result)
    assert result["resumes_failed"] == 0, result["errors"]
    assert result["final_ok"], result["errors"]
    assert result["start_update"] == result["latest_complete"] is not None
