"""Several processes on 127.0.0.1, talking through JAX's distributed runtime (gloo on CPU).

Each process is a subprocess with its own virtual CPU devices; every wait is bounded and every
child is killed in ``finally``. The processes run the real command line
(``tests/multiprocess_worker.py`` saves their final params; ``examples/launch_local.sh`` starts
them where the test needs only their exit statuses and JSON lines).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from podracer import parallel
from podracer.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "multiprocess_worker.py"
LAUNCH = ROOT / "examples" / "launch_local.sh"

ANAKIN_ARGS = [
    "--agent",
    "ppo",
    "--env",
    "gymnax:CartPole-v1",
    "--arch.num-envs",
    "8",
    "--arch.rollout-len",
    "16",
    "--total-timesteps",
    "2048",
    "--seed",
    "3",
    "--quiet",
]


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # the process and what it started
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _json_lines(text: str) -> list[dict]:
    """Every JSON object printed on a line that starts with one. The processes share one
    stdout pipe, so one process's final line can land right after another's before its
    newline (seen in CI: "Extra data" at the second object); each object is decoded in turn."""
    decoder, out = json.JSONDecoder(), []
    for line in text.splitlines():
        rest = line.strip()
        while rest.startswith("{"):
            obj, end = decoder.raw_decode(rest)
            out.append(obj)
            rest = rest[end:].lstrip()
    return out


def _launch(num_processes, args, out_dir, devices_per_process, timeout_s):
    """``examples/launch_local.sh`` with the worker as the command: (status, JSON lines, log)."""
    env = _env(devices_per_process)
    env["PODRACER"] = f"{sys.executable} {WORKER} {out_dir}"
    env["PYTHON"] = sys.executable
    proc = subprocess.Popen(
        ["bash", str(LAUNCH), str(num_processes), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        _kill([proc])
    return proc.returncode, _json_lines(out), err


def _load(path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


MEMORY_ARGS = [  # a GRU: each device's 2 environments carry their own, 2 minibatches of one
    "--agent.memory",
    "gru",
    "--agent.memory-size",
    "16",
    "--agent.hidden-sizes",
    "16",
    "--agent.num-minibatches",
    "2",
]


@pytest.mark.slow
@pytest.mark.parametrize("memory", [False, True], ids=["feed-forward", "gru"])
def test_anakin_two_processes_equal_one_process_of_four_devices(tmp_path, memory):
    """2 processes x 2 devices (one 4-device mesh over both) end with the params of 1 process x 4
    devices: same environment slices per mesh position, same keys, gradients averaged over all
    (with memory: and the carries of each device's environments)."""
    args = [*ANAKIN_ARGS, *MEMORY_ARGS] if memory else ANAKIN_ARGS
    single = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "single"), "train", *args],
        env=_env(4),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240  # all three processes together
    try:
        status, lines, err = _launch(2, args, tmp_path / "multi", 2, timeout_s=200)
        single_out, single_err = single.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        _kill([single])
    assert single.returncode == 0, single_err[-3000:]
    assert status == 0, err[-3000:]

    assert sorted(line["process"] for line in lines) == [0, 1]
    assert all(line["processes"] == 2 and line["devices"] == 4 for line in lines)
    assert lines[0]["params_checksum"] == lines[1]["params_checksum"]
    (reference,) = _json_lines(single_out)
    assert reference["devices"] == 4 and reference["processes"] == 1

    p0 = _load(tmp_path / "multi" / "params_0.npz")
    p1 = _load(tmp_path / "multi" / "params_1.npz")
    ref = _load(tmp_path / "single" / "params_0.npz")
    assert len(p0) == len(ref) == (20 if memory else 12)
    for a, b, r in zip(p0, p1, ref, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)
    assert lines[0]["params_checksum"] == pytest.approx(reference["params_checksum"], rel=1e-5)


