"""The fault matrix: on both loops, each fault ends the run promptly (within 10 s of the fault)
with its cause in one message, a non-zero exit status, no thread of the run left, and the newest
complete checkpoint intact.

- SIGINT (Ctrl-C) and SIGTERM (a scheduler's stop), sent from outside to a real
  ``podracer train`` process mid-run: the state reached is saved, exit 130 and 143;
- a full disk at checkpoint time (``ENOSPC`` from orbax's save from the second checkpoint on):
  one line naming the directory, the error and the latest complete checkpoint, exit 2;
- an environment whose step raises mid-run (Anakin: inside the compiled step, through a host
  callback; Sebulba: in an actor thread) and a learner whose loss raises (Anakin: inside the
  compiled step; Sebulba: in the learner thread): the exception, raised out of ``cli.main`` (a
  bug in user code keeps its traceback), its message naming the fault.

The faulty environment and agent are ``tests/faulty.py``. Elsewhere: a process that dies
(``tests/test_multihost.py``), a diverging loss (``tests/test_divergence.py``), SIGKILL during a
checkpoint (``tests/test_checkpoint_kills.py``).
"""

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import orbax.checkpoint as ocp
import pytest

from podracer.cli import main as cli
from podracer.runs.checkpoint import CHECKPOINT_DIR, Checkpointer

pytestmark = pytest.mark.slow  # the full tier (docs/design.md, "Tests")

LOOPS = {
    "anakin": ["--arch", "anakin", "--arch.num-envs", "8", "--agent.num-minibatches", "2"],
    "sebulba": ["--arch", "sebulba", "--env", "gymnax:CartPole-v1", "--arch.envs-per-actor", "8"],
}
COMMON = ["--arch.rollout-len", "16", "--no-tensorboard", "--quiet"]


def steps_on_disk(run_dir) -> list[int]:
    directory = os.path.join(run_dir, CHECKPOINT_DIR)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(name) for name in names if name.isdigit())


def assert_latest_complete(run_dir, step):
    with Checkpointer(str(run_dir)) as checkpointer:  # orbax lists it: complete
        assert checkpointer.latest_step() == step == steps_on_disk(run_dir)[-1]


def run_threads():
    return {t.name for t in threading.enumerate() if t.name.startswith("podracer-")}


def signalled(arch, tmp_path, signum, status, word):
    """A real process, signalled once its first periodic checkpoint is on disk."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    args = ["train", "--run-dir", str(run), *LOOPS[arch], *COMMON]
    args += ["--total-timesteps", str(10**8), "--checkpoint-interval", "20"]
    # A shell's background job inherits SIGINT ignored: the child sets Python's Ctrl-C handler
    # before it runs the command line (not preexec_fn: forking a process with JAX's threads).
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"sys.argv = ['podracer'] + {args!r}; "
        "runpy.run_module('podracer.cli.main', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", start], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not steps_on_disk(run):
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.1)
        proc.send_signal(signum)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.strip().splitlines()
    assert proc.returncode == status, err[-3000:]
    assert waited < 10, f"{waited:.1f} s from the signal to the exit"
    assert "Traceback" not in err
    assert lines[-1].startswith(f"podracer: {word}; the state after "), lines[-1]
    saved = int(lines[-1].split("the state after ")[1].split()[0])
    assert saved >= 20
    assert_latest_complete(run, saved)


def disk_full(arch, tmp_path, monkeypatch):
    save = ocp.CheckpointManager.save
    calls = []

    def full(self, step, *args, **kwargs):
        calls.append(step)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path))
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    errors = []
    monkeypatch.setattr(sys, "stderr", type("E", (), {"write": errors.append, "flush": id})())
    run = str(tmp_path / "run")
    argv = ["train", "--run-dir", run, *LOOPS[arch], *COMMON]
    code = cli.main([*argv, "--total-timesteps", str(8 * 16 * 6), "--checkpoint-interval", "2"])
    # The error is one line, after the line of a preset where one applies (Sebulba PPO's).
    lines = [x for x in "".join(errors).splitlines() if not x.startswith("preset ")]
    assert code == 2 and len(lines) == 1, lines
    assert "the checkpoint of update 4 cannot be written to " in lines[0]
    assert "No space left on device" in lines[0]
    assert "latest complete checkpoint: update 2" in lines[0]
    assert not run_threads()
    assert_latest_complete(run, 2)


def raising(what, arch, tmp_path, monkeypatch):
    """The environment or the learner raises a few calls after the first checkpoint."""
    import faulty

    monkeypatch.setattr(faulty, "CALLS", {"env": 0, "learner": 0})
    monkeypatch.setattr(faulty, "FAULT_AT", {"env": 10**9, "learner": 10**9})
    monkeypatch.setattr(faulty, "FAILED_AT", {})
    run = str(tmp_path / "run")
    argv = ["train", "--run-dir", run, *LOOPS[arch], *COMMON]
    argv += ["--env", "faulty:make_env"] if what == "env" else ["--agent", "faulty:SPEC"]
    argv += ["--total-timesteps", str(8 * 16 * 1000), "--checkpoint-interval", "4"]
    if arch == "anakin":
        # Two seeds, one per device: no collective between the devices. With one seed's
        # environments split over both, the fault can end one device's program while the other
        # waits in the gradients' all-reduce, which XLA:CPU ends by aborting the process after
        # its collective timeout (docs/design.md, "Failure modes"): a different fault.
        argv += ["--arch.updates-per-call", "4", "--arch.num-seeds", "2"]
        argv += ["--arch.member-shards", "2"]

    def arm():
        while not steps_on_disk(run):
            time.sleep(0.05)
        faulty.FAULT_AT[what] = faulty.CALLS[what] + 3

    threading.Thread(target=arm, daemon=True).start()
    with pytest.raises(Exception, match=f"the {what} failed at call"):
        cli.main(argv)
    assert time.monotonic() - faulty.FAILED_AT[what] < 10
    assert not run_threads()
    saved = steps_on_disk(run)
    assert saved and saved[-1] % 4 == 0
    assert_latest_complete(run, saved[-1])


FAULTS = {
    "sigint": lambda a, t, m: signalled(a, t, signal.SIGINT, 130, "interrupted"),
    "sigterm": lambda a, t, m: signalled(a, t, signal.SIGTERM, 143, "terminated (SIGTERM)"),
    "disk-full": disk_full,
    "env-raises": lambda a, t, m: raising("env", a, t, m),
    "learner-raises": lambda a, t, m: raising("learner", a, t, m),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("arch", list(LOOPS))
def test_a_fault_ends_the_run_with_its_cause(arch, fault, tmp_path, monkeypatch):
    FAULTS[fault](arch, tmp_path, monkeypatch)
