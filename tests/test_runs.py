"""Run directories: config round trip, loggers, checkpoints, exact resume, evaluation."""

import dataclasses
import json
import os
import shutil
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import runs
from podracer.agents import PPOConfig
from podracer.envs import EnvOptions
from podracer.errors import ConfigError
from podracer.loops.anakin import AnakinConfig
from podracer.loops.common import params_checksum
from podracer.loops.sebulba import SebulbaConfig
from podracer.runs.checkpoint import Checkpointer, CheckpointError

# 8 updates of 4 envs x 16 steps, two updates per call, checkpoints every 4 updates.
SPEC = runs.RunSpec(
    arch="anakin",
    agent="ppo",
    env="gymnax:CartPole-v1",
    seed=3,
    total_timesteps=8 * 64,
    agent_config=PPOConfig(num_epochs=2, num_minibatches=2, hidden_sizes=(32, 32)),
    arch_config=AnakinConfig(num_envs=4, rollout_len=16, num_seeds=2, updates_per_call=2),
    options=runs.RunOptions(checkpoint_interval=4, eval_interval=4, eval_episodes=3),
)


def one_device():
    return jax.devices()[:1]


def final_state(run_dir, spec=SPEC):
    """The state of a run's latest checkpoint, as NumPy leaves (keys as their raw data)."""
    from podracer.loops import anakin
    from podracer.runs.checkpoint import to_raw

    system = anakin.build(
        spec.env,
        spec.agent_config,
        spec.arch_config,
        total_timesteps=spec.total_timesteps,
        devices=one_device(),
    )
    with Checkpointer(run_dir) as checkpointer:
        state, meta = checkpointer.restore(system.init(spec.seed))
    return [np.asarray(x) for x in jax.tree.leaves(to_raw(state))], meta


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """One run of 8 updates with checkpoints at 4 and 8 (shared by the tests below)."""
    run_dir = str(tmp_path_factory.mktemp("runs") / "straight")
    summary = runs.train(SPEC, run_dir, console=False, devices=one_device())
    return run_dir, summary


def test_config_round_trip(tmp_path):
    spec = dataclasses.replace(
        SPEC,
        arch="sebulba",
        arch_config=SebulbaConfig(learner_device_ids=(1,), envs_per_actor=16),
        env_options=EnvOptions(params={"gravity": 12.0, "max_steps_in_episode": 9}, observe=(2,)),
    )
    runs.save_spec(str(tmp_path), spec)
    assert runs.load_spec(str(tmp_path)) == spec
    with open(tmp_path / "config.json") as f:
        data = json.load(f)
    assert data["agent_config"]["hidden_sizes"] == [32, 32]
    assert data["env_options"] == {
        "params": {"gravity": 12.0, "max_steps_in_episode": 9},
        "observe": [2],
    }
    del data["env_options"]  # a run directory saved before env options existed
    assert runs.spec_from_dict(data).env_options == EnvOptions()