POPULATION_ARGS = [
    "--agent",
    "ppo",
    "--env",
    "gymnax:CartPole-v1",
    "--population",
    "4",
    "--population.interval",
    "2",
    "--population.init",
    "lr=1e-4:1e-2",
    "--population.eval-episodes",
    "2",
    "--arch.member-shards",
    "2",
    "--arch.num-envs",
    "4",
    "--arch.rollout-len",
    "16",
    "--agent.num-minibatches",
    "2",
    "--agent.hidden-sizes",
    "16",
    "--total-timesteps",
    "384",
    "--quiet",
]


@pytest.mark.slow
def test_population_split_over_two_processes_equals_one_process(tmp_path):
    """4 members over 2 processes of 1 device each (2 members per process; the tournament's
    copies cross processes) end as on 1 process with the members over its 2 devices."""
    single = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "single"), "train", *POPULATION_ARGS],
        env=_env(2),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    try:
        status, lines, err = _launch(2, POPULATION_ARGS, tmp_path / "multi", 1, timeout_s=200)
        single_out, single_err = single.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        _kill([single])
    assert single.returncode == 0, single_err[-3000:]
    assert status == 0, err[-3000:]
    assert sorted(line["process"] for line in lines) == [0, 1]
    (reference,) = _json_lines(single_out)
    assert lines[0]["final_scores"] == lines[1]["final_scores"]
    np.testing.assert_allclose(lines[0]["final_scores"], reference["final_scores"])
    p0 = _load(tmp_path / "multi" / "params_0.npz")
    p1 = _load(tmp_path / "multi" / "params_1.npz")
    ref = _load(tmp_path / "single" / "params_0.npz")
    assert p0[0].shape[0] == 4  # every member, gathered from both processes
    for a, b, r in zip(p0, p1, ref, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-6)
    with open(tmp_path / "multi" / "run" / "leaderboard.jsonl") as f:
        boards = [json.loads(line) for line in f]
    assert [b["updates"] for b in boards] == [2, 4, 6]  # written once, by process 0


