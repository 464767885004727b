"""The elastic tournament (podracer.experiments.elastic): its pure logic without Ray, then real
runs of ``podracer train --pods`` on a local Ray and on a ``ray.cluster_utils.Cluster`` (127.0.0.1),
with a pod killed, a node added and removed, and the driver killed and resumed."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from podracer.experiments import elastic
from podracer.experiments.elastic import Entry, MemberId
from podracer.loops.common import params_checksum

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason='needs the ray extra (pip install -e ".[ray]")'
)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A tiny population: 4 updates of 2 x 16 steps between reports, 2 evaluation episodes.
SMALL = [
    "--agent",
    "ppo",
    "--env",
    "gymnax:CartPole-v1",
    "--population.interval",
    "4",
    "--population.fraction",
    "0.5",
    "--population.eval_episodes",
    "2",
    "--population.eval_max_steps",
    "200",
    "--arch.num_envs",
    "2",
    "--arch.rollout_len",
    "16",
    "--quiet",
]


# --- pure logic ----------------------------------------------------------------------------------


def _board(scores: dict[tuple[int, int], float]) -> dict[MemberId, Entry]:
    return {MemberId(*k): Entry(s, {"lr": 1e-3}, 4, f"pod{k[0]}-u4") for k, s in scores.items()}


def test_choose_replacements_is_truncation_over_every_pod():
    # 6 members, fraction 0.34: n = 2. Losers (1,0)=1 and (0,2)=2; parents (0,0)=9, (1,2)=8.
    board = _board({(0, 0): 9, (0, 1): 5, (0, 2): 2, (1, 0): 1, (1, 1): 4, (1, 2): 8})
    rng = np.random.default_rng(0)
    for _ in range(20):
        verdict = elastic.choose_replacements(board, 0, 0.34, rng)
        assert set(verdict) == {2}
        assert verdict[2] in {MemberId(0, 0), MemberId(1, 2)}
        verdict = elastic.choose_replacements(board, 1, 0.34, rng)
        assert set(verdict) == {0}
    # A parent whose state is not at hand is skipped: the next best takes its place.
    verdict = elastic.choose_replacements(
        board, 1, 0.34, rng, eligible=lambda m: m != MemberId(0, 0)
    )
    assert verdict[0] in {MemberId(1, 2), MemberId(0, 1)}
    # NaN is the lowest score; a board of one member replaces nothing.
    board[MemberId(1, 1)] = Entry(float("nan"), {"lr": 1e-3}, 4, "pod1-u4")
    assert set(elastic.choose_replacements(board, 1, 0.34, rng)) == {0, 1}
    assert elastic.choose_replacements(_board({(0, 0): 1.0}), 0, 0.5, rng) == {}


def test_pod_row_ranks_and_lineage():
    lineage = elastic.initial_lineage(3)
    replaced = [{"member": 2, "parent": {"pod": 1, "member": 0}, "parent_updates": 8}]
    lineage = elastic.copied_lineage(lineage, replaced, 8)
    row = elastic.pod_row(
        0, 12, 32, [3.0, None, 7.0], [{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}], lineage
    )
    assert row["id"] == "pod0-u12" and row["step"] == 12 * 32
    assert [m["member"] for m in row["members"]] == [2, 0, 1]  # best first, None last
    assert row["best_score"] == 7.0 and row["median_score"] == 5.0
    best = row["members"][0]
    assert best["parent"] == {"pod": 1, "member": 0} and best["age"] == 4 and best["copies"] == 1
    assert row["members"][1]["parent"] is None and row["members"][1]["age"] == 12


def test_top_members_and_final_scores():
    rows = [
        {"id": "pod0-u4", "pod": 0, "members": [{"member": 0, "score": 5.0}]},
        {"id": "pod1-u4", "pod": 1, "members": [{"member": 0, "score": 9.0}]},
        {"id": "pod0-u8", "pod": 0, "members": [{"member": 0, "score": 5.0}]},
    ]
    top = elastic.top_members(rows, 2)
    assert top == [(9.0, MemberId(1, 0), "pod1-u4"), (5.0, MemberId(0, 0), "pod0-u4")]
    scores = elastic.final_scores(_board({(0, 0): 1.0, (0, 1): 3.0, (1, 0): 10.0}))
    assert scores["final_median_score"] == 3.0 and scores["final_best_member"] == "pod1-m0"


def _run_spec(argv):
    """``(RunSpec, selectors)`` of ``podracer train ARGV``, as the command line resolves it."""
    from podracer.cli.parse import parse_selectors, run_spec

    return run_spec(parse_selectors(argv))


def _spec(population: int = 4):
    spec, _ = _run_spec([*SMALL, "--population", str(population), "--total-timesteps", "512"])
    return spec


def test_two_pods_in_this_process_report_copy_and_their_best_member_evaluates(tmp_path):
    """Without Ray: two :class:`~podracer.experiments.elastic.Pod` objects (plain classes) run in
    turn against one in-process leaderboard, the second joining with copies of the first's best.
    Every report is acknowledged once, the joined pod starts from seeded members, and the best
    member reloads with the checksum its row records and plays episodes."""
    from podracer import runs

    # 2 members a pod, 256 steps of 2 x 16: 8 updates, 2 reports a pod
    spec, _ = _run_spec([*SMALL, "--population", "4", "--total-timesteps", "256"])
    run_dir = str(tmp_path / "run")
    runs.save_spec(run_dir, spec)
    layout = {"config": {"pods": 2}, "pods": [{"pod": p, "members": 2} for p in (0, 1)]}
    with open(os.path.join(run_dir, elastic.ELASTIC_FILE), "w") as f:
        json.dump(layout, f)  # the driver's layout file, as it writes it
    board = elastic.Leaderboard(run_dir, spec.to_dict(), top_k=2)
    first = elastic.Pod(run_dir, spec.to_dict(), 0, 2, board).train()
    assert first["pod"] == 0 and first["updates"] == 8 and first["reports"] == 2
    assert first["start_update"] == 0
    joined = elastic.Pod(run_dir, spec.to_dict(), 1, 2, board, join=True).train()
    assert joined["reports"] == 2 and joined["replaced"] >= 1  # seeded from pod 0's members
    rows = elastic.read_jsonl(os.path.join(run_dir, "leaderboard.jsonl"))
    ids = [r["id"] for r in rows]
    assert ids == [f"pod{p}-u{u}" for p in (0, 1) for u in (4, 8)]
    info = elastic.Pod(run_dir, spec.to_dict(), 0, 2, board).info()
    assert info["pod"] == 0 and info["pid"] == os.getpid() and info["node"] is None
    # a pod started again finds its checkpoint at the end and reports nothing more
    again = elastic.Pod(run_dir, spec.to_dict(), 0, 2, board).train()
    assert again["start_update"] == 8 and again["reports"] == 0
    state, meta = elastic.load_best(run_dir)
    row = next(r for r in rows if r["id"] == meta["record"])
    member = next(m for m in row["members"] if m["score"] == meta["score"])
    assert params_checksum(state["params"]) == pytest.approx(member["params_checksum"], rel=1e-12)
    result = elastic.evaluate_best(run_dir, episodes=2)
    assert result["record"] == meta["record"] and result["episodes"] == 2
    assert 1.0 <= result["mean"] <= 500.0  # CartPole-v1 returns


@needs_ray
def test_an_elastic_dry_run_checks_and_plans_without_starting_ray(tmp_path, capsys):
    from podracer.cli import main as cli

    run_dir = str(tmp_path / "r")
    argv = ["train", *SMALL, "--population", "4", "--pods", "2", "--run-dir", run_dir]
    assert cli.main([*argv, "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["dry_run"] is True and plan["config"]["population"]["size"] == 4
    assert not os.path.exists(run_dir)
    five = ["train", *SMALL, "--population", "4", "--pods", "5", "--dry-run"]
    assert cli.main(five) == 2  # 4 members in 5 pods
    assert "pods" in capsys.readouterr().err.strip().splitlines()[-1]


def test_leaderboard_acknowledges_each_record_once_and_keeps_the_top_k(tmp_path):
    spec = _spec()
    run_dir = str(tmp_path)
    board = elastic.Leaderboard(run_dir, spec.to_dict(), top_k=2)
    lineage = elastic.initial_lineage(2)

    def state(x):
        return {"params": {"w": np.full(3, x, np.float32)}, "opt_state": (), "agent_state": ()}

    def report(pod, updates, scores):
        row = elastic.pod_row(
            pod, updates, 32, scores, [{"lr": 1e-3, "ent_coef": 0.01}] * 2, lineage
        )
        return board.report(row, [state(s) for s in scores])

    # 2 members, n = floor(0.5 x 2) = 1: member 0 (1.0) copies member 1 (2.0).
    first = report(0, 4, [1.0, 2.0])["replaced"]
    assert [(r["member"], r["parent"]) for r in first] == [(0, {"pod": 0, "member": 1})]
    # 4 members, n = 2: losers 0.5 (pod 1) and 1.0 (pod 0), parents 5.0 (pod 1) and 2.0 (pod 0).
    answer = report(1, 4, [5.0, 0.5])
    assert [r["member"] for r in answer["replaced"]] == [1]
    parent = answer["replaced"][0]["parent"]
    assert parent in ({"pod": 1, "member": 0}, {"pod": 0, "member": 1})
    np.testing.assert_array_equal(
        answer["replaced"][0]["state"]["params"]["w"], np.full(3, 5.0 if parent["pod"] else 2.0)
    )
    assert report(1, 4, [5.0, 0.5]) == {"id": "pod1-u4", "duplicate": True, "replaced": []}
    rows = elastic.read_jsonl(os.path.join(run_dir, "leaderboard.jsonl"))
    assert [r["id"] for r in rows] == ["pod0-u4", "pod1-u4"]
    assert rows[1]["replaced"][0]["parent"] == parent  # written before it was answered
    with open(os.path.join(run_dir, "top", "top.json")) as f:
        top = json.load(f)
    assert [(t["name"], t["score"]) for t in top] == [("pod1-m0-u4", 5.0), ("pod0-m1-u4", 2.0)]
    assert sorted(os.listdir(os.path.join(run_dir, "top"))) == [
        "pod0-m1-u4",
        "pod1-m0-u4",
        "top.json",
    ]
    reloaded = elastic.load_member(run_dir, "pod1-m0-u4", state(0.0))
    np.testing.assert_array_equal(reloaded["params"]["w"], np.full(3, 5.0))
    # A leaderboard started again from the directory knows what was acknowledged.
    again = elastic.Leaderboard(run_dir, spec.to_dict(), top_k=2)
    assert again.acknowledged_ids() == ["pod0-u4", "pod1-u4"]
    assert again.summary()["final_median_score"] == pytest.approx(np.median([1.0, 2.0, 5.0, 0.5]))


# --- bad input -----------------------------------------------------------------------------------


def _main(argv, capsys):
    from podracer.cli import main as cli

    rc = cli.main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


def test_more_pods_than_members_is_a_one_line_error(capsys, tmp_path):
    argv = ["train", *SMALL, "--population", "4", "--pods", "5", "--run-dir", str(tmp_path / "r")]
    rc, err = _main(argv, capsys)
    assert rc == 2 and "--pods=5 is not allowed with --population 4" in err[-1]
    assert "at most 4 pods" in err[-1]
    rc, err = _main([*argv[:-4], "--pods", "3", *argv[-2:]], capsys)
    assert rc == 2 and "give one of 1, 2, 4" in err[-1]


@needs_ray
def test_a_loop_that_runs_in_no_pod_is_a_one_line_error(capsys, tmp_path):
    argv = ["train", "--arch", "sebulba", "--agent", "ppo", "--env", "envpool:CartPole-v1"]
    argv += ["--population", "4", "--pods", "2", "--run-dir", str(tmp_path / "r")]
    rc, err = _main(argv, capsys)
    assert err[0].startswith("preset 'classic_control' for --agent ppo")  # Sebulba's, printed
    assert rc == 2 and len(err) == 2, err  # then the error, one line
    assert "--pods is not allowed with --arch sebulba: pods run the loops anakin" in err[1]
    assert not (tmp_path / "r").exists()


def test_missing_ray_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    argv = ["train", *SMALL, "--population", "4", "--pods", "2", "--run-dir", str(tmp_path / "r")]
    rc, err = _main(argv, capsys)
    assert rc == 2 and 'pip install "podracer[ray]"' in err[-1] and "ray extra" in err[-1]


@needs_ray
def test_a_cluster_that_does_not_answer_is_a_one_line_error_within_30_s(tmp_path):
    import socket

    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    proc = _run(
        [
            *SMALL,
            "--population",
            "4",
            "--total-timesteps",
            "256",
            "--pods",
            "2",
            "--cluster",
            f"127.0.0.1:{port}",
            "--run-dir",
            str(tmp_path / "r"),
        ],
        timeout=60,
    )
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("podracer: error: --cluster='127.0.0.1:") and "no Ray" in lines[-1]


# --- real runs -----------------------------------------------------------------------------------


def _env():
    return {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}


def _cmd(args):
    return [sys.executable, "-m", "podracer.cli.main", "train", *args]


def _run(args, timeout):
    return subprocess.run(_cmd(args), capture_output=True, text=True, timeout=timeout, env=_env())


class Procs:
    """Processes a test starts (each in a session of its own); all killed at the end."""

    def __init__(self):
        self.procs = []

    def start(self, args):
        proc = subprocess.Popen(
            _cmd(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill_all(self):
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.kill_all()


@pytest.fixture
def ray_tmp(monkeypatch):
    # Short: Ray puts its sockets under it. RAY_TMPDIR: Ray's file naming the current cluster
    # (/tmp/ray/ray_current_cluster by default) is this test's own, not shared with a Ray of
    # the other xdist worker (one test failed when /tmp/ray went away under it).
    path = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    os.makedirs(os.path.join(path, "ray"))
    monkeypatch.setenv("RAY_TMPDIR", path)
    yield path
    _kill_ray_processes(path)
    shutil.rmtree(path, ignore_errors=True)


def _kill_ray_processes(temp_dir: str) -> None:
    """Ends the processes of the Ray whose temp dir is ``temp_dir`` (found by their command
    lines), by id."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if temp_dir in cmdline and int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _wait_for(predicate, timeout, what, proc=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"the run ended (rc {proc.returncode}) before {what}:\n{err}")
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")


