"""Run directories: config round trip, loggers, checkpoints, exact resume, evaluation."""

import dataclasses
import json
import os
import shutil
import struct

import jax
import numpy as np
import pytest

from podracer import runs
from podracer.agents import PPOConfig
from podracer.anakin import AnakinConfig
from podracer.checkpoint import Checkpointer, CheckpointError
from podracer.sebulba import SebulbaConfig

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
    from podracer import anakin
    from podracer.checkpoint import to_raw

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
    )
    runs.save_spec(str(tmp_path), spec)
    assert runs.load_spec(str(tmp_path)) == spec
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["agent_config"]["hidden_sizes"] == [32, 32]


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
    original = runs._Hooks.after_call

    def stop_after_six(self, state, updates, last):
        original(self, state, updates, last)
        if updates == 6:
            raise KeyboardInterrupt

    monkeypatch.setattr(runs._Hooks, "after_call", stop_after_six)
    with pytest.raises(KeyboardInterrupt):
        runs.train(spec, interrupted, console=False, devices=one_device())
    assert Checkpointer(interrupted).steps() == [6]
    monkeypatch.setattr(runs._Hooks, "after_call", original)
    again = runs.train(spec, interrupted, resume=True, console=False, devices=one_device())
    assert again["params_checksum"] == summary["params_checksum"]


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


def test_evaluate_run_reports_returns(straight_run):
    run_dir, _ = straight_run
    result = runs.evaluate_run(run_dir, episodes=4)
    assert result["updates"] == 8 and result["episodes"] == 8
    assert result["min"] <= result["mean"] <= result["max"]
    assert len(result["per_seed_mean"]) == 2
    assert np.isclose(result["mean"], np.mean(result["per_seed_mean"]))


def test_sebulba_resume_restores_params_and_counters(tmp_path, two_devices):
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
        options=runs.RunOptions(tensorboard=False),
    )
    run_dir = str(tmp_path / "sebulba")
    first = runs.train(spec, run_dir, console=False, devices=two_devices)
    template, _ = runs.sebulba_learner_template(spec)
    with Checkpointer(run_dir) as checkpointer:
        saved, meta = checkpointer.restore(template)
    assert meta["updates"] == 2 and int(saved.update_count) == 2
    from podracer.anakin import params_checksum

    assert params_checksum(saved.params) == first["params_checksum"]
    longer = dataclasses.replace(spec, total_timesteps=4 * 8 * 16)
    second = runs.train(longer, run_dir, resume=True, console=False, devices=two_devices)
    assert second["start_update"] == 2 and second["num_updates"] == 4
    with Checkpointer(run_dir) as checkpointer:
        final, meta = checkpointer.restore(template)
    assert meta["updates"] == 4 and int(final.update_count) == 4
    assert params_checksum(final.params) == second["params_checksum"]