@pytest.mark.slow
def test_sebulba_two_processes_learn_envpool_cartpole_with_equal_params(tmp_path):
    """Each process: one actor device (0) and one learner device (1); the learner mesh spans
    both processes and every update takes both processes' trajectories as one batch."""
    args = [
        "--arch",
        "sebulba",
        "--agent",
        "ppo",
        "--env",
        "envpool:CartPole-v1",
        "--arch.actor-device-ids",
        "0",
        "--arch.learner-device-ids",
        "1",
        "--arch.envs-per-actor",
        "16",
        "--arch.rollout-len",
        "32",
        "--arch.deterministic",
        "True",
        "--agent.lr",
        "1e-3",
        "--total-timesteps",
        "163840",
        "--seed",
        "0",
        "--quiet",
    ]
    status, lines, err = _launch(2, args, tmp_path, 2, timeout_s=240)
    assert status == 0, err[-3000:]
    assert sorted(line["process"] for line in lines) == [0, 1]
    first, second = lines
    assert first["params_checksum"] == second["params_checksum"]
    for a, b in zip(
        _load(tmp_path / "params_0.npz"), _load(tmp_path / "params_1.npz"), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    # 2 processes x 16 envs x 32 steps per update; both see every process's episodes.
    assert first["num_updates"] == second["num_updates"] == 163840 // 1024
    assert first["final_return"] == second["final_return"]
    print(first["final_return"])
    assert first["final_return"] >= 150.0  # random play: about 22


@pytest.mark.slow
def test_sebulba_population_in_two_processes(tmp_path):
    """A Sebulba population of 4 members over 2 processes: every update takes both processes'
    environments of every member, the tournament runs on the learner of each with the same
    scores (every process's episodes), so both end with the same params and hyper-parameters,
    and process 0 writes the leaderboard."""
    args = [
        "--arch", "sebulba", "--agent", "ppo", "--env", "envpool:CartPole-v1",
        "--arch.actor-device-ids", "0", "--arch.learner-device-ids", "1",
        "--arch.envs-per-actor", "4", "--arch.rollout-len", "16", "--arch.deterministic", "True",
        "--agent.hidden-sizes", "16", "--agent.num-minibatches", "2",
        "--population", "4", "--population.interval", "2",
        "--total-timesteps", str(6 * 2 * 4 * 16), "--seed", "0", "--quiet",
    ]  # fmt: skip
    status, lines, err = _launch(2, args, tmp_path, 2, timeout_s=240)
    assert status == 0, err[-3000:]
    first, second = sorted(lines, key=lambda line: line["process"])
    assert first["num_seeds"] == second["num_seeds"] == 4
    assert first["params_checksum"] == second["params_checksum"]
    assert first["final_scores"] == second["final_scores"] and len(first["final_scores"]) == 4
    for a, b in zip(
        _load(tmp_path / "params_0.npz"), _load(tmp_path / "params_1.npz"), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    boards = (tmp_path / "run" / "leaderboard.jsonl").read_text().splitlines()
    assert [json.loads(b)["updates"] for b in boards] == [2, 4, 6]


@pytest.mark.slow
def test_anakin_resume_across_two_processes_is_exact(tmp_path):
    """Checkpoints are collective (every process writes its shards, ``docs/scaling.md``): two
    processes that stop half-way and resume end bitwise where two processes that never stopped
    end, on both processes."""
    args = [a for a in ANAKIN_ARGS if a not in ("--total-timesteps", "2048")]
    args += ["--agent.anneal-lr", "False"]  # the same schedule whatever the planned length
    status, lines, err = _launch(2, [*args, "--total-timesteps", "1024"], tmp_path / "half", 1, 200)
    assert status == 0, err[-3000:]
    assert all(line["total_steps"] == 1024 for line in lines)
    resume = ["--resume", str(tmp_path / "half" / "run"), "--total-timesteps", "2048", "--quiet"]
    status, resumed, err = _launch(2, resume, tmp_path / "resumed", 1, 200)
    assert status == 0, err[-3000:]
    status, straight, err = _launch(
        2, [*args, "--total-timesteps", "2048"], tmp_path / "all", 1, 200
    )
    assert status == 0, err[-3000:]
    assert sorted(line["process"] for line in resumed) == [0, 1]
    assert all(line["start_update"] == 8 and line["num_updates"] == 16 for line in resumed)
    checksums = {line["params_checksum"] for line in resumed + straight}
    assert len(checksums) == 1, checksums
    for process in (0, 1):
        got = _load(tmp_path / "resumed" / f"params_{process}.npz")
        want = _load(tmp_path / "all" / f"params_{process}.npz")
        assert len(got) == len(want) == 12
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


NATIVE_TRACE = ("Check failure", "*** ", "Fatal Python error", "Traceback", "terminate called")


FAULT_TIMEOUT_S = 20  # a third of the default: a frozen peer is found in about half of it


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "victim"),
    [("killed", 1), ("frozen", 1), ("killed", 0)],
    ids=["killed", "frozen", "coordinator-killed"],
)
def test_a_dead_or_frozen_process_ends_the_other_within_the_timeout(tmp_path, how, victim):
    """One process is killed (SIGKILL) or frozen (SIGSTOP: alive, answering nothing) mid-run,
    process 1 or process 0 (the coordinator, which hosts the coordination service); the other
    must exit non-zero within the fault timeout (``--fault-timeout``, 20 s here; 60 s by
    default) instead of waiting in a collective for ever.

    When process 1 stops, process 0 ends with podracer's one line (``parallel.PeerWatch``)
    naming process 1 and how to resume, exit status 4, and no native trace. When process 0 is
    killed, JAX's runtime aborts process 1's worker in C++ within a second (docs/scaling.md says
    why); the command line's parent of it (``podracer.cli.supervisor``) holds the native trace back
    and ends with the same kind of line, naming process 0."""
    survivor = 1 - victim
    port = _free_port()
    run_dir = tmp_path / "run"
    procs, logs = [], []
    try:
        base = [sys.executable, "-m", "podracer.cli.main", "train", *ANAKIN_ARGS[:-5]]
        base += ["--total-timesteps", "100000000", "--arch.updates-per-call", "1"]
        base += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
        base += ["--run-dir", str(run_dir), "--fault-timeout", str(FAULT_TIMEOUT_S)]
        for i in range(2):
            err = open(tmp_path / f"err_{i}.txt", "w")  # noqa: SIM115 - closed below
            logs.append(err)
            procs.append(
                subprocess.Popen(
                    [*base, "--process-id", str(i)],
                    env=_env(2),
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 120
        progress = tmp_path / "err_0.txt"
        while "steps" not in progress.read_text():  # process 0's progress lines: mid-run
            assert time.monotonic() < deadline, progress.read_text()[-3000:]
            assert all(p.poll() is None for p in procs), progress.read_text()[-3000:]
            time.sleep(0.5)
        os.killpg(procs[victim].pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        killed = time.monotonic()
        try:
            status = procs[survivor].wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"process {survivor} still runs 90 s after process {victim} was {how}")
        waited = time.monotonic() - killed
    finally:
        _kill(procs)
        for log in logs:
            log.close()
    message = (tmp_path / f"err_{survivor}.txt").read_text()
    print(f"process {survivor} stopped {waited:.1f} s after process {victim} was {how}: {status}")
    assert status != 0
    assert waited < FAULT_TIMEOUT_S, f"process {survivor} took {waited:.0f} s to stop"
    lines = [line for line in message.splitlines() if line.startswith("podracer:")]
    assert status == parallel.PEER_LOST_EXIT_CODE, message[-3000:]
    assert len(lines) == 1, message[-3000:]
    if victim == 0:
        assert lines[0].startswith(f"podracer: process 0 of 2 (the coordinator, 127.0.0.1:{port})")
    else:
        assert lines[0].startswith("podracer: process 1 of 2 (host "), lines[0]
    assert lines[0].endswith(f"podracer train --resume {run_dir}"), lines[0]
    assert not [text for text in NATIVE_TRACE if text in message], message[-3000:]
    assert not [line for line in message.splitlines() if line[:1] in "FE" and line[1:5].isdigit()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "values", "field"),
    [
        ("--run-dir", ("ra", "rb"), 'run_dir: process 0 has "ra", process 1 has "rb"'),
        (
            "--agent.lr",
            ("0.001", "0.002"),
            "config.agent_config.lr: process 0 has 0.001, process 1",
        ),
    ],
    ids=["run-dir", "agent-lr"],
)
def test_processes_that_disagree_stop_within_seconds_naming_the_field(
    tmp_path, flag, values, field
):
    """Two processes of one run given different values of a flag that must agree: both stop
    before building anything, exit status 2, the field and both values named, nothing written."""
    port = _free_port()
    base = [sys.executable, "-m", "podracer.cli.main", "train", *ANAKIN_ARGS]
    base += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    procs = []
    try:
        for i, value in enumerate(values):
            extra = [flag, value] if flag == "--run-dir" else [flag, value, "--run-dir", "run"]
            procs.append(
                subprocess.Popen(
                    [*base, "--process-id", str(i), *extra],
                    env=_env(1),
                    cwd=tmp_path,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            )
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        _kill(procs)
    for proc, (_, err) in zip(procs, outputs, strict=True):
        errors = [line for line in err.splitlines() if line.startswith("podracer: error:")]
        assert proc.returncode == 2, err[-3000:]
        assert len(errors) == 1 and "the processes disagree on " + field in errors[0], err
        assert "Traceback" not in err
    assert os.listdir(tmp_path) == []


def test_resolve_arguments_environment_and_single_process():
    no_cluster = {"environ": {}, "cluster_detected": False}
    assert parallel.resolve(**no_cluster).source == "single"
    setup = parallel.resolve("10.0.0.1:1234", 4, 3, **no_cluster)
    assert (setup.coordinator, setup.num_processes, setup.process_id) == ("10.0.0.1:1234", 4, 3)
    assert setup.source == "arguments" and setup.timeout_s == 60.0
    environ = {
        "PODRACER_COORDINATOR": "host:99",
        "PODRACER_NUM_PROCESSES": "2",
        "PODRACER_PROCESS_ID": "1",
        "PODRACER_FAULT_TIMEOUT": "20",
    }
    setup = parallel.resolve(environ=environ, cluster_detected=False)
    assert (setup.coordinator, setup.num_processes, setup.process_id) == ("host:99", 2, 1)
    assert setup.timeout_s == 20.0
    setup = parallel.resolve(process_id=0, timeout_s=30, environ=environ)
    assert setup.process_id == 0 and setup.timeout_s == 30.0  # arguments win
    assert parallel.resolve("h:1", 1, 0, **no_cluster).source == "single"
    cluster = parallel.resolve(environ={}, cluster_detected=True)
    assert cluster.source == "cluster" and cluster.coordinator is None
    partial = parallel.resolve(process_id=2, environ={}, cluster_detected=True)
    assert partial.source == "cluster" and partial.process_id == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"coordinator": "nohost"}, r"--coordinator='nohost' is not allowed: give HOST:PORT"),
        ({"coordinator": "h:99999"}, r"--coordinator='h:99999' is not allowed"),
        ({"num_processes": 0}, r"--num-processes=0 is not allowed: it must be >= 1"),
        (
            {"coordinator": "h:1", "num_processes": 2, "process_id": 2},
            r"--process-id=2 is not allowed: it must be between 0 and --num-processes - 1 = 1",
        ),
        ({"coordinator": "h:1"}, r"--num-processes, --process-id missing"),
        ({"timeout_s": 0}, r"--fault-timeout=0 is not allowed: it must be >= 2"),
    ],
)
def test_resolve_errors_name_the_flag_and_what_is_allowed(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        parallel.resolve(**kwargs, environ={}, cluster_detected=False)


def test_watchdog_ends_a_stalled_process_with_a_message():
    code = (
        "import time\n"
        "from podracer.parallel import Watchdog\n"
        "w = Watchdog('the test step', timeout_s=2, enabled=True)\n"
        "w.beat(); time.sleep(0.2); w.beat()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == parallel.STALLED_EXIT_CODE
    assert "no progress in the test step" in proc.stderr
    assert "after 2 steps" in proc.stderr


def test_watchdog_is_quiet_while_steps_come():
    """A first step longer than the timeout is allowed (it is not timed), and later steps get
    twice the longest step on top of the timeout. (If it fired, this process would exit.)"""
    watchdog = parallel.Watchdog("a step", timeout_s=2, enabled=True)
    with watchdog:
        watchdog.beat()
        time.sleep(2.5)  # the first step: longer than the timeout
        watchdog.beat()
        for _ in range(3):
            time.sleep(0.1)
            watchdog.beat()
    assert watchdog.limit() >= 2.0 + 2 * 2.5
    assert not parallel.Watchdog("a step").enabled  # one process: never armed


def test_cli_rejects_bad_process_flags(capsys):
    from podracer.cli import main as cli

    argv = ["train", "--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"]
    assert cli.main(argv) == 2
    assert "--coordinator='nohost' is not allowed: give HOST:PORT" in capsys.readouterr().err
    argv = ["train", "--coordinator", "h:5", "--num-processes", "2", "--process-id", "2"]
    assert cli.main(argv) == 2
    assert "--process-id=2 is not allowed" in capsys.readouterr().err


@pytest.mark.slow
def test_launch_local_exits_with_a_failing_process_status(tmp_path):
    status, lines, err = _launch(2, ["--total-timesteps", "0"], tmp_path, 1, timeout_s=120)
    assert status == 2 and lines == []
    assert "--total-timesteps=0 is not allowed" in err
    assert "launch_local.sh: a process exited with status 2" in err


@pytest.mark.parametrize(("ntasks", "expected"), [("2", True), ("1", False)])
def test_detect_cluster_reads_slurm_task_count(monkeypatch, ntasks, expected):
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_NODELIST": "node[01-02]",
        "SLURM_NTASKS": ntasks,
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
    }
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    assert parallel.detect_cluster() is expected


def test_detect_cluster_without_jax_registry_is_no_cluster(monkeypatch):
    """A JAX release that renames its private cluster registry must not break every run."""
    from jax._src import clusters

    monkeypatch.delattr(clusters.ClusterEnv, "_cluster_types")
    assert parallel.detect_cluster() is False


def test_devices_by_local_ids_and_global_array_on_one_process():
    """One process, two virtual devices: the learner devices are the named local ones, in order,
    and a global array from process-local data is that data, split as asked."""
    import jax

    local = jax.local_devices()
    assert len(local) == 2  # tests/conftest.py
    assert parallel.devices_by_local_ids([1]) == [local[1]]
    assert parallel.devices_by_local_ids([1, 0]) == [local[1], local[0]]
    with pytest.raises(ConfigError, match=r"local device ids \[2\] do not exist.*ids 0..1"):
        parallel.devices_by_local_ids([0, 2])
    mesh = parallel.data_mesh(local)
    data = {"obs": np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)}
    array = parallel.global_array(
        jax.sharding.NamedSharding(mesh, jax.P(None, parallel.DATA_AXIS)), data
    )
    np.testing.assert_array_equal(np.asarray(array["obs"]), data["obs"])
    shards = sorted(array["obs"].addressable_shards, key=lambda s: s.index[1].start)
    assert [s.data.shape for s in shards] == [(3, 2, 2), (3, 2, 2)]
    np.testing.assert_array_equal(np.asarray(shards[1].data), data["obs"][:, 2:])