def _rows(run_dir):
    return elastic.read_jsonl(os.path.join(run_dir, "leaderboard.jsonl"))


def _pods_log(run_dir):
    return elastic.read_jsonl(os.path.join(run_dir, "pods.jsonl"))


def _expected_ids(run_dir, updates, pods):
    return {f"pod{p}-u{u}" for p in pods for u in range(4, updates + 1, 4)}


def _final(proc, timeout):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@needs_ray
@pytest.mark.timeout(600)  # a Ray, compiles, restarts: minutes on 2 busy cores
def test_two_pods_survive_a_pod_sigkill(procs, ray_tmp, tmp_path):
    """Two pods of 2 members on a local Ray; pod 0's process is killed once it has reported.
    The run ends with rc 0, pods.jsonl shows the failure and the restart, records keep arriving
    after the kill, every report is in leaderboard.jsonl exactly once, and members of both pods
    are on the leaderboard with copies across pods."""
    run_dir = str(tmp_path / "run")
    updates = 24  # 6 reports per pod
    proc = procs.start(
        [
            *SMALL,
            "--population",
            "4",
            "--total-timesteps",
            str(updates * 32),
            "--pods",
            "2",
            "--cluster",
            "ray",
            "--run-dir",
            run_dir,
            "--elastic.temp_dir",
            ray_tmp,
            "--elastic.num_cpus",
            "2",
        ]
    )
    start = _wait_for(
        lambda: [e for e in _pods_log(run_dir) if e["event"] == "start" and e["pod"] == 0],
        300,
        "pod 0's start",
        proc,
    )[0]
    _wait_for(lambda: any(r["pod"] == 0 for r in _rows(run_dir)), 300, "pod 0's report", proc)
    os.kill(start["pid"], signal.SIGKILL)
    killed_at = time.time()
    summary = _final(proc, 400)

    log = _pods_log(run_dir)
    events = [(e["event"], e.get("status"), e["attempt"]) for e in log if e["pod"] == 0]
    assert ("end", "failed", 0) in events and ("restart", None, 1) in events
    assert ("start", None, 1) in events and ("end", "finished", 1) in events
    failed = next(e for e in log if e["pod"] == 0 and e.get("status") == "failed")
    assert "Actor" in failed["cause"] and failed["time"] - killed_at < 10  # noticed in seconds
    assert [e["status"] for e in log if e["pod"] == 1 and e["event"] == "end"] == ["finished"]

    rows = _rows(run_dir)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))  # each acknowledged once
    assert set(ids) == _expected_ids(run_dir, updates, (0, 1))  # and every report acknowledged
    assert any(r["time"] > killed_at and r["pod"] == 0 for r in rows)
    assert {r["pod"] for r in rows} == {0, 1}
    copies = [(r["pod"], c["parent"]["pod"]) for r in rows for c in r["replaced"]]
    assert any(pod != parent for pod, parent in copies), copies  # lineage across pods
    assert summary["restarts"] == 1 and summary["pods_finished"] == 2
    assert len(summary["final_scores"]) == 4 and summary["final_median_score"] is not None


