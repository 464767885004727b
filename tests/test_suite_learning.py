"""Learning on the JAX suites, CI-sized (``benchmarks/suite_learning.py`` measures the full-sized
checks; ``benchmarks/README.md``, "JAX suites: learning").

Each test trains PPO seed 0 through :func:`suite_learning.measure` (the benchmark's own code),
then plays the trained policy and a uniformly random LEGAL policy over the same number of FULL
episodes from the same initial states, each episode counted once, and checks both: the trained
policy reaches its mark, and the random one stays below it, so that the test cannot pass because
the task is trivial.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the full tier (docs/design.md, "Tests")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def suite_learning():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import suite_learning
    finally:
        sys.path.remove(str(BENCHMARKS))
    return suite_learning


@pytest.mark.slow
def test_ppo_solves_navix_empty(suite_learning):
    """NAVIX's Empty-5x5: reward 1 at the goal (and the episode ends), so the maximum return is
    1. PPO with the command line's defaults (``cli.parse.run_spec``, as ``podracer train`` resolves
    them), 1e5 steps: its greedy policy reaches the goal in >= 90% of 64 episodes (measured: 1.0,
    about 25 s to train on 2 cores); the random policy reaches it in about 40% (measured: 0.37
    over 128 episodes, the rest run into the 100-step time limit)."""
    pytest.importorskip("navix")
    from podracer.cli.parse import parse_selectors, run_spec

    spec, _ = run_spec(
        parse_selectors(
            ["--agent", "ppo", "--env", "navix:Navix-Empty-5x5-v0", "--total-timesteps", "100000"]
        )
    )
    record = suite_learning.measure(spec, episodes=64, policy="greedy", both=False)
    assert record["total_steps"] >= 99_000
    assert 0.1 < record["random_return"] < 0.6, record
    assert record["trained_return"] >= 0.9, record


SNAKE_SIZE = 6
SNAKE_TIME_LIMIT = 200


@pytest.mark.slow
def test_ppo_beats_random_legal_on_a_small_snake(suite_learning, monkeypatch):
    """Jumanji's Snake at 6x6 with a 200-step limit (``jumanji.make`` keywords): the default
    12x12 with its 4,000-step limit needs about 3e5 steps, minutes on 2 cores. PPO with its
    ``snake`` preset, 6e4 steps: its stochastic policy eats at least twice the fruits of the
    uniformly random legal policy over the same 128 full episodes (measured: 11.2 against 3.6;
    the greedy policy circles, so it is not the one measured). The random legal policy eats
    some (>= 2: measured 3.6), so twice it is a real margin."""
    pytest.importorskip("jumanji")
    import podracer
    from podracer import agents, envs, loops
    from podracer.runs import RunSpec

    monkeypatch.setattr(envs.factory, "_REGISTRY", dict(envs.factory._REGISTRY))
    envs.register(
        "small_snake",
        lambda: envs.make(
            "jumanji:Snake-v1",
            num_rows=SNAKE_SIZE,
            num_cols=SNAKE_SIZE,
            time_limit=SNAKE_TIME_LIMIT,
        ),
    )
    preset = agents.get("ppo").presets["snake"]
    spec = RunSpec(
        arch="anakin",
        agent="ppo",
        env="small_snake",
        seed=0,
        total_timesteps=60_000,
        agent_config=podracer.PPOConfig(**preset["agent"]),
        arch_config=podracer.AnakinConfig(**loops.loop_values(preset["loop"], "anakin")),
    )
    record = suite_learning.measure(spec, episodes=128, policy="stochastic", both=False)
    assert record["unfinished"] == 0
    assert record["random_return"] >= 2.0, record
    assert record["trained_return"] >= 2 * record["random_return"], record
