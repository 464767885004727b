"""The parent of a multi-process run's process that is not the coordinator (host side, edge).

When process 0 dies, the coordination service it hosts goes with it, and JAX's C++ client in
every other process aborts that process at once, from a native thread, before any Python code
can run (``docs/scaling.md``, "When a process dies or stops answering"): its last words are the
runtime's fatal log line and a native stack trace, and its status is SIGABRT's. No Python hook
can replace that handler in JAX 0.10, so ``podracer train`` runs such a process as the child of
this small parent, which passes the child's output through and, when the child ends by that
abort, prints podracer's one line instead (naming the process that stopped and how to resume)
and exits with :data:`podracer.parallel.PEER_LOST_EXIT_CODE`, as
:class:`podracer.parallel.PeerWatch` does for the other peers.

The parent holds back the runtime's native log lines (glog's ``E1206 10:18:06.89 ...``) until a
line of another kind comes, and everything from its first fatal line on; any other ending of the
child passes them on as they were, with the child's own status.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

from podracer import parallel
from podracer.cli.parse import TrainArgs, process_setup

SUPERVISED = "PODRACER_SUPERVISED"  # set in the child: it is not supervised again
RUN_DIR_MARK = "podracer-run-dir: "  # the child's agreed run directory (parallel.note_run_dir)
NATIVE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s")  # the runtime's log lines
FATAL = ("Terminating process because the JAX distributed service", "*** Check failure")
LEADER_GONE = ("Failed to send RPC to coordination service", "leader task")


def wanted(args: TrainArgs) -> bool:
    """Whether ``podracer train`` from the command line (its one parse ``args``) runs under a
    supervisor: a process of a multi-process run that is not (or may not be) process 0, not
    already supervised, and not a dry run or a help."""
    if os.environ.get(SUPERVISED) or args.selectors.dry_run or args.selectors.help:
        return False
    setup = process_setup(args)
    return setup.distributed and setup.process_id != 0


class _Output:
    """The child's stderr, passed through line by line; the runtime's lines held back."""

    def __init__(self, out):
        self.out = out
        self.pending: list[str] = []  # native lines not yet followed by another kind
        self.fatal: list[str] = []  # from the first fatal line on
        self.run_dir: str | None = None

    def feed(self, line: str) -> None:
        if line.startswith(RUN_DIR_MARK):
            self.run_dir = line[len(RUN_DIR_MARK) :].strip()
        elif self.fatal or (NATIVE.match(line) and line[0] == "F") or any(m in line for m in FATAL):
            self.fatal.append(line)
        elif NATIVE.match(line):
            self.pending.append(line)
        else:
            self.write([*self.pending, line])
            self.pending = []

    def write(self, lines: list[str]) -> None:
        self.out.write("".join(lines))
        self.out.flush()

    def leader_gone(self) -> bool:
        text = "".join(self.fatal)
        return "JAX distributed service" in text and any(m in text for m in LEADER_GONE)


def message(process_id: int | None, num_processes: int | None, coordinator, run_dir) -> str:
    """podracer's line for a process whose coordinator (process 0) is gone."""
    total = f" of {num_processes}" if num_processes else ""
    where = f", {coordinator}" if coordinator else ""
    me = "this process" if process_id is None else f"process {process_id}"
    return (
        f"podracer: process 0{total} (the coordinator{where}) stopped: its coordination service "
        f"is gone (it died, or this host lost it); {me} stops too (exit status "
        f"{parallel.PEER_LOST_EXIT_CODE}). Restart every process with: podracer train --resume "
        f"{run_dir or 'RUN_DIR'}"
    )


def _dies_with_parent():
    """A ``preexec_fn`` that has the kernel SIGKILL the child when this parent dies (Linux's
    ``PR_SET_PDEATHSIG``), so that ``kill -9`` of the process a user or a scheduler sees also
    ends the work it runs; None elsewhere. libc is loaded here, before the fork."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG

    def dies_with_parent():
        prctl(set_parent_death_signal, int(signal.SIGKILL))

    return dies_with_parent


def run(args: TrainArgs) -> int:
    """Runs ``podracer train`` (its one parse ``args``) as a child process (see the module
    docstring); returns the exit status for this process."""
    setup = process_setup(args)
    child = subprocess.Popen(
        [sys.executable, "-m", "podracer.cli.main", "train", *args.argv],
        env={**os.environ, SUPERVISED: "1", "PYTHONUNBUFFERED": "1"},
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        preexec_fn=_dies_with_parent(),
    )
    output = _Output(sys.stderr)

    def forward(signum, frame):
        child.send_signal(signum)

    # Ctrl-C reaches the child from the terminal (one process group); SIGTERM sent to this
    # process is passed on. The child decides how to stop.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
    }
    reader = threading.Thread(
        target=lambda: [output.feed(line) for line in child.stderr], daemon=True
    )
    reader.start()
    try:
        status = child.wait()
        reader.join(timeout=10)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if status == -signal.SIGABRT and output.leader_gone():
        line = message(setup.process_id, setup.num_processes, setup.coordinator, output.run_dir)
        output.write([line + "\n"])
        return parallel.PEER_LOST_EXIT_CODE
    output.write(output.pending + output.fatal)
    return 128 - status if status < 0 else status
