"""Presets (podracer/loops/presets.py): the layers of an entry (the entry, its memory section,
the loop's section, that section's memory section), a preset's run length, and the command
line that applies them under the user's flags."""

from __future__ import annotations

import types

import pytest

from podracer.cli.parse import parse_selectors, run_spec
from podracer.errors import ConfigValueError
from podracer.loops.presets import describe, preset_for

ENV = "gymnax:CartPole-v1"  # the preset family "classic_control"


def spec(entry):
    return types.SimpleNamespace(name="toy", presets={"classic_control": entry})


LAYERED = {
    "agent": {"lr": 1.0, "gamma": 0.5},
    "envs": 4,
    "total_timesteps": 100,
    "memory": {"agent": {"lr": 2.0}, "total_timesteps": 200},
    "sebulba": {
        "agent": {"lr": 3.0},
        "rollout_len": 7,
        "memory": {"agent": {"lr": 4.0}, "total_timesteps": 400, "envs": 9},
    },
}


@pytest.mark.parametrize(
    ("loop", "memory", "lr", "steps", "sizes"),
    [
        ("anakin", False, 1.0, 100, {"num_envs": 4}),
        ("anakin", True, 2.0, 200, {"num_envs": 4}),
        ("sebulba", False, 3.0, 100, {"envs_per_actor": 4, "rollout_len": 7}),
        ("sebulba", True, 4.0, 400, {"envs_per_actor": 9, "rollout_len": 7}),
    ],
)
def test_each_layer_wins_over_the_one_before(loop, memory, lr, steps, sizes):
    preset = preset_for(spec(LAYERED), ENV, loop, memory)
    assert preset.agent == {"lr": lr, "gamma": 0.5}  # gamma from the entry in every case
    assert preset.total_timesteps == steps
    assert dict(preset.loop) == sizes


def test_a_preset_that_sets_nothing_for_a_loop_is_none():
    entry = {"sebulba": {"memory": {"agent": {"lr": 5e-4}}}}
    assert preset_for(spec(entry), ENV, "anakin", True) is None
    assert preset_for(spec(entry), ENV, "sebulba", False) is None
    assert preset_for(spec(entry), ENV, "sebulba", True).agent == {"lr": 5e-4}
    assert preset_for(spec(entry), "catch", "sebulba", True) is None  # another family


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_a_bad_run_length_names_the_preset_and_the_value(bad):
    with pytest.raises(
        ConfigValueError,
        match=r"toy: presets\['classic_control'\]: "
        r"total_timesteps=.* is not allowed: an int > 0",
    ):
        preset_for(spec({"total_timesteps": bad}), ENV, "anakin")


def test_describe_names_the_run_length():
    line = describe(preset_for(spec(LAYERED), ENV, "anakin"), "toy", ENV)
    assert "agent.lr=1.0" in line and "arch.num_envs=4" in line
    assert line.endswith("total-timesteps=100")


def parsed(argv):
    run, _ = run_spec(parse_selectors(argv))
    return run


def test_the_command_line_takes_the_presets_run_length_under_the_flag(capsys):
    # IMPALA's classic_control preset: 1e6 steps on Anakin (docs/defaults.md).
    assert parsed(["--agent", "impala"]).total_timesteps == 1_000_000
    assert "total-timesteps=1000000" in capsys.readouterr().err
    assert parsed(["--agent", "impala", "--total-timesteps", "300"]).total_timesteps == 300
    assert parsed(["--agent", "ppo"]).total_timesteps == 500_000  # no preset on Anakin


def test_the_memory_section_follows_the_memory_flag(capsys):
    base = ["--arch", "sebulba", "--agent", "impala", "--env", "envpool:CartPole-v1"]
    plain = parsed(base)
    assert plain.total_timesteps == 1_000_000 and plain.agent_config.lr == 2e-3
    for flag in (["--agent.memory", "gru"], ["--agent.memory=gru"]):
        run = parsed([*base, *flag])
        assert run.agent_config.memory == "gru"
        assert run.agent_config.lr == 5e-4 and run.total_timesteps == 1_000_000
    # The user's own value wins over the preset's.
    assert parsed([*base, "--agent.memory", "gru", "--agent.lr", "1e-3"]).agent_config.lr == 1e-3
    assert "agent.lr=0.0005" in capsys.readouterr().err
