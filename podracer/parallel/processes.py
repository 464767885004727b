"""Several processes as one program: the set-up (:func:`initialize`), the watchdog of a stalled
run, the peer watch that stops every process when one is lost, barriers and the check that
every process agrees on its config. Host-only code."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from podracer.errors import ConfigError

ENV_COORDINATOR = "PODRACER_COORDINATOR"
ENV_NUM_PROCESSES = "PODRACER_NUM_PROCESSES"
ENV_PROCESS_ID = "PODRACER_PROCESS_ID"
ENV_TIMEOUT = "PODRACER_FAULT_TIMEOUT"

DEFAULT_TIMEOUT_S = 60.0
"""A process that dies or stops answering ends the others within about this many seconds."""

STALLED_EXIT_CODE = 3
"""Exit status of a process whose :class:`Watchdog` saw no progress within its limit."""

PEER_LOST_EXIT_CODE = 4
"""Exit status of a process whose :class:`PeerWatch` saw another process stop."""

_timeout_s = DEFAULT_TIMEOUT_S  # set by initialize(); read by the loops' watchdogs
_run_dir: str | None = None  # the run's directory (note_run_dir): named when a peer stops
_peer_watch: PeerWatch | None = None  # started by initialize() for a multi-process run


def is_main_process() -> bool:
    """True on process 0: the one that prints progress and writes logs (checkpoints are written
    by every process: orbax's save is collective)."""
    return jax.process_index() == 0


# --- the distributed runtime (host side) -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProcessSetup:
    """Where this process stands in the cluster, resolved from arguments, environment variables
    or the cluster (SLURM, Cloud TPU, Open MPI, Kubernetes: what JAX detects)."""

    coordinator: str | None  # HOST:PORT of process 0's coordination service; None: single
    num_processes: int | None  # None: JAX reads it from the cluster
    process_id: int | None  # None: JAX reads it from the cluster
    source: str  # "single", "arguments" (flags / environment) or "cluster"
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def distributed(self) -> bool:
        return self.source != "single"


def resolve(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout_s: float | None = None,
    environ: Mapping[str, str] | None = None,
    cluster_detected: bool | None = None,
) -> ProcessSetup:
    """What :func:`initialize` will do, without doing it (pure but for the cluster probe).

    Arguments win over ``PODRACER_COORDINATOR`` / ``PODRACER_NUM_PROCESSES`` /
    ``PODRACER_PROCESS_ID`` / ``PODRACER_FAULT_TIMEOUT``. With neither, a cluster JAX detects
    (``cluster_detected``, default: probed) means ``jax.distributed.initialize()`` with no
    arguments; otherwise the run is single-process. One process asked for explicitly is also
    single-process (no coordination service is started).
    """
    environ = os.environ if environ is None else environ
    coordinator = coordinator or environ.get(ENV_COORDINATOR) or None
    num_processes = _int_or_none(num_processes, environ.get(ENV_NUM_PROCESSES), "--num-processes")
    process_id = _int_or_none(process_id, environ.get(ENV_PROCESS_ID), "--process-id")
    timeout = timeout_s if timeout_s is not None else environ.get(ENV_TIMEOUT, DEFAULT_TIMEOUT_S)
    try:
        timeout = float(timeout)
    except ValueError:
        raise ConfigError(
            f"{ENV_TIMEOUT}={timeout!r} is not allowed: it must be a number of seconds"
        ) from None
    if not timeout >= 2:
        raise ConfigError(f"--fault-timeout={timeout:g} is not allowed: it must be >= 2 (seconds)")

    if coordinator is not None:
        host, _, port = coordinator.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"--coordinator={coordinator!r} is not allowed: give HOST:PORT of process 0 "
                "(for example 10.0.0.1:1234)"
            )
    if num_processes is not None and num_processes < 1:
        raise ConfigError(f"--num-processes={num_processes} is not allowed: it must be >= 1")
    if process_id is not None and num_processes is not None:
        if not 0 <= process_id < num_processes:
            raise ConfigError(
                f"--process-id={process_id} is not allowed: it must be between 0 and "
                f"--num-processes - 1 = {num_processes - 1}"
            )
    elif process_id is not None and process_id < 0:
        raise ConfigError(f"--process-id={process_id} is not allowed: it must be >= 0")

    given = {
        "--coordinator": coordinator,
        "--num-processes": num_processes,
        "--process-id": process_id,
    }
    if num_processes == 1:
        return ProcessSetup(None, 1, 0, "single", timeout)
    if all(v is None for v in given.values()):
        if cluster_detected is None:
            cluster_detected = detect_cluster()
        source = "cluster" if cluster_detected else "single"
        return ProcessSetup(None, None, None, source, timeout)
    missing = [name for name, value in given.items() if value is None]
    if missing:
        if cluster_detected is None:
            cluster_detected = detect_cluster()
        if not cluster_detected:
            raise ConfigError(
                f"{', '.join(missing)} missing: a multi-process run needs --coordinator "
                "HOST:PORT, --num-processes N and --process-id I (or the environment variables "
                f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES}, {ENV_PROCESS_ID}) unless JAX detects "
                "the cluster (SLURM, Cloud TPU, Open MPI, Kubernetes)"
            )
        return ProcessSetup(coordinator, num_processes, process_id, "cluster", timeout)
    return ProcessSetup(coordinator, num_processes, process_id, "arguments", timeout)