class _Store:
    """The coordination service's key-value store, as PeerWatch uses it; ``down``: unreachable."""

    def __init__(self):
        self.values, self.down = {}, False

    def key_value_set(self, key, value, allow_overwrite=False):
        if self.down:
            raise RuntimeError("UNAVAILABLE: Socket closed")
        assert allow_overwrite or key not in self.values
        self.values[key] = value

    def key_value_dir_get(self, prefix):
        if self.down:
            raise RuntimeError("UNAVAILABLE: Socket closed")
        return sorted((k, v) for k, v in self.values.items() if k.startswith(prefix))


def test_peer_watch_names_the_process_that_stopped(monkeypatch):
    """Three processes beat through one store, on a hand-moved clock: a process whose beat stops
    is named once ``limit_s`` has passed since its last beat (``grace_s`` after a collective
    failed), with its host and the run directory; a store that stops answering names the
    coordinator. A watch's own lateness never counts against a peer."""
    store, now = _Store(), [0.0]
    monkeypatch.setattr(parallel.processes, "_run_dir", "runs/r")
    watches = [
        parallel.PeerWatch(store, i, 3, 10.0, host=f"h{i}", clock=lambda: now[0]) for i in range(3)
    ]
    assert (watches[0].period_s, watches[0].grace_s) == (1.0, 5.0)
    for _ in range(5):
        for watch in watches:
            watch.exchange()
        now[0] += 1.0
    assert all(watch.verdict() is None for watch in watches)
    assert watches[0].changes() == {0: 5, 1: 4, 2: 4}  # it reads before 1 and 2 write
    for _ in range(12):  # process 2 stops beating at t = 5
        for watch in watches[:2]:
            watch.exchange()
        now[0] += 1.0
    lost = watches[0].verdict()
    assert (lost.process, lost.host, lost.coordinator) == (2, "h2", False)
    assert lost.silent_s == pytest.approx(11.0)
    assert watches[1].verdict().process == 2
    line = watches[0].message(lost)
    assert line == (
        "podracer: process 2 of 3 (host h2) stopped: no heartbeat for 11 s (it died or stopped "
        "answering); process 0 stops too (exit status 4). Restart every process with: "
        "podracer train --resume runs/r"
    )

    pair = _Store()
    late, peer = (parallel.PeerWatch(pair, i, 2, 10.0, clock=lambda: now[0]) for i in range(2))
    late.exchange()
    for _ in range(60):  # the peer beats; this process is held up and reads nothing
        peer.exchange()
        now[0] += 1.0
    assert late.verdict() is None  # its last read is as old as the peer's beat in it
    late.exchange()
    assert late.verdict() is None

    fresh = [parallel.PeerWatch(store, i, 2, 10.0, clock=lambda: now[0]) for i in range(2)]
    for watch in fresh:
        watch.exchange()
    fresh[0].suspect()  # a collective failed in process 0: 5 s without a beat is enough
    for _ in range(6):
        fresh[0].exchange()
        now[0] += 1.0
    fresh[0].exchange()
    assert fresh[0].verdict().process == 1

    store.down = True  # the coordination service (process 0) stopped answering
    watch = parallel.PeerWatch(store, 1, 2, 10.0, coordinator="10.0.0.1:1234", clock=lambda: now[0])
    now[0] += 11.0
    lost = watch.verdict()
    assert (lost.process, lost.coordinator) == (0, True)
    assert watch.message(lost).startswith(
        "podracer: process 0 of 2 (the coordinator, 10.0.0.1:1234) stopped answering: the "
        "coordination service has not answered for 11 s; process 1 stops too"
    )


