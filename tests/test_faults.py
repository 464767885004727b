"""Faults during a run, on both loops: each ends the run promptly with its cause in one line,
a non-zero exit status, and the newest complete checkpoint intact.

- SIGTERM (a scheduler's stop): handled as Ctrl-C, the state reached is saved, exit 143 (a real
  ``podracer train`` process, signalled from outside);
- a full disk at checkpoint time (``ENOSPC`` from the file system, simulated by making orbax's
  save raise it from the second checkpoint on): one line naming the directory and the error,
  exit 2, the first checkpoint kept.

Ctrl-C, a thread of Sebulba that raises and a process that dies are tested in
``tests/test_runs.py``, ``tests/test_sebulba.py`` and ``tests/test_multihost.py``; a diverging
loss in ``tests/test_divergence.py``.
"""

import errno
import os
import signal
import subprocess
import sys
import time

import orbax.checkpoint as ocp
import pytest

from podracer import cli
from podracer.checkpoint import CHECKPOINT_DIR, Checkpointer

LOOPS = {
    "anakin": ["--arch", "anakin", "--arch.num-envs", "8", "--agent.num-minibatches", "2"],
    "sebulba": ["--arch", "sebulba", "--env", "gymnax:CartPole-v1", "--arch.envs-per-actor", "8"],
}
COMMON = ["--arch.rollout-len", "16", "--no-tensorboard", "--quiet"]


def steps_on_disk(run_dir) -> list[int]:
    directory = os.path.join(run_dir, CHECKPOINT_DIR)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(name) for name in names if name.isdigit())


@pytest.mark.parametrize("arch", list(LOOPS))
def test_sigterm_saves_the_state_reached_and_exits_143(arch, tmp_path):
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    argv = [sys.executable, "-m", "podracer.cli", "train", "--run-dir", str(run), *LOOPS[arch]]
    argv += [*COMMON, "--total-timesteps", str(10**8), "--checkpoint-interval", "20"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not steps_on_disk(run):  # mid-run: the first periodic checkpoint is there
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=30)
        waited = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.strip().splitlines()
    assert proc.returncode == 143, err[-3000:]
    assert waited < 10, f"{waited:.1f} s from SIGTERM to exit"
    assert "Traceback" not in err
    assert lines[-1].startswith("podracer: terminated (SIGTERM); the state after "), lines[-1]
    saved = int(lines[-1].split("the state after ")[1].split()[0])
    assert saved == steps_on_disk(run)[-1] and saved >= 20
    with Checkpointer(str(run)) as checkpointer:  # complete: orbax lists it and reads it back
        assert checkpointer.latest_step() == saved


@pytest.mark.parametrize("arch", list(LOOPS))
def test_a_full_disk_at_checkpoint_time_is_one_line_and_keeps_the_last_checkpoint(
    arch, tmp_path, monkeypatch
):
    save = ocp.CheckpointManager.save
    calls = []

    def full_disk(self, step, *args, **kwargs):
        calls.append(step)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path))
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", full_disk)
    errors = []
    monkeypatch.setattr(sys, "stderr", type("E", (), {"write": errors.append, "flush": id})())
    run = str(tmp_path / "run")
    argv = ["train", "--run-dir", run, *LOOPS[arch], *COMMON]
    code = cli.main([*argv, "--total-timesteps", str(8 * 16 * 6), "--checkpoint-interval", "2"])
    lines = "".join(errors).splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "the checkpoint of update 4 cannot be written to " in lines[0]
    assert (
        "No space left on device" in lines[0]
        and "latest complete checkpoint: update 2" in (lines[0])
    )
    assert steps_on_disk(run) == [2]


@pytest.mark.parametrize("arch", list(LOOPS))
def test_an_environment_that_raises_ends_the_run_with_its_error(arch, tmp_path, monkeypatch):
    """The step of a JAX environment raises on the host mid-run (Anakin: inside the compiled
    step; Sebulba: in an actor thread): the run ends within 10 s with the environment's error,
    no thread of the run is left, and the checkpoint saved before the fault is intact."""
    import threading

    import faulty_env

    monkeypatch.setattr(faulty_env, "STEPS", {"calls": 0, "failed_at": None})
    before = {t.name for t in threading.enumerate()}
    run = str(tmp_path / "run")
    argv = ["train", "--run-dir", run, *LOOPS[arch], *COMMON, "--env", "faulty_env:make_env"]
    argv += ["--total-timesteps", str(8 * 16 * 1000), "--checkpoint-interval", "4"]
    argv += ["--arch.updates-per-call", "4"] if arch == "anakin" else []

    def arm():  # the fault comes after the first checkpoint
        while not steps_on_disk(run) and faulty_env.STEPS["calls"] < 10**6:
            time.sleep(0.05)
        faulty_env.FAULT_AT = faulty_env.STEPS["calls"] + 3

    monkeypatch.setattr(faulty_env, "FAULT_AT", 10**9)  # none before arm() sets it
    threading.Thread(target=arm, daemon=True).start()
    with pytest.raises(Exception, match="the environment failed at step call") as raised:
        cli.main(argv)
    ended = time.monotonic()
    assert ended - faulty_env.STEPS["failed_at"] < 10
    assert "EnvironmentFault" in str(raised.value) or isinstance(
        raised.value.__cause__, faulty_env.EnvironmentFault
    )
    left = {t.name for t in threading.enumerate()} - before
    assert not {name for name in left if name.startswith(("actor-", "learner"))}, left
    saved = steps_on_disk(run)
    assert saved and saved[-1] % 4 == 0
    with Checkpointer(run) as checkpointer:
        assert checkpointer.latest_step() == saved[-1]
