"""Test set-up: two virtual CPU devices, set before JAX is imported anywhere; one compilation
cache for the whole test run.

Single-device tests pass ``devices=jax.devices()[:1]``; multi-device tests use both.

The cache: many tests compile the same programs (a run and its resume, the command line's
runs in several tests, the subprocesses of the multi-process tests), so the controller gives
the run one fresh JAX persistent compilation cache directory, which the xdist workers and every
subprocess inherit through ``JAX_COMPILATION_CACHE_DIR``; it is deleted at the end. A program
loaded from it is the one XLA compiled for the same computation, so the values are unchanged.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import pytest


@pytest.fixture(scope="session")
def two_devices():
    devices = jax.devices()
    assert len(devices) >= 2, "conftest must force two virtual CPU devices"
    return devices[:2]


@pytest.fixture(scope="session")
def one_device():
    return jax.devices()[:1]


# --- why a test was rerun: its threads' stacks just before pytest-timeout ends its worker ------

STACKS_DIR = "PODRACER_TEST_STACKS"  # set by the controller, inherited by the xdist workers
_rerun: dict[str, object] = {}  # controller: the reports of tests rerun or whose worker crashed


CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"  # read by JAX when it is imported
_OWN_CACHE = "PODRACER_TEST_OWN_CACHE"  # the controller made the cache directory: delete it


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    import tempfile

    if STACKS_DIR not in os.environ:
        os.environ[STACKS_DIR] = tempfile.mkdtemp(prefix="podracer-test-stacks-")
    if CACHE_DIR not in os.environ:
        os.environ[CACHE_DIR] = os.environ[_OWN_CACHE] = tempfile.mkdtemp(
            prefix="podracer-test-jax-cache-"
        )
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
        jax.config.update("jax_compilation_cache_dir", os.environ[CACHE_DIR])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)


def _stacks_file(nodeid: str):
    import re
    from pathlib import Path

    return Path(os.environ[STACKS_DIR]) / (re.sub(r"[^\w.-]+", "_", nodeid)[-180:] + ".txt")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every thread's stack written to a file 5 s before the test's timeout: pytest-timeout
    then ends the worker (``timeout_method = "thread"``), whose own dump xdist does not show."""
    import faulthandler

    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0] if marker and marker.args else item.config.getini("timeout"))
    if STACKS_DIR not in os.environ or timeout <= 0:
        yield
        return
    with open(_stacks_file(item.nodeid), "w") as stacks:
        faulthandler.dump_traceback_later(max(1.0, timeout - 5), exit=False, file=stacks)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()


def pytest_runtest_logreport(report):
    crashed = report.failed and "crashed" in str(report.longrepr)
    if report.outcome == "rerun" or crashed:
        _rerun.setdefault(report.nodeid, report)


def pytest_terminal_summary(terminalreporter):
    for nodeid, report in _rerun.items():
        path = _stacks_file(nodeid)
        text = path.read_text() if path.is_file() else ""
        harness = ("/pluggy/", "/_pytest/", "/execnet/", "/xdist/", "<string>")
        text = "\n".join(line for line in text.splitlines() if not any(h in line for h in harness))
        terminalreporter.write_sep("-", f"rerun: {nodeid}")
        if text:
            terminalreporter.write_line("its threads 5 s before the timeout ended it:")
            terminalreporter.write_line(text[:8000])
        else:
            terminalreporter.write_line(
                "no stacks: it did not reach its timeout (a worker crash or a failure)"
            )
            terminalreporter.write_line(str(report.longrepr)[-3000:])


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    import shutil

    if os.environ.get(STACKS_DIR):
        shutil.rmtree(os.environ.pop(STACKS_DIR), ignore_errors=True)
    if os.environ.get(_OWN_CACHE):
        shutil.rmtree(os.environ.pop(_OWN_CACHE), ignore_errors=True)
        os.environ.pop(CACHE_DIR, None)