def test_peer_aware_excepthook_prints_a_traceback_when_every_peer_is_alive(monkeypatch):
    """An uncaught JaxRuntimeError waits for the watch's verdict; peers that go on beating mean
    the error was this process's own: its traceback is printed (after about two beats), and
    the watch now judges with the grace period."""
    import jax

    store, printed = _Store(), []
    watches = [parallel.PeerWatch(store, i, 2, 10.0, period_s=0.05) for i in range(2)]
    monkeypatch.setattr(parallel.processes, "_peer_watch", watches[0])
    monkeypatch.setattr(
        parallel.processes, "_previous_excepthook", lambda *args: printed.append(args)
    )
    beating = threading.Event()

    def beat():
        while not beating.wait(0.02):
            for watch in watches:
                watch.exchange()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        error = jax.errors.JaxRuntimeError("UNKNOWN: Gloo all-reduce failed")
        start = time.monotonic()
        parallel.peer_aware_excepthook(type(error), error, None)
        assert time.monotonic() - start < 5.0 + 3 * 0.05 + 1.0
        assert printed and printed[0][1] is error
        assert watches[0]._suspect
        other = ValueError("a bug")  # not a runtime error: printed at once
        parallel.peer_aware_excepthook(ValueError, other, None)
        assert printed[1][1] is other
    finally:
        beating.set()
        thread.join(timeout=5)


