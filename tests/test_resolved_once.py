"""A run is resolved once: through ``podracer.cli.main.main``, the command line is parsed once, the
agent spec looked up once, and the environment built once for the probe (plus each Sebulba
actor's own), every one of them with the run's options."""

import json

import numpy as np
import pytest

from podracer import agents, parallel
from podracer.cli import main as cli
from podracer.cli import parse
from podracer.envs import factory as env_factory
from podracer.envs import host as host_envs


class Calls:
    """Counts the calls of the functions it wraps, keeping their arguments and results."""

    def __init__(self):
        self.calls: dict[str, list] = {}

    def wrap(self, monkeypatch, owner, name: str, key: str | None = None):
        original = getattr(owner, name)
        key = key or name
        self.calls.setdefault(key, [])

        def counted(*args, **kwargs):
            result = original(*args, **kwargs)
            self.calls[key].append((args, kwargs, result))
            return result

        monkeypatch.setattr(owner, name, counted)

    def count(self, key: str) -> int:
        return len(self.calls[key])


@pytest.fixture
def calls(monkeypatch):
    """The command line's parser, the agent registry and both environment factories, counted;
    one CPU device per core is not asked for (JAX has started), everything else of ``main``
    runs as from the command line."""
    counter = Calls()
    counter.wrap(monkeypatch, parse, "_selector_parser")
    counter.wrap(monkeypatch, agents, "get")
    counter.wrap(monkeypatch, agents.spec, "get", "spec.get")
    counter.wrap(monkeypatch, env_factory, "make_with_options")
    counter.wrap(monkeypatch, host_envs, "make")
    monkeypatch.setattr(parallel, "use_cpu_cores", lambda *a, **k: None)
    return counter


def main(argv, capsys) -> dict:
    """``podracer ARGV`` in this process, as from the command line (CPU cores, supervisor),
    which must exit with status 0; its final JSON line."""
    assert cli.main(argv, cpu_cores=True, supervise=True) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_sebulba_atari_run_resolves_once_with_its_options(calls, tmp_path, capsys):
    """A Sebulba IMPALA run of envpool Breakout at 64 x 64 frames (--env-param) through the
    command line: one parse, one agent look-up, and two host environments (the probe's and the
    one actor's), both with img_height = img_width = 64, whose frames are 64 x 64."""
    argv = [
        "train",
        "--arch",
        "sebulba",
        "--agent",
        "impala",
        "--env",
        "envpool:Breakout-v5",
        "--env-param",
        "img_height=64",
        "--env-param",
        "img_width=64",
        "--agent.torso",
        "nature_cnn",
        "--agent.shared-torso",
        "True",
        "--agent.hidden-sizes",
        "32",
        "--arch.actor-device-ids",
        "0",
        "--arch.learner-device-ids",
        "1",
        "--arch.envs-per-actor",
        "2",
        "--arch.rollout-len",
        "4",
        "--total-timesteps",
        "16",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-tensorboard",
        "--quiet",
    ]
    summary = main(argv, capsys)
    assert summary["arch"] == "sebulba" and summary["num_updates"] == 2  # 16 / (2 x 4)
    assert np.isfinite(summary["params_checksum"])

    assert calls.count("_selector_parser") == 1
    assert calls.count("get") + calls.count("spec.get") == 1
    assert calls.count("make_with_options") == 0  # no JAX environment in a Sebulba run
    built = calls.calls["make"]
    assert len(built) == 2  # the probe's (actor -1) and the one actor's
    seeds = [kwargs["seed"] for _, kwargs, _ in built]
    assert len(set(seeds)) == 2  # two environments, not one built twice
    options = [kwargs["env_options"] for _, kwargs, _ in built]
    assert all(o == options[0] for o in options)
    assert options[0].param_dict == {"img_height": 64, "img_width": 64}
    for _, kwargs, env in built:
        assert kwargs["num_envs"] == 2
        assert tuple(env.observation_spec.shape) == (4, 64, 64)  # envpool's default: 84 x 84