@pytest.mark.slow
def test_env_options_are_saved_and_kept_by_resume_and_eval(tmp_path, two_devices):
    """A Sebulba run on envpool's CartPole with ``max_episode_steps=10`` and positions only
    (``observe=(0, 2)``): the actors and the evaluator see 2 entries (the network's first layer
    takes 2 inputs) and no episode lasts more than 10 steps, in training, in the resumed run and
    in ``evaluate_run``; config.json keeps the options."""
    options = EnvOptions(params={"max_episode_steps": 10}, observe=(0, 2))
    spec = runs.RunSpec(
        arch="sebulba",
        agent="ppo",
        env="envpool:CartPole-v1",
        seed=0,
        total_timesteps=2 * 8 * 16,
        agent_config=PPOConfig(num_minibatches=2, hidden_sizes=(16,)),
        arch_config=SebulbaConfig(
            learner_device_ids=(1,), envs_per_actor=8, rollout_len=16, deterministic=True
        ),
        options=runs.RunOptions(tensorboard=False, eval_interval=2, eval_episodes=4),
        env_options=options,
    )
    run_dir = str(tmp_path / "run")
    runs.train(spec, run_dir, console=False, devices=two_devices)
    loaded = runs.load_spec(run_dir)
    assert loaded.env_options == options
    longer = dataclasses.replace(loaded, total_timesteps=4 * 8 * 16)
    resumed = runs.train(longer, run_dir, resume=True, console=False, devices=two_devices)
    assert resumed["start_update"] == 2 and resumed["num_updates"] == 4
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    lengths = [r["episode_return"] for r in records if r["kind"] == "train" and r["episodes"]]
    evals = [r["eval_return"] for r in records if r["kind"] == "eval"]
    assert len(lengths) >= 2 and len(evals) == 2  # CartPole's return is its length
    assert max(lengths + evals) <= 10.0 and min(lengths) >= 8.0
    system = runs.build_system(longer, two_devices)
    assert system.recipe.env_spec.observation.shape == (2,)
    with Checkpointer(run_dir) as checkpointer:
        state, _ = checkpointer.restore(system.init(0))
    shapes = {x.shape for x in jax.tree.leaves(state.learner.params)}
    assert shapes >= {(1, 2, 16)} and (1, 4, 16) not in shapes  # [members, inputs, hidden]
    result = runs.evaluate_run(run_dir, episodes=4)
    assert result["updates"] == 4 and 1.0 <= result["min"] <= result["max"] <= 10.0


def test_unknown_fields_in_a_config_are_named(tmp_path):
    data = SPEC.to_dict()
    data["agent_config"]["learning_rate"] = 1e-3
    with pytest.raises(Exception, match=r"unknown field.*learning_rate.*PPOConfig"):
        runs.spec_from_dict(data)


def test_run_directory_holds_config_metrics_and_events(straight_run):
    run_dir, summary = straight_run
    assert runs.load_spec(run_dir) == SPEC
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["updates"] for r in train] == [2, 4, 6, 8]
    assert [r["step"] for r in train] == [128, 256, 384, 512]
    for record in train:
        assert {"sps", "elapsed_s", "episode_return", "episode_returns", "loss"} <= set(record)
        assert len(record["episode_returns"]) == 2  # one per seed
    assert [r["updates"] for r in evals] == [4, 8]
    for record in evals:
        assert record["episodes"] == 2 * 3 and len(record["eval_returns"]) == 2
        assert np.isclose(record["eval_return"], np.mean(record["eval_returns"]))
    # TensorBoard: read the event file back (TFRecord framing, Event protos).
    from tensorboardX.proto import event_pb2

    tb = os.path.join(run_dir, "tb")
    (name,) = os.listdir(tb)
    tags = {}
    with open(os.path.join(tb, name), "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
        offset += 12 + length + 4
        for value in event.summary.value:
            tags.setdefault(value.tag, []).append((event.step, value.simple_value))
    assert [s for s, _ in tags["train/loss"]] == [128, 256, 384, 512]
    assert np.allclose([v for _, v in tags["train/loss"]], [r["loss"] for r in train])
    assert [s for s, _ in tags["eval/eval_return"]] == [256, 512]
    assert summary["total_steps"] == 512 and summary["run_dir"] == run_dir


def documented_keys(section: str) -> dict[str, str]:
    """``{key: meaning}`` from the table under ``## <section>`` in docs/metrics.md."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    body = text.split(f"\n## {section}")[1].split("\n## ")[0]
    keys = {}
    for line in body.splitlines():
        if line.startswith("| `"):
            names, meaning = line.strip("| ").split(" | ", 1)
            keys.update((name, meaning) for name in re.findall(r"`(\w+)`", names))
    return keys


def test_metrics_jsonl_holds_the_documented_keys(straight_run):
    """Every key of a PPO Anakin run's records is in docs/metrics.md's tables, and every key
    documented there (but Sebulba's) is in the records."""
    run_dir, _ = straight_run
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    train_docs = documented_keys("`train` records")
    eval_docs = documented_keys("`eval` records")
    sebulba_only = {k for k, meaning in train_docs.items() if meaning.startswith("Sebulba:")}
    assert sebulba_only == {"actor_sps", "policy_lag", "queue_size"}
    for record in records:
        if record["kind"] == "train":
            assert set(record) == set(train_docs) - sebulba_only, record
        else:
            assert record["kind"] == "eval"
            assert set(record) == set(eval_docs), record


def test_anakin_resume_is_bitwise_exact(straight_run, tmp_path):
    run_dir, summary = straight_run
    # A copy of the run as it was after 4 updates: only the checkpoint of update 4.
    resumed = str(tmp_path / "resumed")
    shutil.copytree(run_dir, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "8"))
    assert Checkpointer(resumed).steps() == [4]
    again = runs.train(SPEC, resumed, resume=True, console=False, devices=one_device())
    assert again["start_update"] == 4
    assert again["params_checksum"] == summary["params_checksum"]
    (a, meta_a), (b, meta_b) = final_state(run_dir), final_state(resumed)
    assert meta_a["updates"] == meta_b["updates"] == 8
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):  # params, optimizer, env state, keys, counters
        np.testing.assert_array_equal(x, y)