def test_supervisor_holds_back_the_runtime_abort_and_passes_the_rest():
    """The parent of a non-coordinator process: ordinary lines pass at once; the runtime's log
    lines wait for a line of another kind; from the fatal line on everything is held, and the
    loss of the coordinator is recognised from it."""
    import io

    from podracer.cli import supervisor

    out = io.StringIO()
    output = supervisor._Output(out)
    output.feed("progress 1\n")
    output.feed("W1206 10:18:06.890008   27205 gloo.cc:12] slow\n")
    assert out.getvalue() == "progress 1\n"  # held: the runtime's line
    output.feed("progress 2\n")
    assert out.getvalue() == (
        "progress 1\nW1206 10:18:06.890008   27205 gloo.cc:12] slow\nprogress 2\n"
    )
    output.feed("podracer-run-dir: runs/x\n")
    output.feed("E1206 10:18:07.000001   27205 agent.cc:289] Polled an error\n")
    output.feed(
        "F1206 10:18:07.000002   27205 client.h:80] Terminating process because the JAX "
        "distributed service detected fatal errors. ... UNAVAILABLE: Failed to send RPC to "
        "coordination service. Either the leader task was preempted/died\n"
    )
    output.feed("*** Check failure stack trace: ***\n")
    output.feed("    @     0x7f271b240634  absl::LogMessage::SendToLog()\n")
    output.feed("progress 3\n")  # after the fatal line: held too
    assert out.getvalue().endswith("progress 2\n")
    assert output.run_dir == "runs/x" and output.leader_gone()
    assert len(output.pending) == 1 and len(output.fatal) == 4
    line = supervisor.message(1, 2, "10.0.0.1:1234", output.run_dir)
    assert line.startswith("podracer: process 0 of 2 (the coordinator, 10.0.0.1:1234) stopped")
    assert line.endswith(
        "process 1 stops too (exit status 4). Restart every process with: "
        "podracer train --resume runs/x"
    )
    other = supervisor._Output(io.StringIO())
    other.feed("F1206 10:18:07.000002   27205 x.cc:1] Check failed: something else\n")
    assert not other.leader_gone()  # another abort: its lines are passed on as they were