def detect_cluster() -> bool:
    """Whether JAX's cluster detection finds a multi-process job (SLURM with more than one task,
    a Cloud TPU slice, Open MPI, Kubernetes). JAX offers no public probe, so this asks its
    cluster registry and answers False when that is unavailable."""
    try:
        from jax._src.clusters import ClusterEnv

        cluster_types = list(ClusterEnv._cluster_types)
    except (ImportError, AttributeError):  # a JAX without the registry: explicit flags only
        return False
    for env in cluster_types:
        try:
            if env.opt_in_only_method or not env.is_env_present():
                continue
            return (env.get_process_count() or 1) > 1
        except Exception:  # a probe that cannot answer (no metadata server, ...) is no cluster
            continue
    return False


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout_s: float | None = None,
    initialization_timeout_s: int = 300,
    local_device_ids: Sequence[int] | None = None,
) -> ProcessSetup:
    """Connects this process to the others (host side; call before any JAX computation).

    See :func:`resolve` for where the three values come from; a single-process run does nothing.
    Otherwise it calls ``jax.distributed.initialize`` with

    - ``heartbeat_timeout_seconds = timeout_s``: the coordination service declares a process
      dead after that long without a heartbeat and ends every other process (they abort, in
      C++, with JAX's message "Terminating process because the JAX distributed service detected
      fatal errors"). It is the backstop: podracer's :class:`PeerWatch`, started here, ends
      them first, after ``timeout_s / 2``, with one line naming the process that stopped;
    - ``initialization_timeout``: how long to wait for every process to connect;
    - the CPU collectives set to gloo (what several CPU processes reduce through), and JAX's
      preemption service off, so SIGTERM (a scheduler's stop, ``kill``) ends a process as usual.

    It also installs :func:`peer_aware_excepthook`, so that a collective that fails because a
    peer died (``JaxRuntimeError``, raised at once when the peer's connection closes) ends the
    process with the :class:`PeerWatch`'s line rather than a traceback. ``timeout_s`` (default
    60 s, or ``PODRACER_FAULT_TIMEOUT``) also bounds the loops' :class:`Watchdog`. Calling it
    again after success returns the same setup.
    """
    global _timeout_s
    setup = resolve(coordinator, num_processes, process_id, timeout_s=timeout_s)
    _timeout_s = setup.timeout_s
    if not setup.distributed or jax.distributed.is_initialized():
        return setup
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_preemption_service", False)
    try:
        jax.distributed.initialize(
            setup.coordinator,
            setup.num_processes,
            setup.process_id,
            local_device_ids=local_device_ids,
            initialization_timeout=int(initialization_timeout_s),
            heartbeat_timeout_seconds=max(1, int(setup.timeout_s)),
            shutdown_timeout_seconds=max(1, int(setup.timeout_s)),
        )
    except RuntimeError as error:
        if "must be called before" in str(error):
            raise RuntimeError(
                "podracer.parallel.initialize() must run before any JAX computation (even "
                "jax.devices()): call it first thing in the program"
            ) from error
        raise
    from jax._src import distributed  # the client has no public API yet

    state = distributed.global_state
    watch_peers(
        PeerWatch(
            state.client,
            state.process_id,
            state.num_processes,
            setup.timeout_s / 2,
            coordinator=state.coordinator_address,
        )
    )
    return dataclasses.replace(
        setup, num_processes=jax.process_count(), process_id=jax.process_index()
    )