def test_ctrl_c_saves_a_checkpoint_that_resumes_exactly(straight_run, tmp_path, monkeypatch):
    _, summary = straight_run
    interrupted = str(tmp_path / "interrupted")
    spec = dataclasses.replace(
        SPEC, options=dataclasses.replace(SPEC.options, checkpoint_interval=0, eval_interval=0)
    )
    original = runs.training._Hooks.after_call

    def stop_after_six(self, state, updates, last):
        original(self, state, updates, last)
        if updates == 6:
            raise KeyboardInterrupt

    monkeypatch.setattr(runs.training._Hooks, "after_call", stop_after_six)
    with pytest.raises(KeyboardInterrupt):
        runs.train(spec, interrupted, console=False, devices=one_device())
    assert Checkpointer(interrupted).steps() == [6]
    monkeypatch.setattr(runs.training._Hooks, "after_call", original)
    again = runs.train(spec, interrupted, resume=True, console=False, devices=one_device())
    assert again["params_checksum"] == summary["params_checksum"]


def test_ctrl_c_while_reporting_saves_the_state_under_its_own_update_count(
    straight_run, tmp_path, monkeypatch
):
    """Ctrl-C in the progress callback: the host reports a call's metrics while the next call
    runs, so the state has moved on by one call; its checkpoint is labelled with the updates it
    holds (6, not the 4 being reported) and resumes to the uninterrupted run, bitwise."""
    from podracer.runs.logging import Logger

    run_dir, summary = straight_run
    interrupted = str(tmp_path / "interrupted")
    spec = dataclasses.replace(
        SPEC, options=dataclasses.replace(SPEC.options, checkpoint_interval=0, eval_interval=0)
    )
    original = Logger.log
    reported = []

    def stop_at_four(self, record):
        original(self, record)
        if record.get("kind", "train") == "train":
            reported.append(record["updates"])
            if record["updates"] == 4:
                raise KeyboardInterrupt

    monkeypatch.setattr(Logger, "log", stop_at_four)
    with pytest.raises(runs.Interrupted) as stop:
        runs.train(spec, interrupted, console=False, devices=one_device())
    assert reported == [2, 4]
    assert (stop.value.saved, stop.value.latest) == (6, 6)
    assert Checkpointer(interrupted).steps() == [6]
    monkeypatch.setattr(Logger, "log", original)
    again = runs.train(spec, interrupted, resume=True, console=False, devices=one_device())
    assert again["start_update"] == 6
    assert again["params_checksum"] == summary["params_checksum"]
    (a, meta_a), (b, meta_b) = final_state(run_dir), final_state(interrupted)
    assert meta_a["updates"] == meta_b["updates"] == 8
    for x, y in zip(a, b, strict=True):  # params, optimizer, env state, keys, counters
        np.testing.assert_array_equal(x, y)


