"""The defaults stay learnable: one seed of each row of ``benchmarks/defaults.py`` that failed
before its preset (docs/defaults.md, "What changed"), run as a user runs it (``podracer train``
with the row's flags only, in a fresh process) and held to the aim ``docs/agents.md`` states.

Full tier: each row is a whole default run (15 s to 2 minutes on 2 CPU cores)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import defaults  # benchmarks/defaults.py

ROWS = {row.name: row for row in defaults.matrix()}

# The rows that missed their aim with the previous defaults (seed 0 unless said), and the
# preset that fixed each (podracer/agents/*.py, "presets"). IMPALA's two rows
# (anakin-impala-cartpole: 257; sebulba-impala-gru-cartpole: 9.4, the recurrent policy
# collapsed to one action) are better with their preset but not yet held here: five seeds in
# six reach the aim (docs/defaults.md), so a test of one seed would fail one run in six.
FIXED = {
    # 0.57 with lr 1e-4 over 5e5 steps; lr 1e-3 over 1e6.
    "anakin-qlambda-catch": "preset 'catch' for --agent qlambda",
    # 392 with lr 2.5e-4 over 5e5 steps; lr 1e-3 over 8e5.
    "sebulba-ppo-cartpole": "preset 'classic_control' for --agent ppo",
    # 462 on seed 2 on one machine (490 and 498 on seeds 0 and 1): a target copy every 16
    # updates and a final epsilon of 0.01.
    "anakin-dqn-cartpole": "preset 'classic_control' for --agent dqn",
}


def test_every_fixed_row_is_in_the_matrix():
    assert set(FIXED) <= set(ROWS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIXED))
def test_the_default_reaches_its_aim(name):
    row = ROWS[name]
    record = defaults.run_once(row, seed=0, timeout=480)
    print(record)
    assert record.get("error") is None, record
    assert FIXED[name] in (record["preset"] or ""), record  # the command printed its preset
    assert record["final_return"] >= row.threshold, record