def timeout_s() -> float:
    """The fault timeout set by :func:`initialize` (default 60 s)."""
    return _timeout_s


def _int_or_none(value: int | None, env_value: str | None, flag: str) -> int | None:
    if value is not None:
        return int(value)
    if env_value is None or env_value == "":
        return None
    try:
        return int(env_value)
    except ValueError:
        raise ConfigError(
            f"{flag}={env_value!r} (from the environment) is not an integer"
        ) from None


class Watchdog:
    """Ends the process when the host loop makes no progress (host side, a daemon thread).

    A collective waits for every process; on CPU (gloo) it can wait forever when a peer is alive
    (its heartbeats still flow) but stuck. The loop calls :meth:`beat` after each step; if no
    beat comes for ``timeout_s + 2 * longest_step`` seconds, the watchdog prints a message naming
    the process and the step and calls ``os._exit(STALLED_EXIT_CODE)`` (the main thread may be
    blocked inside XLA, where no Python exception can reach it). It is armed only when more than
    one process runs, and only from the second :meth:`beat` on, once one step has been timed: a
    step may legitimately take minutes (Anakin runs many updates per call), and compilation is
    never timed. The first step is left to JAX's heartbeat.
    """

    def __init__(self, what: str, timeout_s: float | None = None, *, enabled: bool | None = None):
        self.what = what
        self.timeout_s = _timeout_s if timeout_s is None else float(timeout_s)
        self.enabled = jax.process_count() > 1 if enabled is None else enabled
        self._last: float | None = None
        self._longest = 0.0
        self._steps = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def beat(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        with self._lock:
            if self._last is not None:
                self._longest = max(self._longest, now - self._last)
            self._last = now
            self._steps += 1
        if self._thread is None and self._steps >= 2:  # one step timed: its length is known
            self._thread = threading.Thread(
                target=self._watch, name="podracer-watchdog", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def limit(self) -> float:
        return self.timeout_s + 2 * self._longest

    def _watch(self) -> None:
        while not self._closed.wait(min(1.0, self.timeout_s / 4)):
            with self._lock:
                waited = time.monotonic() - self._last
                limit = self.limit()
                steps = self._steps
            if waited > limit:
                print(
                    f"podracer: process {jax.process_index()} of {jax.process_count()}: no "
                    f"progress in {self.what} for {waited:.0f} s (limit {limit:.0f} s, after "
                    f"{steps} steps); another process has probably died or stopped answering. "
                    f"Exiting with status {STALLED_EXIT_CODE}.",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(STALLED_EXIT_CODE)


# --- peers that stop (host side) ---------------------------------------------------------------


def note_run_dir(run_dir: str | None) -> None:
    """The run's directory, named by :class:`PeerWatch`'s line (how to resume). Multi-process
    runs note it through :func:`check_agreement`, which every process passes before training."""
    global _run_dir
    _run_dir = None if run_dir is None else str(run_dir)
    if _run_dir is not None and os.environ.get("PODRACER_SUPERVISED"):
        # The parent (podracer.cli.supervisor) names it if the coordinator's loss aborts this one.
        sys.stderr.write(f"podracer-run-dir: {_run_dir}\n")
        sys.stderr.flush()


@dataclasses.dataclass(frozen=True)
class PeerLost:
    """A process that stopped: what :meth:`PeerWatch.verdict` found."""

    process: int  # the process that stopped
    host: str | None  # its host, when it told one
    silent_s: float  # seconds since it last answered (its last beat, or the service)
    coordinator: bool  # True: the coordination service (process 0) itself stopped answering


class PeerWatch:
    """Ends this process, with one line naming the process that stopped, when another process
    of the run dies or stops answering (host side: two daemon threads, nothing jitted).

    Every process writes a beat (a counter and its host name) to the key-value store of JAX's
    coordination service every ``period_s`` and reads everyone's (``podracer-beat``, the only
    thread that calls the service). A second thread (``podracer-peers``) judges, from this
    process's own clock: a process whose beat has not changed for ``limit_s`` has stopped; so
    has the coordinator (process 0, which hosts the service) when no exchange with the service
    has succeeded for ``limit_s`` (a frozen service leaves the call hanging, hence the second
    thread). It then prints one ``podracer:`` line (the process, its host, how to resume) and
    calls ``os._exit(PEER_LOST_EXIT_CODE)``: the main thread may be blocked inside XLA.

    :func:`initialize` starts it with ``limit_s = timeout_s / 2`` and sets JAX's own heartbeat
    timeout to ``timeout_s``, so it ends the survivors before the runtime does (the runtime
    aborts them in C++, with its trace). After :meth:`suspect` (a collective failed in this
    process) the limit is ``grace_s``: a peer that is alive beats every ``period_s``.

    The beats are ``(num_processes)`` keys read by every process: ``num_processes ** 2``
    entries per period on the coordinator, nothing for pods of hundreds of hosts.
    """

    PREFIX = "podracer/beat/"

    def __init__(
        self,
        client: Any,
        process_id: int,
        num_processes: int,
        limit_s: float,
        *,
        period_s: float | None = None,
        grace_s: float | None = None,
        coordinator: str | None = None,
        host: str | None = None,
        clock=time.monotonic,
        on_lost=None,
    ):
        self.client = client
        self.process_id = process_id
        self.num_processes = num_processes
        self.limit_s = float(limit_s)
        self.period_s = min(1.0, self.limit_s / 10) if period_s is None else float(period_s)
        default_grace = min(self.limit_s, max(5.0, 5 * self.period_s))
        self.grace_s = default_grace if grace_s is None else float(grace_s)
        self.coordinator = coordinator
        self.host = socket.gethostname() if host is None else host
        self.clock = clock
        self.on_lost = self.exit if on_lost is None else on_lost
        self._lock = threading.Lock()
        self._beats = 0
        self._started = clock()
        self._last_ok = self._started  # the last exchange with the service that succeeded
        self._seen: dict[int, tuple[str, float, int]] = {}  # process: (beat, when changed, changes)
        self._hosts: dict[int, str] = {}
        self._suspect = False
        self._closed = threading.Event()

    # the exchange (thread podracer-beat) ---------------------------------------------------

    def exchange(self) -> None:
        """Writes this process's beat and reads everyone's (one round; raises what the client
        raises)."""
        self._beats += 1
        self.client.key_value_set(
            f"{self.PREFIX}{self.process_id}", f"{self._beats} {self.host}", allow_overwrite=True
        )
        entries = self.client.key_value_dir_get(self.PREFIX)
        now = self.clock()
        with self._lock:
            self._last_ok = now
            for key, value in entries:
                try:
                    process = int(key.rsplit("/", 1)[1])
                except ValueError:
                    continue
                beat, _, host = value.partition(" ")
                self._hosts[process] = host or None
                old = self._seen.get(process)
                if old is None or old[0] != beat:
                    self._seen[process] = (beat, now, 1 if old is None else old[2] + 1)

    def _beat(self) -> None:
        from jax._src import distributed

        while not self._closed.is_set():
            if distributed.global_state.client is not self.client:  # shut down: the run ends
                return
            with contextlib.suppress(Exception):  # the service is gone: the judge decides
                self.exchange()
            self._closed.wait(self.period_s)

    # the judge (thread podracer-peers) -----------------------------------------------------

    def suspect(self) -> None:
        """A collective failed in this process: judge with ``grace_s`` from now on."""
        with self._lock:
            self._suspect = True

    def verdict(self, now: float | None = None) -> PeerLost | None:
        """The process that stopped, or None while every one answers.

        A peer's silence is counted up to this process's last successful read (not to ``now``),
        so a read this process could not make (its own threads held up) never counts against
        a peer; the coordinator's is counted up to ``now``, and :meth:`_judge` asks for it twice,
        a period apart, before it acts.
        """
        now = self.clock() if now is None else now
        with self._lock:
            limit = self.grace_s if self._suspect else self.limit_s
            if self.process_id != 0 and now - self._last_ok > limit:
                return PeerLost(0, self._hosts.get(0), now - self._last_ok, True)
            stalest = None
            for process in range(self.num_processes):
                if process == self.process_id:
                    continue
                changed = self._seen.get(process, (None, self._started, 0))[1]
                silent = self._last_ok - changed
                if silent > limit and (stalest is None or silent > stalest.silent_s):
                    stalest = PeerLost(process, self._hosts.get(process), silent, False)
            return stalest

    def changes(self) -> dict[int, int]:
        """How many times each process's beat has changed so far (a live one: once a period)."""
        with self._lock:
            return {process: seen[2] for process, seen in self._seen.items()}

    def message(self, lost: PeerLost) -> str:
        where = f"host {lost.host}" if lost.host else "host unknown"
        if lost.coordinator:
            what = (
                f"process 0 of {self.num_processes} (the coordinator, "
                f"{self.coordinator or where}) stopped answering: the coordination service "
                f"has not answered for {lost.silent_s:.0f} s"
            )
        else:
            what = (
                f"process {lost.process} of {self.num_processes} ({where}) stopped: no "
                f"heartbeat for {lost.silent_s:.0f} s (it died or stopped answering)"
            )
        run = _run_dir if _run_dir is not None else "RUN_DIR"
        return (
            f"podracer: {what}; process {self.process_id} stops too (exit status "
            f"{PEER_LOST_EXIT_CODE}). Restart every process with: podracer train --resume {run}"
        )

    def exit(self, lost: PeerLost) -> None:
        try:
            sys.stderr.write(self.message(lost) + "\n")
            sys.stderr.flush()
        finally:
            os._exit(PEER_LOST_EXIT_CODE)

    def _judge(self) -> None:
        while not self._closed.wait(self.period_s / 2):
            lost = self.verdict()
            if lost is not None and lost.coordinator:  # held up, or the service is gone?
                self._closed.wait(self.period_s)
                lost = self.verdict()
            if lost is not None and not self._closed.is_set():
                self.on_lost(lost)
                return

    def start(self) -> PeerWatch:
        for name, target in (("podracer-beat", self._beat), ("podracer-peers", self._judge)):
            threading.Thread(target=target, name=name, daemon=True).start()
        return self

    def close(self) -> None:
        self._closed.set()


def watch_peers(watch: PeerWatch) -> None:
    """Starts ``watch`` for this process and installs :func:`peer_aware_excepthook`."""
    global _peer_watch, _previous_excepthook
    if _peer_watch is not None:
        _peer_watch.close()
    _peer_watch = watch.start()
    if sys.excepthook is not peer_aware_excepthook:
        _previous_excepthook = sys.excepthook
        sys.excepthook = peer_aware_excepthook


_previous_excepthook = sys.excepthook


def _runtime_error(error: BaseException | None) -> bool:
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, jax.errors.JaxRuntimeError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def peer_aware_excepthook(kind, error, traceback) -> None:
    """``sys.excepthook`` of a multi-process run (host side). An uncaught ``JaxRuntimeError``
    (a collective fails at once when a peer's connection closes: "Gloo all-reduce failed ...
    Connection reset by peer") first makes the :class:`PeerWatch` suspect its peers and waits
    for its verdict: a peer that stopped ends the process with the watch's line, no
    traceback. When every peer beats twice more, the error was this process's own and its
    traceback is printed as usual; so is every other exception, at once."""
    watch = _peer_watch
    if watch is not None and _runtime_error(error):
        watch.suspect()
        before = watch.changes()
        deadline = time.monotonic() + watch.grace_s + 3 * watch.period_s + 1.0
        while time.monotonic() < deadline:
            after = watch.changes()
            others = [p for p in range(watch.num_processes) if p != watch.process_id]
            if all(after.get(p, 0) >= before.get(p, 0) + 2 for p in others):
                break  # every peer is alive: the error is this process's own
            time.sleep(watch.period_s / 4)
    _previous_excepthook(kind, error, traceback)


# --- agreement between processes (host side) -------------------------------------------------

_barriers = 0  # barriers passed so far in this process: each gets a name of its own

BARRIER_TIMEOUT_S = 600.0
"""How long :func:`barrier` waits for the slowest process (compiling can take minutes)."""


def barrier(what: str, timeout_s: float = BARRIER_TIMEOUT_S) -> None:
    """Waits until every process gets here (host side; nothing to do for one process).

    Through the coordination service, not a collective. The loops pass one after compiling and
    before their first step: gloo (CPU collectives) gives up on a collective whose peers do not
    join it within 30 s, which one process's longer compile on a loaded machine could exceed
    (seen as "Gloo context initialization failed: GetKeyValue() timed out").
    """
    global _barriers
    if jax.process_count() == 1:
        return
    from jax._src import distributed  # the barrier has no public API yet

    _barriers += 1
    try:
        distributed.global_state.client.wait_at_barrier(
            f"podracer/{_barriers}/{what}", int(1000 * timeout_s)
        )
    except Exception as error:
        raise RuntimeError(
            f"process {jax.process_index()}: not every process reached {what} within "
            f"{timeout_s:.0f} s; another process has probably failed: see its output"
        ) from error


_agreements = 0  # checks made so far in this process: each gets keys of its own


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` as ``{"a.b": "1"}``: the dotted name and JSON text of every leaf."""
    import json

    flat: dict[str, str] = {}
    for name, value in values.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = json.dumps(value, sort_keys=True, default=str)
    return flat


def first_difference(mine: Mapping[str, str], theirs: Mapping[str, str]) -> str | None:
    """The first dotted name (in sorted order) whose value differs between two
    :func:`flatten` outputs (a name that only one has counts), or None."""
    for name in sorted(set(mine) | set(theirs)):
        if mine.get(name) != theirs.get(name):
            return name
    return None


def check_agreement(values: Mapping[str, Any], timeout_s: float | None = None) -> None:
    """Every process of a multi-process run must agree with process 0 on ``values`` (the run's
    resolved config, its directory, the code's version): otherwise every process raises the same
    :class:`ConfigError`, naming the first field that differs, its value on process 0 and on the
    first process that differs (host side; nothing to do for one process).

    It goes through the key-value store of JAX's distributed runtime, not a collective, so no
    program is compiled and a process that disagrees is found within seconds: process 0 writes
    its values, every other process compares its own with them and writes its verdict, and every
    process reads every verdict. A process that never writes one (it died, or failed before
    this check) ends the wait after ``timeout_s`` (default: the fault timeout). A ``run_dir``
    among ``values`` is noted (:func:`note_run_dir`): the :class:`PeerWatch`'s line names it.
    """
    global _agreements
    if jax.process_count() == 1:
        return
    if isinstance(values.get("run_dir"), str):
        note_run_dir(values["run_dir"])
    import json

    from jax._src import distributed  # the store has no public API yet

    client = distributed.global_state.client
    wait_ms = int(1000 * (_timeout_s if timeout_s is None else timeout_s))
    prefix = f"podracer/agree/{_agreements}"
    _agreements += 1
    me, count = jax.process_index(), jax.process_count()
    mine = flatten(values)
    if me == 0:
        client.key_value_set(f"{prefix}/values", json.dumps(mine))
        reference = mine
    else:
        try:
            reference = json.loads(client.blocking_key_value_get(f"{prefix}/values", wait_ms))
        except Exception as error:  # XlaRuntimeError: DEADLINE_EXCEEDED
            raise ConfigError(
                f"process {me}: process 0 did not share its config within {wait_ms / 1000:.0f} s "
                f"({type(error).__name__}); it has probably failed: see its output"
            ) from error
    differs = first_difference(reference, mine)
    verdict = (
        {"ok": True}
        if differs is None
        else {"field": differs, "theirs": mine.get(differs), "ours": reference.get(differs)}
    )
    client.key_value_set(f"{prefix}/verdict/{me}", json.dumps(verdict))
    for process in range(count):
        try:
            text = client.blocking_key_value_get(f"{prefix}/verdict/{process}", wait_ms)
        except Exception as error:
            raise ConfigError(
                f"process {me}: process {process} did not check its config against process 0's "
                f"within {wait_ms / 1000:.0f} s ({type(error).__name__}); it has probably failed: "
                "see its output"
            ) from error
        other = json.loads(text)
        if not other.get("ok"):
            raise ConfigError(
                f"the processes disagree on {other['field']}: process 0 has {other['ours']}, "
                f"process {process} has {other['theirs']}; every process of a run must be "
                "started with the same flags, config file and code"
            )