def test_ctrl_c_before_the_first_update_saves_nothing_and_says_so(tmp_path, monkeypatch):
    from podracer.cli.train import interrupted_message
    from podracer.loops import anakin

    def interrupt_compiling(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(anakin.system, "_compiled", interrupt_compiling)
    run_dir = str(tmp_path / "run")
    with pytest.raises(runs.Interrupted) as stop:
        runs.train(SPEC, run_dir, console=False, devices=one_device())
    assert (stop.value.saved, stop.value.latest) == (None, None)
    assert Checkpointer(run_dir).steps() == []
    assert interrupted_message(stop.value, run_dir) == (
        f"podracer: interrupted; nothing was saved: no checkpoint in {run_dir}"
    )


def test_interrupted_messages_say_what_was_saved(tmp_path):
    from podracer.cli.train import interrupted_message

    run_dir = str(tmp_path / "run")
    resume = f"podracer train --resume {run_dir}"
    assert interrupted_message(runs.Interrupted(6, 6), run_dir) == (
        f"podracer: interrupted; the state after 6 updates is saved: {resume}"
    )
    assert interrupted_message(runs.Interrupted(None, 4), run_dir) == (
        "podracer: interrupted; the last state could not be saved, the latest checkpoint is "
        f"of update 4: {resume}"
    )
    # A Ctrl-C before the loop (building, compiling) reads the checkpoints on disk.
    assert interrupted_message(KeyboardInterrupt(), run_dir).endswith(
        f"nothing was saved: no checkpoint in {run_dir}"
    )
    for name in ("4", "12", "12.orbax-checkpoint-tmp-1"):
        os.makedirs(os.path.join(run_dir, "checkpoints", name))
    assert "the latest checkpoint is of update 12:" in interrupted_message(
        KeyboardInterrupt(), run_dir
    )


def test_checkpoints_keep_the_latest_and_the_best(tmp_path):
    """keep=2: after 5 saves, the last 2 remain plus the best by eval return, also after the
    directory is opened again (a resumed run); a save without an eval return (Ctrl-C) is kept
    only while it is among the last 2."""
    state = {"w": np.arange(3, dtype=np.float32)}
    with Checkpointer(str(tmp_path), keep=2) as checkpointer:
        assert checkpointer.best_step() is None
        for step, eval_return in zip(range(1, 6), [10.0, 50.0, 20.0, 30.0, 40.0], strict=True):
            checkpointer.save(step, {"w": state["w"] + step}, {"updates": step}, eval_return)
        assert checkpointer.steps() == [2, 4, 5]
        assert checkpointer.eval_returns() == {2: 50.0, 4: 30.0, 5: 40.0}
        assert checkpointer.best_step() == 2
        restored, meta = checkpointer.restore(state, checkpointer.best_step())
        np.testing.assert_array_equal(restored["w"], [2.0, 3.0, 4.0])
        assert meta == {"updates": 2, "eval_return": 50.0}
    with Checkpointer(str(tmp_path), keep=2) as checkpointer:  # the returns are on disk
        assert checkpointer.best_step() == 2
        checkpointer.save(6, state, {"updates": 6})  # no eval return
        assert checkpointer.steps() == [2, 5, 6]
        checkpointer.save(7, state, {"updates": 7})
        assert checkpointer.steps() == [2, 6, 7] and checkpointer.best_step() == 2
        checkpointer.save(8, state, {"updates": 8}, 60.0)
        assert checkpointer.steps() == [7, 8]  # the best is among the latest
        assert checkpointer.best_step() == 8 and checkpointer.eval_returns() == {8: 60.0}


def test_arrays_of_no_elements_are_saved_and_restored(tmp_path, two_devices):
    """Orbax refuses arrays of no elements (MuJoCo Playground's state has MJX's ``act [0]`` for
    a model without activations): they are saved as nothing and restored from the template with
    their shapes, dtypes and placements; keys and the other leaves as they were."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(jax.make_mesh((2,), ("data",), devices=two_devices), P("data"))
    state = {
        "act": jnp.zeros((0,), jnp.float32),
        "per_env": jax.device_put(jnp.zeros((2, 0, 3), jnp.int32), sharding),
        "w": jax.device_put(jnp.arange(4, dtype=jnp.float32), sharding),
        "key": jax.random.key(3),
    }
    with Checkpointer(str(tmp_path), keep=1) as checkpointer:
        checkpointer.save(1, {**state, "w": state["w"] + 1}, {"updates": 1})
        restored, meta = checkpointer.restore(state)
    assert meta == {"updates": 1}
    np.testing.assert_array_equal(restored["w"], [1.0, 2.0, 3.0, 4.0])
    assert restored["w"].sharding == sharding
    np.testing.assert_array_equal(
        jax.random.key_data(restored["key"]), jax.random.key_data(state["key"])
    )
    for name in ("act", "per_env"):
        assert restored[name].shape == state[name].shape, name
        assert restored[name].dtype == state[name].dtype, name
    assert restored["per_env"].sharding == sharding


def test_saving_and_restoring_never_collect_tensorstore_metrics(tmp_path, monkeypatch):
    """Each call of ``tensorstore.experimental_collect_matching_metrics`` keeps about 3 KB for
    good (TensorStore 0.1.86), and orbax makes them around every array it saves or restores,
    only to log a throughput line: podracer's checkpoints must not make any (a run that
    checkpoints every second would grow by megabytes an hour)."""
    import tensorstore

    calls = []
    original = tensorstore.experimental_collect_matching_metrics

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(tensorstore, "experimental_collect_matching_metrics", counted)
    state = {"w": jnp.arange(3, dtype=jnp.float32), "b": jnp.ones((2, 2))}  # orbax's jax.Array
    with Checkpointer(str(tmp_path), keep=2) as checkpointer:  # handler is the one that calls
        for step in (1, 2, 3):
            checkpointer.save(step, state, {"updates": step})
        restored, _ = checkpointer.restore(state, 3)
    np.testing.assert_array_equal(restored["b"], state["b"])
    assert calls == []


@pytest.mark.slow
def test_orbax_resolves_a_local_directory_spec_as_tensorstore_does(tmp_path):
    """orbax's module gets a ``tensorstore`` whose ``KvStore.Spec(spec).to_json()`` answers a
    plain local-file spec without TensorStore (whose call leaks): the answer must be
    TensorStore's, and every other spec must still reach TensorStore."""
    import tensorstore
    from orbax.checkpoint._src.serialization import tensorstore_utils

    from podracer.runs.checkpoint import local_file_spec

    for path in (str(tmp_path) + "/", "/a/b/c/", "/with space/x/"):
        spec = {"driver": "file", "path": path}
        assert local_file_spec(spec)
        ours = tensorstore_utils.ts.KvStore.Spec(spec).to_json()
        assert ours == tensorstore.KvStore.Spec(spec).to_json() == spec
    memory = {"driver": "memory"}
    assert not local_file_spec(memory) and not local_file_spec({"driver": "file", "path": "x/"})
    resolved = tensorstore_utils.ts.KvStore.Spec(memory)
    assert isinstance(resolved, tensorstore.KvStore.Spec)
    assert resolved.to_json() == tensorstore.KvStore.Spec(memory).to_json()