@pytest.mark.slow
@needs_ray
@pytest.mark.timeout(600)  # a Ray, compiles, restarts: minutes on 2 busy cores
def test_driver_killed_and_resumed_continues_the_leaderboard(procs, ray_tmp, tmp_path):
    run_dir = str(tmp_path / "run")
    updates = 16
    args = [
        *SMALL,
        "--population",
        "4",
        "--total-timesteps",
        str(updates * 32),
        "--pods",
        "2",
        "--cluster",
        "ray",
        "--run-dir",
        run_dir,
        "--elastic.temp_dir",
        ray_tmp,
        "--elastic.num_cpus",
        "2",
    ]
    proc = procs.start(args)
    _wait_for(lambda: len(_rows(run_dir)) >= 2, 300, "two reports", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = _rows(run_dir)
    _kill_ray_processes(ray_tmp)  # what the killed driver's local Ray left, if anything
    resumed = procs.start(["--resume", run_dir, "--quiet"])
    summary = _final(resumed, 400)
    rows = _rows(run_dir)
    ids = [r["id"] for r in rows]
    assert rows[: len(before)] == before  # the leaderboard continues, nothing lost
    assert len(ids) == len(set(ids)) and set(ids) == _expected_ids(run_dir, updates, (0, 1))
    assert summary["records"] == len(rows)
    # The best member's checkpoint reloads with the params its row records.
    state, meta = elastic.load_best(run_dir)
    row = next(r for r in rows if r["id"] == meta["record"])
    member = next(m for m in row["members"] if m["score"] == meta["score"])
    assert params_checksum(state["params"]) == pytest.approx(member["params_checksum"], rel=1e-12)
    # podracer eval plays that member.
    proc = subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", "eval", run_dir, "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["record"] == meta["record"] and result["episodes"] == 2
    assert 1.0 <= result["mean"] <= 500.0  # CartPole-v1 returns


JOIN_UPDATES = 120


@pytest.mark.slow
@needs_ray
@pytest.mark.timeout(600)  # a Ray, compiles, restarts: minutes on 2 busy cores
def test_a_node_that_joins_gets_a_pod_from_the_leaderboard_and_its_removal_is_survived(
    procs, ray_tmp, tmp_path
):
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "temp_dir": ray_tmp},
    )
    try:
        run_dir = str(tmp_path / "run")
        config = tmp_path / "population.json"  # pods of 2 members (the other tests' programs)
        config.write_text(json.dumps({"population": {"size": 2, "fraction": 0.5}}))
        proc = procs.start(
            [
                *SMALL,
                "--config",
                str(config),
                "--total-timesteps",
                str(JOIN_UPDATES * 32),
                "--pods",
                "auto",
                "--cluster",
                cluster.address,
                "--run-dir",
                run_dir,
                "--elastic.restart_timeout_s",
                "10",
            ]
        )
        _wait_for(lambda: len(_rows(run_dir)) >= 1, 300, "pod 0's report", proc)
        node = cluster.add_node(num_cpus=1)
        _wait_for(
            lambda: any(r["pod"] == 1 for r in _rows(run_dir)), 300, "the joined pod's report", proc
        )
        cluster.remove_node(node)
        summary = _final(proc, 400)
        log = _pods_log(run_dir)
        assert any(e["event"] == "join" and e["pod"] == 1 for e in log)
        first = next(r for r in _rows(run_dir) if r["pod"] == 1)
        # Every member of the joined pod is a copy of a pod-0 member the leaderboard held.
        assert all(m["parent"]["pod"] == 0 and m["copies"] == 1 for m in first["members"])
        ends = [(e["pod"], e["status"]) for e in log if e["event"] == "end"]
        assert (0, "finished") in ends
        # The removed node's pod: failed (its node gone), then dropped, or done before.
        assert [s for p, s in ends if p == 1][-1] in ("dropped", "finished"), ends
        assert (1, "failed") in ends or (1, "finished") in ends
        assert summary["pods"] == 2
    finally:
        cluster.shutdown()


def test_population_records_number_every_pods_members():
    line = elastic.initial_lineage(2)
    hp = [{"lr": 0.1}, {"lr": 0.2}]
    a = elastic.pod_row(0, 4, 32, [1.0, 2.0], hp, line)
    b = elastic.pod_row(1, 4, 32, [3.0, 4.0], hp, line)
    b["replaced"] = [{"member": 0, "parent": {"pod": 0, "member": 1}, "hparams": {"lr": 0.25}}]
    records = elastic.population_records([a, b])
    assert records[0]["scores"] == [1.0, 2.0, None, None]
    assert records[1]["scores"] == [1.0, 2.0, 3.0, 4.0]
    assert records[1]["replaced"] == [{"member": 2, "parent": 1, "hparams": {"lr": 0.25}}]
    assert [m["hparams"]["lr"] for m in records[0]["members"]] == [0.1, 0.2, 0.1, 0.2]


def test_ray_is_the_ray_extra_and_in_dev():
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["ray"]] == ["ray"]
    assert any(r.startswith("ray>") for r in extras["dev"])
    assert not any(r.startswith("ray") for r in project["dependencies"])
