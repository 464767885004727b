"""Host-only plumbing of Sebulba: the stop signal, the params slot and the trajectory queues.

Nothing here is jitted or traced. Every wait has a timeout and re-checks the stop signal, so one
failing thread stops all the others within a fraction of a second.
"""

from __future__ import annotations

import queue
import threading
import traceback
from typing import Any

from podracer.loops.common import Diverged

POLL_S = 0.05  # how often a blocked wait re-checks the stop signal


class Stopped(Exception):
    """Raised inside a thread's wait when the run is stopping."""


class Lifetime:
    """One stop signal for every thread, and the first error any of them raised."""

    def __init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.error_thread: str | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()

    def fail(self, error: BaseException) -> None:
        """Records ``error`` (the first one wins) and stops every thread."""
        with self._lock:
            if self.error is None:
                self.error = error
                self.error_thread = threading.current_thread().name
        self._stop.set()

    def wait(self, timeout: float) -> bool:
        return self._stop.wait(timeout)

    def raise_if_failed(self) -> None:
        """Re-raises the recorded error, with its thread's traceback, in the calling thread."""
        if self.error is not None:
            error = self.error
            from podracer.errors import CheckpointError, ConfigError

            if isinstance(error, (Diverged, CheckpointError, ConfigError)):
                raise error  # its message says all: which thread raised it does not matter
            where = "".join(traceback.format_exception(error))
            raise RuntimeError(
                f"podracer thread {self.error_thread!r} failed: {error!r}\n{where}"
            ) from error

    def thread(self, name: str, target, *args) -> threading.Thread:
        """A daemon thread whose exceptions stop the run instead of vanishing."""

        def body():
            try:
                target(*args)
            except Stopped:
                pass
            except BaseException as error:
                self.fail(error)

        return threading.Thread(target=body, name=f"podracer-{name}", daemon=True)


class ParamsSlot:
    """The latest params with their version (number of updates that produced them).

    ``keep`` past versions stay available, so that an actor in deterministic mode can fetch
    exactly the version it must act with even if the learner has already published the next.
    """

    def __init__(self, lifetime: Lifetime, keep: int = 2):
        self._lifetime = lifetime
        self._cond = threading.Condition()
        self._versions: dict[int, Any] = {}
        self._keep = keep
        self.latest_version = -1

    def publish(self, params: Any, version: int) -> None:
        with self._cond:
            self._versions[version] = params
            self.latest_version = max(self.latest_version, version)
            for old in [v for v in self._versions if v <= self.latest_version - self._keep]:
                del self._versions[old]
            self._cond.notify_all()

    def get(self, version: int | None = None) -> tuple[Any, int]:
        """``(params, version)``: the latest, or exactly ``version`` (waiting for it)."""
        with self._cond:
            while True:
                if self._lifetime.stopping:
                    raise Stopped
                if version is None and self.latest_version >= 0:
                    return self._versions[self.latest_version], self.latest_version
                if version is not None and version in self._versions:
                    return self._versions[version], version
                if version is not None and version < self.latest_version - self._keep + 1:
                    raise RuntimeError(f"params version {version} is no longer kept")
                self._cond.wait(POLL_S)


class TrajectoryQueue:
    """A bounded FIFO queue (back-pressure on the actor) whose waits watch the stop signal."""

    def __init__(self, lifetime: Lifetime, maxsize: int):
        self._lifetime = lifetime
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)

    def put(self, item: Any) -> None:
        while True:
            if self._lifetime.stopping:
                raise Stopped
            try:
                self._queue.put(item, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def get(self) -> Any:
        while True:
            if self._lifetime.stopping:
                raise Stopped
            try:
                return self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue

    def qsize(self) -> int:
        return self._queue.qsize()