@pytest.mark.slow
def test_evaluate_the_best_checkpoint(straight_run, capsys):
    run_dir, _ = straight_run
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        evals = [r for r in map(json.loads, f) if r["kind"] == "eval"]
    best = max(evals, key=lambda r: (r["eval_return"], r["updates"]))["updates"]
    with Checkpointer(run_dir) as checkpointer:
        assert checkpointer.eval_returns() == {r["updates"]: r["eval_return"] for r in evals}
        assert checkpointer.best_step() == best
    result = runs.evaluate_run(run_dir, episodes=2, best=True)
    assert result["updates"] == best and result["episodes"] == 2 * 2
    with pytest.raises(ConfigError, match="--best and --step"):
        runs.evaluate_run(run_dir, episodes=2, best=True, step=4)
    from podracer.cli import main as cli

    assert cli.main(["eval", run_dir, "--best", "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["updates"] == best


def test_default_run_dir_names_env_agent_arch_and_time():
    import re
    import time

    from podracer.population.ensemble import PopulationConfig

    before = time.time()
    name = runs.default_run_dir(SPEC)
    match = re.fullmatch(r"runs/gymnax_CartPole-v1-ppo-anakin-(\d{8}-\d{6})", name)
    assert match, name
    stamp = time.mktime(time.strptime(match.group(1), "%Y%m%d-%H%M%S"))
    assert before - 1 <= stamp <= time.time()
    population = dataclasses.replace(SPEC, population=PopulationConfig(size=4))
    assert re.fullmatch(
        r"out/gymnax_CartPole-v1-ppo-anakin-pop4-\d{8}-\d{6}",
        runs.default_run_dir(population, root="out"),
    )


class FakeWandb:
    """A stand-in for the wandb module: records init's arguments and the logged values."""

    def __init__(self):
        self.inits, self.logged, self.finished = [], [], 0
        fake = self

        class Run:
            def log(self, values, step):
                fake.logged.append((step, values))

            def finish(self):
                fake.finished += 1

        self.Run = Run

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return self.Run()


@pytest.mark.parametrize("online", [False, True])
def test_wandb_logger_is_offline_unless_asked(tmp_path, monkeypatch, online):
    import sys

    from podracer.runs.logging import make_logger

    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    config = {"agent": "ppo"}
    with make_logger(
        str(tmp_path),
        512,
        console=False,
        tensorboard=False,
        wandb=True,
        wandb_online=online,
        config=config,
    ) as logger:
        logger({"step": 128, "updates": 2, "loss": 0.5, "episode_returns": [1.0, None]})
        logger({"kind": "eval", "step": 256, "eval_return": 21.5, "episodes": 6})
    assert fake.inits == [
        {"dir": str(tmp_path), "config": config, "mode": "online" if online else "offline"}
    ]
    assert fake.logged == [
        (128, {"train/updates": 2.0, "train/loss": 0.5}),
        (256, {"eval/eval_return": 21.5, "eval/episodes": 6.0}),
    ]
    assert fake.finished == 1


def test_wandb_is_an_optional_extra_not_a_dev_dependency():
    import tomllib
    from pathlib import Path

    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["wandb"]] == ["wandb"]
    for requirement in (*project["dependencies"], *extras["dev"]):
        assert not requirement.startswith("wandb"), requirement


class _Stop(Exception):
    """Raised by a patched make_logger: the test has what it wanted."""


@pytest.mark.parametrize(
    "flags, wandb, online",
    [([], False, False), (["--wandb"], True, False), (["--wandb-online"], True, True)],
)
def test_wandb_flags_reach_the_logger_in_train_and_sweep(
    tmp_path, monkeypatch, flags, wandb, online
):
    from podracer.cli import main as cli
    from podracer.cli.parse import parse_selectors, parse_train_args
    from podracer.runs import logging

    calls = []

    def capture(run_dir, total_steps, **kwargs):
        calls.append(kwargs)
        raise _Stop

    monkeypatch.setattr(runs.training, "make_logger", capture)
    monkeypatch.setattr(logging, "make_logger", capture)
    common = ["--total-timesteps", "512", "--arch.num-envs", "4", "--agent.num-minibatches", "2"]
    for command in ("train", "sweep"):
        with pytest.raises(_Stop):
            cli.main([command, *common, *flags, "--run-dir", str(tmp_path / command), "--quiet"])
    options = parse_train_args(parse_selectors([*common, *flags]))[0].options
    assert (options.wandb, options.wandb_online) == (wandb, online)
    assert [(c["wandb"], c["wandb_online"]) for c in calls] == [(wandb, online)] * 2
    assert calls[0]["config"]["options"]["wandb_online"] is online


def test_damaged_checkpoint_is_reported_and_the_previous_one_used(straight_run, tmp_path):
    run_dir, _ = straight_run
    damaged = str(tmp_path / "damaged")
    shutil.copytree(run_dir, damaged)
    for root, _, files in os.walk(os.path.join(damaged, "checkpoints", "8")):
        for name in files:
            with open(os.path.join(root, name), "w") as f:
                f.write("")  # truncated to nothing
    with pytest.raises(CheckpointError, match=r"step 8 .* cannot be read.*--resume-step 4"):
        runs.evaluate_run(damaged, episodes=2)
    result = runs.evaluate_run(damaged, episodes=2, step=4)
    assert result["updates"] == 4 and result["episodes"] == 2 * 2


@pytest.mark.slow
def test_evaluate_run_reports_returns(straight_run):
    run_dir, _ = straight_run
    result = runs.evaluate_run(run_dir, episodes=4)
    assert result["updates"] == 8 and result["episodes"] == 8
    assert result["min"] <= result["mean"] <= result["max"]
    assert len(result["per_seed_mean"]) == 2
    assert np.isclose(result["mean"], np.mean(result["per_seed_mean"]))


def test_sebulba_resume_restores_the_state_an_uninterrupted_run_had(tmp_path, two_devices):
    """Sebulba's environments start afresh on resume, so what is exact is the learner state: the
    interrupted run's checkpoint at update 2 is the uninterrupted run's state at update 2, and the
    resumed run starts from it."""
    spec = runs.RunSpec(
        arch="sebulba",
        agent="ppo",
        env="envpool:CartPole-v1",
        seed=0,
        total_timesteps=4 * 8 * 16,
        # a constant learning rate: a shorter run must not anneal faster
        agent_config=PPOConfig(num_minibatches=2, hidden_sizes=(16,), anneal_lr=False),
        arch_config=SebulbaConfig(
            learner_device_ids=(1,), envs_per_actor=8, rollout_len=16, deterministic=True
        ),
        options=runs.RunOptions(tensorboard=False, checkpoint_interval=2, keep_checkpoints=4),
    )
    whole = str(tmp_path / "whole")
    runs.train(spec, whole, console=False, devices=two_devices)
    interrupted = str(tmp_path / "interrupted")
    runs.train(
        dataclasses.replace(spec, total_timesteps=2 * 8 * 16),
        interrupted,
        console=False,
        devices=two_devices,
    )
    template = runs.build_system(spec, two_devices).init(spec.seed)
    with Checkpointer(whole) as checkpointer:
        uninterrupted, _ = checkpointer.restore(template, 2)
    with Checkpointer(interrupted) as checkpointer:
        saved, meta = checkpointer.restore(template)
    assert meta["updates"] == 2 and saved.learner.update_count.tolist() == [2]
    for a, b in zip(jax.tree.leaves(uninterrupted), jax.tree.leaves(saved), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    resumed = runs.train(spec, interrupted, resume=True, console=False, devices=two_devices)
    assert resumed["start_update"] == 2 and resumed["num_updates"] == 4
    with Checkpointer(interrupted) as checkpointer:
        final, meta = checkpointer.restore(template)
    assert meta["updates"] == 4 and final.learner.update_count.tolist() == [4]
    assert params_checksum(final.learner.params) == resumed["params_checksum"]