@pytest.mark.slow
def test_an_anakin_population_builds_its_environment_once(calls, tmp_path, capsys):
    """An Anakin population of 4 with its tournament every update and the run's evaluation
    every 2 updates: the JAX environment is built once (the probe's), and the rollout, the
    tournament's evaluation and the run's evaluator all use it."""
    argv = [
        "train",
        "--agent",
        "ppo",
        "--env",
        "gymnax:CartPole-v1",
        "--population",
        "4",
        "--population.interval",
        "1",
        "--population.eval-episodes",
        "2",
        "--eval-interval",
        "2",
        "--eval-episodes",
        "2",
        "--arch.num-envs",
        "4",
        "--arch.rollout-len",
        "8",
        "--agent.num-minibatches",
        "2",
        "--agent.hidden-sizes",
        "8",
        "--total-timesteps",
        "64",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-tensorboard",
        "--quiet",
    ]
    summary = main(argv, capsys)
    assert summary["population"] == 4 and summary["num_updates"] == 2  # 64 / (4 x 8)
    assert len(summary["final_scores"]) == 4
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        evals = [r for r in map(json.loads, f) if r.get("kind") == "eval"]
    assert [r["updates"] for r in evals] == [2] and evals[0]["episodes"] == 8  # 4 x 2

    assert calls.count("_selector_parser") == 1
    assert calls.count("get") + calls.count("spec.get") == 1
    assert calls.count("make_with_options") == 1
    assert calls.count("make") == 0  # no host environment


@pytest.mark.slow
def test_a_sweep_dry_run_resolves_once(calls, tmp_path, capsys):
    """``podracer sweep --dry-run``: the grid's flags taken out, the rest parsed once, the
    agent looked up once, the environment built once."""
    argv = [
        "sweep",
        "--agent",
        "ppo",
        "--env",
        "gymnax:CartPole-v1",
        "--sweep.lr",
        "1e-3,3e-3",
        "--seeds",
        "2",
        "--run-dir",
        str(tmp_path / "sweep"),
        "--dry-run",
    ]
    record = main(argv, capsys)
    assert record["dry_run"] and record["seeds"] == 2 and record["sweep"] == {"lr": [1e-3, 3e-3]}
    assert record["config"]["agent"] == "ppo"
    assert calls.count("_selector_parser") == 1
    assert calls.count("get") + calls.count("spec.get") == 1
    assert calls.count("make_with_options") == 1


def test_loop_neutral_sizes_reach_each_loops_fields():
    """An agent's neutral sizes become each loop's own fields; a section under a loop's name
    applies to that loop alone and wins; the old keyed form with a loop's field names still
    works; a key that is neither is an error naming it."""
    from podracer import loops
    from podracer.loops.anakin import AnakinConfig
    from podracer.loops.sebulba import SebulbaConfig

    values = {"envs": 16, "rollout_len": 8, "sebulba": {"rollout_len": 32}}
    assert loops.loop_values(values, "anakin") == {"num_envs": 16, "rollout_len": 8}
    assert loops.loop_values(values, "sebulba") == {"envs_per_actor": 16, "rollout_len": 32}
    old = {"anakin": {"num_envs": 4, "rollout_len": 2}}
    assert loops.loop_values(old, "anakin") == {"num_envs": 4, "rollout_len": 2}
    assert loops.loop_values(old, "sebulba") == {}
    with pytest.raises(ValueError, match=r"loop_defaults\['num_envs'\]=4 is not allowed"):
        loops.loop_values({"num_envs": 4}, "anakin")
    assert loops.sizes_of("anakin", AnakinConfig(num_envs=6, rollout_len=3)) == {
        "envs": 6,
        "rollout_len": 3,
    }
    assert loops.sizes_of("sebulba", SebulbaConfig(envs_per_actor=6, rollout_len=3)) == {
        "envs": 6,
        "rollout_len": 3,
    }
    dqn = agents.get("dqn")  # {"envs": 16, "rollout_len": 8}: one value for both loops
    assert loops.loop_defaults(dqn, "anakin") == {"num_envs": 16, "rollout_len": 8}
    assert loops.loop_defaults(dqn, "sebulba") == {"envs_per_actor": 16, "rollout_len": 8}