def test_only_a_multi_process_run_s_other_processes_are_supervised(monkeypatch):
    from podracer.cli import supervisor
    from podracer.cli.parse import parse_selectors

    def wanted(argv):
        return supervisor.wanted(parse_selectors(argv))

    monkeypatch.delenv(supervisor.SUPERVISED, raising=False)
    multi = ["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id"]
    assert wanted([*multi, "1"])
    assert not wanted([*multi, "0"])
    assert not wanted([*multi, "1", "--dry-run"])
    assert not wanted(["--agent", "ppo"])
    monkeypatch.setenv(supervisor.SUPERVISED, "1")
    assert not wanted([*multi, "1"])


def test_the_supervisor_runs_the_command_as_a_child_and_passes_its_status_and_errors(capfd):
    """``supervisor.run``: the child is ``podracer train ARGV``; its stderr passes through and
    its exit status is the supervisor's (a bad flag: 2, with podracer's one line)."""
    from podracer.cli import supervisor
    from podracer.cli.parse import parse_selectors

    assert supervisor.run(parse_selectors(["--agent", "nope", "--quiet"])) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1].startswith("podracer: error: ") and "nope" in err[-1]


def test_the_supervisor_turns_the_runtimes_abort_at_a_lost_coordinator_into_its_line(
    tmp_path, monkeypatch, capfd
):
    """A child that the runtime aborts (SIGABRT) after the coordinator's loss: the supervisor
    holds the runtime's lines back, prints podracer's line naming the run directory to resume,
    and exits with PEER_LOST_EXIT_CODE. The child here is a stand-in script that writes what
    the JAX runtime writes and aborts itself."""
    from podracer.cli import supervisor
    from podracer.cli.parse import parse_selectors

    child = tmp_path / "python"
    child.write_text(
        "#!/bin/sh\n"
        "echo 'podracer-run-dir: runs/x' >&2\n"
        "echo 'F1206 10:18:07.000002   27205 client.h:80] Terminating process because the JAX "
        "distributed service detected fatal errors. UNAVAILABLE: Failed to send RPC to "
        "coordination service' >&2\n"
        "kill -ABRT $$\n"
    )
    child.chmod(0o755)
    monkeypatch.setattr(supervisor.sys, "executable", str(child))
    multi = ["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "1"]
    assert supervisor.run(parse_selectors(multi)) == parallel.PEER_LOST_EXIT_CODE
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [supervisor.message(1, 2, "127.0.0.1:1234", "runs/x")]
