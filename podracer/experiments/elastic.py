"""The elastic tournament: populations in pods on Ray, crossing pods only through a leaderboard.

A run of ``P`` members in ``N`` pods (``podracer train ... --population P --pods N --cluster
ray``) is ``N`` Ray actors, each one compiled Anakin population of ``m = P / N`` members
(:func:`podracer.population.tournament.build_system` with the in-pod tournament off), and one leaderboard
actor. A pod trains ``interval`` updates, scores its members (the population's own evaluation,
inside the compiled step), and reports to the leaderboard; no pod waits for another. The
leaderboard writes the report to ``leaderboard.jsonl`` (and the params of any member that enters
the top ``K`` to an orbax checkpoint) *before* it answers, then answers with the tournament's
verdict for that pod: every member of the pod that is among the ``n = floor(fraction x M)``
lowest of the latest scores of all ``M`` members known (any pod) takes a copy of the learner
state (params, optimizer state, agent state) of a parent drawn uniformly from the ``n`` highest
(any pod, whose state the leaderboard holds), and the parent's hyper-parameters perturbed as in
:func:`podracer.population.tournament.perturb`. This is :func:`podracer.population.tournament.select_parents`'s
truncation selection over the whole population, on scores that are at most one round old.

Host-only (threads, files, processes); nothing here is jitted. Ray is imported lazily
(:func:`import_ray`): it is the optional extra ``ray`` (``pip install -e ".[ray]"``).

The run directory::

    config.json        the RunSpec (podracer.runs.save_spec)
    elastic.json       the ElasticConfig and the pods' sizes
    leaderboard.jsonl  append-only: one "leaderboard" row per pod report (pod, updates, members
                       with scores, hyper-parameters and lineage naming pod and member)
    pods.jsonl         every pod's "start" (pod, attempt, node, pid), "end" (finished, failed
                       with the cause, dropped) and "restart"
    top/<name>/        orbax checkpoints of the top K members' learner state (top.json: which)
    pods/pod-<p>/      each pod's latest checkpoint (its whole Anakin state and lineage)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from podracer.errors import ConfigError

RAY_EXTRA = 'the ray extra: pip install "podracer[ray]" (pip install -e ".[ray]" in a checkout)'
ELASTIC_FILE = "elastic.json"
LEADERBOARD_FILE = "leaderboard.jsonl"
PODS_FILE = "pods.jsonl"
TOP_DIR = "top"
TOP_FILE = "top.json"
POD_DIR = "pods"


def import_ray():
    """The ``ray`` module, or a :class:`ConfigError` that names the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"--pods and --cluster need Ray, which is not installed: install {RAY_EXTRA}"
        ) from None
    return ray


@dataclasses.dataclass(frozen=True)
class ElasticConfig:
    """Pods, the cluster they run on, and what the driver does when one fails."""

    pods: int | str = 2
    """Pods N (the population's P members split evenly), or "auto": one per node of the cluster
    at the start, and one more for every node that joins."""
    cluster: str = "ray"
    """``ray``: start a local Ray; ``HOST:PORT``: join the Ray cluster whose head is there."""
    top_k: int = 3
    """Members whose learner state the leaderboard keeps as orbax checkpoints (the best K)."""
    max_restarts: int = 2
    """Restarts of a pod from its last checkpoint after its process or node dies (Ray's
    ``max_restarts``); after that, or where no resources allow one, the pod is dropped."""
    restart_timeout_s: float = 60.0
    """Seconds a failed pod may take to start again before it is dropped."""
    start_timeout_s: float = 300.0
    """Seconds a new pod may take to start (a worker process, imports) before it is dropped."""
    connect_timeout_s: float = 20.0
    """Seconds to reach a cluster given as HOST:PORT."""
    cpus_per_pod: float = 1.0
    """CPU cores Ray gives each pod (its XLA:CPU devices: one per core)."""
    gpus_per_pod: float = 0.0
    """GPUs Ray gives each pod (1: one GPU each)."""
    num_cpus: int | None = None
    """CPU cores of a local Ray (``cluster="ray"``; default: every core)."""
    report_timeout_s: float = 120.0
    """Seconds a pod waits for the leaderboard's answer."""
    pod_checkpoint_s: float = 10.0
    """A pod saves its checkpoint after a report when this many seconds have passed since its
    last one (0: after every report), and at its end; a restarted pod re-runs the reports since
    (the leaderboard acknowledges each once)."""
    temp_dir: str | None = None
    """Ray's temporary directory of a local Ray (default: Ray's, /tmp/ray); keep it short, Ray
    puts its sockets there."""

    def __post_init__(self):
        if self.pods != "auto" and not (isinstance(self.pods, int) and self.pods >= 1):
            raise ConfigError(
                f"--pods={self.pods!r} is not allowed: give a number of pods >= 1, or auto"
            )
        if self.cluster != "ray":
            parse_address(self.cluster)
        for name in ("top_k",):
            if getattr(self, name) < 1:
                raise ConfigError(f"ElasticConfig.{name}={getattr(self, name)!r}: must be >= 1")
        if self.max_restarts < 0:
            raise ConfigError(f"ElasticConfig.max_restarts={self.max_restarts!r}: must be >= 0")
        for name in (
            "restart_timeout_s",
            "start_timeout_s",
            "connect_timeout_s",
            "report_timeout_s",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"ElasticConfig.{name}={getattr(self, name)!r}: must be > 0")


def parse_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``; anything else is an error naming the forms allowed."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--cluster={address!r} is not allowed: give ray (a local Ray) or HOST:PORT (the "
            "head of a running Ray cluster, e.g. 10.0.0.1:6379)"
        )
    return host, int(port)


def pod_sizes(population: int, pods: int) -> int:
    """Members per pod, ``population / pods``; an error unless ``pods`` divides it."""
    if pods > population:
        raise ConfigError(
            f"--pods={pods} is not allowed with --population {population}: a pod runs at least "
            f"one member, so give at most {population} pods"
        )
    if population % pods:
        allowed = [d for d in range(1, population + 1) if population % d == 0]
        raise ConfigError(
            f"--pods={pods} is not allowed with --population {population}: the pods split the "
            f"members evenly, so give one of {', '.join(map(str, allowed))}"
        )
    return population // pods


# --- the leaderboard's pure logic ----------------------------------------------------------------


class MemberId(NamedTuple):
    """A member of an elastic run: its pod and its index in the pod."""

    pod: int
    member: int

    def name(self) -> str:
        return f"pod{self.pod}-m{self.member}"


class Entry(NamedTuple):
    """The latest report of one member on the leaderboard."""

    score: float  # NaN: no finished evaluation episode
    hparams: dict[str, float]
    updates: int  # the member's pod's updates at the report
    record: str  # the id of the leaderboard row that holds it


def record_id(pod: int, updates: int) -> str:
    """The id of a pod's report after ``updates`` updates: a re-sent report (a pod restarted
    from a checkpoint before it) has the same id and is acknowledged once."""
    return f"pod{pod}-u{updates}"


def pod_row(
    pod: int,
    updates: int,
    steps_per_update: int,
    scores: Sequence[float | None],
    hparams: Sequence[dict[str, float]],
    lineage: Sequence[dict[str, Any]],
    checksums: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The ``"leaderboard"`` row of one pod report, before the tournament (``replaced`` empty).

    The fields of :func:`podracer.population.tournament.leaderboard_record` (``members`` best first, with
    ``member``, ``score``, ``rank`` in the pod, ``hparams``, ``age``, ``since``, ``copies``),
    plus ``pod`` and ``id``; a member's ``parent`` names a pod and a member (``None`` when it was
    never copied) and ``parent_updates`` the parent's updates at the copy.
    """
    values = np.asarray([np.nan if s is None else s for s in scores], np.float64)
    order = sorted(range(len(values)), key=lambda i: (-_finite(values[i]), i))
    members = []
    for rank, i in enumerate(order, 1):
        line = lineage[i]
        members.append(
            {
                "pod": pod,
                "member": i,
                "score": None if np.isnan(values[i]) else float(values[i]),
                "rank": rank,
                "hparams": {k: float(v) for k, v in sorted(hparams[i].items())},
                "age": int(updates - line["since"]),
                "parent": line["parent"],
                "parent_updates": line.get("parent_updates"),
                "since": int(line["since"]),
                "copies": int(line["copies"]),
            }
        )
        if checksums is not None:  # the member's params, summed (checks a reloaded checkpoint)
            members[-1]["params_checksum"] = float(checksums[i])
    finite = values[np.isfinite(values)]
    return {
        "kind": "leaderboard",
        "id": record_id(pod, updates),
        "pod": pod,
        "updates": updates,
        "step": updates * steps_per_update,
        "tournament": True,
        "best_member": order[0],
        "best_score": float(finite.max()) if finite.size else None,
        "median_score": float(np.median(finite)) if finite.size else None,
        "mean_score": float(finite.mean()) if finite.size else None,
        "scores": [None if np.isnan(s) else float(s) for s in values],
        "members": members,
        "replaced": [],
    }


def _finite(x: float) -> float:
    return -math.inf if np.isnan(x) else float(x)


def entries_of(row: dict[str, Any]) -> dict[MemberId, Entry]:
    """The board entries a row gives: every member's score as it was reported."""
    return {
        MemberId(row["pod"], m["member"]): Entry(
            np.nan if m["score"] is None else float(m["score"]),
            dict(m["hparams"]),
            int(row["updates"]),
            row["id"],
        )
        for m in row["members"]
    }


def choose_replacements(
    board: dict[MemberId, Entry],
    pod: int,
    fraction: float,
    rng: np.random.Generator,
    eligible: Callable[[MemberId], bool] = lambda member: True,
) -> dict[int, MemberId]:
    """``{member of pod: parent}``: the tournament's verdict for ``pod`` on the whole board.

    With ``M`` members on the board and ``n = floor(fraction x M)``: the ``n`` lowest scores
    (NaN lowest; ties in random order) are the losers, the ``n`` highest that are ``eligible``
    (their state at hand) the parents; each loser of ``pod`` draws a parent uniformly. A loser
    that would draw itself, or a parent whose score is not above its own, is kept.
    """
    ids = sorted(board)
    n = math.floor(fraction * len(ids) + 1e-9)
    if n < 1 or len(ids) < 2:
        return {}
    scores = np.asarray([_finite(board[i].score) for i in ids])
    ties = rng.uniform(size=len(ids))
    order = np.lexsort((ties, scores))  # ascending
    losers = [ids[i] for i in order[:n]]
    top = [ids[i] for i in order[::-1] if eligible(ids[i])][:n]
    out = {}
    for loser in losers:
        if loser.pod != pod or not top:
            continue
        parent = top[int(rng.integers(len(top)))]
        if parent != loser and _finite(board[parent].score) > _finite(board[loser].score):
            out[loser.member] = parent
    return out


def top_members(records: Sequence[dict[str, Any]], k: int) -> list[tuple[float, MemberId, str]]:
    """The ``k`` best ``(score, member, record id)`` of every row ever written (a member may
    appear once per report); equal scores: the earlier first."""
    found = []
    for index, row in enumerate(records):
        for m in row["members"]:
            if m["score"] is not None:
                found.append((-m["score"], index, MemberId(row["pod"], m["member"]), row["id"]))
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    return [(-s, member, rid) for s, _, member, rid in found[:k]]


def top_name(member: MemberId, rid: str) -> str:
    """The checkpoint directory name of a top member: ``pod1-m3-u40`` (its record's updates)."""
    return f"{member.name()}-{rid.rpartition('-')[2]}"


def final_scores(board: dict[MemberId, Entry]) -> dict[str, Any]:
    """The run summary's scores over every member's latest report (all pods)."""
    ids = sorted(board)
    scores = [board[i].score for i in ids]
    finite = np.asarray([s for s in scores if np.isfinite(s)], np.float64)
    best = ids[int(np.argmax([_finite(s) for s in scores]))] if ids else None
    return {
        "final_scores": [None if not np.isfinite(s) else float(s) for s in scores],
        "final_members": [i.name() for i in ids],
        "final_best_score": float(finite.max()) if finite.size else None,
        "final_median_score": float(np.median(finite)) if finite.size else None,
        "final_best_member": None if best is None else best.name(),
    }


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The records of a JSONL file; a last line cut short (a process killed as it wrote) is
    skipped."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def append_jsonl(path: str, record: dict[str, Any]) -> None:
    """Appends one line and syncs it to disk before returning (what is acknowledged is kept)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _write_json(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def population_records(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of an elastic run as a population's leaderboard records over all its members
    (for :func:`podracer.runs.plotting.plot_population`): after each row, every member's latest
    score (None before its first report) and hyper-parameters, members numbered in (pod, member)
    order, copies as ``replaced`` with global ids, ``step`` the furthest so far."""
    ids = sorted({MemberId(r["pod"], m["member"]) for r in rows for m in r["members"]})
    index = {i: k for k, i in enumerate(ids)}
    first: dict[MemberId, dict[str, Any]] = {}
    for row in rows:
        for m in row["members"]:
            first.setdefault(MemberId(row["pod"], m["member"]), m)
    latest: dict[MemberId, dict[str, Any]] = {}
    out, step = [], 0
    for row in rows:
        for m in row["members"]:
            latest[MemberId(row["pod"], m["member"])] = m
        step = max(step, int(row["step"]))
        members = [
            {
                "member": index[i],
                "score": latest[i]["score"] if i in latest else None,
                "hparams": (latest.get(i) or first[i])["hparams"],
            }
            for i in ids
        ]
        replaced = []
        for r in row["replaced"]:
            parent = MemberId(r["parent"]["pod"], r["parent"]["member"])
            if parent in index:
                replaced.append(
                    {
                        "member": index[MemberId(row["pod"], r["member"])],
                        "parent": index[parent],
                        "hparams": r["hparams"],
                    }
                )
        out.append(
            {
                "kind": "leaderboard",
                "step": step,
                "updates": row["updates"],
                "scores": [m["score"] for m in members],
                "members": members,
                "replaced": replaced,
            }
        )
    return out


# --- the leaderboard (a Ray actor; a plain class, so it is tested without Ray) ---------------


class Leaderboard:
    """Records every pod report before acknowledging it, keeps the top K members' learner state
    on disk, and answers each report with the tournament's verdict for its pod.

    Its state is rebuilt from the run directory when it starts (a driver resumed with
    ``--resume``, or the actor restarted): ``leaderboard.jsonl`` gives the board and the ids
    already acknowledged; the top K checkpoints give parents until the pods report again.
    """

    def __init__(self, run_dir: str, spec_dict: dict[str, Any], top_k: int):
        from podracer.population import tournament as population
        from podracer.runs import spec_from_dict

        self.run_dir = run_dir
        self.spec = spec_from_dict(spec_dict)
        self.config = self.spec.population
        self.bounds = population.spaces(self.spec.agent, self.config)
        self.top_k = top_k
        self.path = os.path.join(run_dir, LEADERBOARD_FILE)
        self.records = [r for r in read_jsonl(self.path) if r.get("kind") == "leaderboard"]
        self.acknowledged = {r["id"] for r in self.records}
        self.board: dict[MemberId, Entry] = {}
        for row in self.records:
            self.board.update(entries_of(row))
        self.states: dict[MemberId, tuple[str, Any]] = {}  # latest learner state, raw NumPy
        self.top = top_members(self.records, top_k)
        os.makedirs(os.path.join(run_dir, TOP_DIR), exist_ok=True)

    # -- queries --

    def summary(self) -> dict[str, Any]:
        return {**final_scores(self.board), "records": len(self.records)}

    def acknowledged_ids(self) -> list[str]:
        return sorted(self.acknowledged)

    def best(self) -> tuple[float, MemberId, str] | None:
        return self.top[0] if self.top else None

    # -- a report --

    def report(self, row: dict[str, Any], states: Sequence[Any], template: Any = None):
        """Records ``row`` (a pod's :func:`pod_row`) and ``states`` (each member's learner state
        as raw NumPy, :func:`member_state`), then returns ``{"id", "duplicate", "replaced":
        [{"member", "parent", "parent_updates", "score", "hparams", "state"}]}``.

        A row whose id was acknowledged before is not written again; its answer replaces no
        member (the pod that re-sent it goes on from the state it restarted with)."""
        rid = row["id"]
        pod = int(row["pod"])
        if rid in self.acknowledged:
            return {"id": rid, "duplicate": True, "replaced": []}
        entries = entries_of(row)
        self.board.update(entries)
        for member, state in enumerate(states):
            self.states[MemberId(pod, member)] = (rid, state)
        if template is None and states:
            template = states[0]
        replaced = self._tournament(row, template)
        row = {**row, "replaced": [{k: v for k, v in r.items() if k != "state"} for r in replaced]}
        row["time"] = time.time()
        self._save_top(row, states)
        append_jsonl(self.path, row)
        self.records.append(row)
        self.acknowledged.add(rid)
        return {"id": rid, "duplicate": False, "replaced": replaced}

    def _tournament(self, row: dict[str, Any], template: Any) -> list[dict[str, Any]]:
        pod, updates = int(row["pod"]), int(row["updates"])
        rng = np.random.default_rng([self.spec.seed, pod, updates, 7])
        if not self.config.tournament:
            return []
        verdict = choose_replacements(
            self.board,
            pod,
            self.config.fraction,
            rng,
            eligible=lambda member: self._state_of(member, template) is not None,
        )
        return self._copies(verdict, rng)

    def _copies(self, verdict: dict[int, MemberId], rng: np.random.Generator):
        """The replacements of ``{member: parent}``: the parent's state, and its
        hyper-parameters perturbed (:func:`podracer.population.tournament.perturb`)."""
        import jax
        import jax.numpy as jnp

        from podracer.population.tournament import perturb

        if not verdict:
            return []
        members = sorted(verdict)
        parents = [verdict[m] for m in members]
        values = {
            name: jnp.asarray([self.board[p].hparams[name] for p in parents], jnp.float32)
            for name in self.bounds
        }
        key = jax.random.key(int(rng.integers(2**31)))
        new = perturb(
            key,
            values,
            jnp.ones(len(members), bool),
            self.bounds,
            factors=self.config.perturb_factors,
            resample_prob=self.config.resample_prob,
        )
        out = []
        for j, (member, parent) in enumerate(zip(members, parents, strict=True)):
            entry = self.board[parent]
            out.append(
                {
                    "member": member,
                    "parent": {"pod": parent.pod, "member": parent.member},
                    "parent_updates": entry.updates,
                    "parent_score": None if np.isnan(entry.score) else entry.score,
                    "hparams": {n: float(new[n][j]) for n in sorted(new)},
                    "state": self.states[parent][1] if parent in self.states else None,
                }
            )
        return [r for r in out if r["state"] is not None]

    def _state_of(self, member: MemberId, template: Any):
        if member in self.states:
            return self.states[member][1]
        for _, top_member, rid in self.top:  # after a restart: from the top K on disk
            if top_member == member and self.board[member].record == rid and template is not None:
                state = load_member(self.run_dir, top_name(member, rid), template)
                self.states[member] = (rid, state)
                return state
        return None

    def _save_top(self, row: dict[str, Any], states: Sequence[Any]) -> None:
        """The top K after ``row``: new members' states saved, the fallen ones removed, and
        ``top.json`` rewritten; all before the row is acknowledged."""
        new_top = top_members([*self.records, row], self.top_k)
        for score, member, rid in new_top:
            name = top_name(member, rid)
            if rid == row["id"] and not os.path.isdir(os.path.join(self.run_dir, TOP_DIR, name)):
                save_member(self.run_dir, name, states[member.member], row, score)
        keep = {top_name(m, r) for _, m, r in new_top}
        for name in os.listdir(os.path.join(self.run_dir, TOP_DIR)):
            if name not in keep and not name.endswith(".json"):
                shutil.rmtree(os.path.join(self.run_dir, TOP_DIR, name), ignore_errors=True)
        self.top = new_top
        _write_json(
            os.path.join(self.run_dir, TOP_DIR, TOP_FILE),
            [
                {"name": top_name(m, r), "pod": m.pod, "member": m.member, "record": r, "score": s}
                for s, m, r in new_top
            ],
        )

    def seed_members(self, pod: int, count: int, template: Any) -> list[dict[str, Any]]:
        """Parents for a pod that joins: ``count`` copies of members drawn from the board's best
        (the top ``max(1, floor(fraction x M))`` whose state is at hand), hyper-parameters
        perturbed; [] when the board has none yet."""
        rng = np.random.default_rng([self.spec.seed, pod, 0, 11])
        ids = sorted(self.board, key=lambda i: (-_finite(self.board[i].score), i))
        n = max(1, math.floor(self.config.fraction * len(ids) + 1e-9))
        top = [i for i in ids if self._state_of(i, template) is not None][:n]
        if not top:
            return []
        verdict = {m: top[int(rng.integers(len(top)))] for m in range(count)}
        return self._copies(verdict, rng)


def member_state(learner, i: int):
    """Member ``i``'s learner state to copy (params, optimizer state, agent state), as raw
    NumPy (:func:`podracer.runs.checkpoint.to_raw`)."""
    import jax

    from podracer.runs.checkpoint import to_raw

    parts = {
        "params": learner.params,
        "opt_state": learner.opt_state,
        "agent_state": learner.agent_state,
    }
    return jax.device_get(to_raw(jax.tree.map(lambda x: x[i], parts)))


def checksum(params) -> float:
    """The sum of every parameter in float64 (:func:`podracer.loops.common.params_checksum` of
    one member, on host)."""
    import jax

    return float(sum(np.sum(np.asarray(x, np.float64)) for x in jax.tree.leaves(params)))


def member_template(spec, members: int):
    """A member's learner state as raw NumPy, the template to restore a top checkpoint into
    (:func:`load_member`)."""
    system = pod_system(spec, 0, members)
    return member_state(system.init(spec.seed).learner, 0)


def load_best(run_dir: str):
    """``(state, meta)`` of the best member the leaderboard kept (``top.json``'s first), its
    learner state shaped like the run's members."""
    from podracer.runs import load_spec

    with open(os.path.join(run_dir, TOP_DIR, TOP_FILE)) as f:
        top = json.load(f)
    if not top:
        raise ConfigError(f"{run_dir}: the leaderboard kept no member yet (top/top.json empty)")
    spec = load_spec(run_dir)
    with open(os.path.join(run_dir, ELASTIC_FILE)) as f:
        members = json.load(f)["pods"][0]["members"]
    name = top[0]["name"]
    return load_member(run_dir, name, member_template(spec, members)), load_member_meta(
        run_dir, name
    )


def is_elastic_run(run_dir: str) -> bool:
    """Whether ``run_dir`` holds an elastic run (its ``elastic.json``)."""
    return os.path.exists(os.path.join(run_dir, ELASTIC_FILE))


def evaluate_best(run_dir: str, *, episodes: int = 10, greedy: bool = True) -> dict[str, Any]:
    """``podracer eval RUN_DIR`` of an elastic run: the best member the leaderboard kept
    (:func:`load_best`) played for ``episodes`` fresh episodes with its hyper-parameters; the
    returns' summary, the member, its leaderboard score and record."""
    from podracer.core.evaluation import summarize_returns
    from podracer.runs import load_spec

    state, meta = load_best(run_dir)
    spec = load_spec(run_dir)
    with open(os.path.join(run_dir, ELASTIC_FILE)) as f:
        members = json.load(f)["pods"][0]["members"]
    system = pod_system(spec, 0, members)
    full = system.init(spec.seed)
    copy = [{"member": i, "state": state, "hparams": meta["hparams"]} for i in range(members)]
    full = replace_members(full, copy)
    evaluate = system.evaluator(seed=spec.seed, episodes=episodes, greedy=greedy)
    returns = np.asarray(evaluate(full, int(meta["updates"])))[:1]  # [1, episodes]
    with open(os.path.join(run_dir, TOP_DIR, TOP_FILE)) as f:
        best = json.load(f)[0]
    return {
        **summarize_returns(returns),
        "member": best["name"],
        "leaderboard_score": meta["score"],
        "record": meta["record"],
        "hparams": meta["hparams"],
        "greedy": greedy,
        "run_dir": run_dir,
    }


def save_member(run_dir: str, name: str, state: Any, row: dict[str, Any], score: float) -> None:
    """One member's learner state as an orbax checkpoint under ``top/<name>``."""
    from podracer.runs.checkpoint import Checkpointer

    meta = {"record": row["id"], "pod": row["pod"], "updates": row["updates"], "score": score}
    member = int(name.split("-m")[1].split("-")[0])
    meta["hparams"] = next(m["hparams"] for m in row["members"] if m["member"] == member)
    with Checkpointer(os.path.join(run_dir, TOP_DIR, name), keep=1, keep_best=False) as ckpt:
        ckpt.save(int(row["updates"]), state, meta)


def load_member(run_dir: str, name: str, template: Any):
    """The learner state of the top member ``name``, shaped like ``template`` (raw NumPy)."""
    from podracer.runs.checkpoint import Checkpointer

    with Checkpointer(os.path.join(run_dir, TOP_DIR, name), keep=1, keep_best=False) as ckpt:
        state, _ = ckpt.restore(template)
    return state


def load_member_meta(run_dir: str, name: str) -> dict[str, Any]:
    """The meta (score, hyper-parameters, record) saved with the top member ``name``."""
    from podracer.runs.checkpoint import Checkpointer

    with Checkpointer(os.path.join(run_dir, TOP_DIR, name), keep=1, keep_best=False) as ckpt:
        import orbax.checkpoint as ocp

        step = ckpt.latest_step()
        return dict(
            ckpt._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        )


# --- a pod ---------------------------------------------------------------------------------------


def pod_population(spec, members: int):
    """The :class:`~podracer.population.tournament.PopulationConfig` of one pod of ``members``: the run's,
    with the in-pod tournament off (the leaderboard runs the tournament across pods)."""
    return dataclasses.replace(spec.population, size=members, tournament=False, init=())


def pod_hparams(spec, pod: int, members: int) -> dict[str, np.ndarray]:
    """Pod ``pod``'s members' initial hyper-parameters: members ``pod x m ...`` of the run's
    population (its ``init`` spreads over all ``P``)."""
    from podracer.population import tournament as population

    bounds = population.spaces(spec.agent, spec.population)
    initial = population.initial_hparams(spec.agent_config, spec.population, bounds)
    return {k: v[pod * members : (pod + 1) * members] for k, v in initial.items()}


def pod_system(spec, pod: int, members: int):
    """The Anakin system of pod ``pod``: a population of ``members`` (seeds ``seed + pod x m
    ...``), with ``updates_per_call`` set to the interval when it is 0, so that every segment
    calls one compiled program."""
    from podracer import agents, loops
    from podracer.population import tournament as population

    loop = loops.get(spec.arch)
    pop = pod_population(spec, members)
    arch = loop.with_members(spec.arch_config, members)
    if getattr(arch, "updates_per_call", None) == 0:
        arch = dataclasses.replace(arch, updates_per_call=pop.interval)
    hparams = pod_hparams(spec, pod, members) if spec.population.init else None
    return population.build_system(
        loop,
        spec.env,
        agents.get(spec.agent),
        spec.agent_config,
        arch,
        pop,
        total_timesteps=spec.total_timesteps,
        seed=spec.seed + pod * members,
        hparams=hparams,
        env_options=spec.env_options,
    )


def pod_updates(spec, system) -> int:
    """The updates a pod runs: the run's, rounded down to whole intervals (at least one)."""
    interval = spec.population.interval
    return max(interval, system.recipe.num_updates // interval * interval)


def replace_members(state, replaced: Sequence[dict[str, Any]]):
    """``state`` (an :class:`~podracer.loops.anakin.AnakinState`) with each replaced member's learner
    state and hyper-parameters set from the leaderboard's answer; a replaced member's replay
    keeps its own items with its streams broken (it acts on in its own environments)."""
    import jax

    from podracer.core.learner.buffers import break_streams
    from podracer.runs.checkpoint import from_raw

    if not replaced:
        return state
    learner = state.learner
    parts = {
        "params": learner.params,
        "opt_state": learner.opt_state,
        "agent_state": learner.agent_state,
    }
    host = jax.device_get(parts)
    template = jax.tree.map(lambda x: x[0], parts)
    host = jax.tree.map(np.array, host)  # writable copies
    for r in replaced:
        new = from_raw(r["state"], jax.device_get(template))
        jax.tree.map(lambda dst, src, i=r["member"]: dst.__setitem__(i, src), host, new)
    placed = jax.tree.map(lambda new, old: jax.device_put(new, old.sharding), host, parts)
    mask = np.zeros(np.shape(jax.tree.leaves(state.hparams)[0]), bool)
    hparams = {k: np.array(v) for k, v in jax.device_get(state.hparams).items()}
    for r in replaced:
        mask[r["member"]] = True
        for name, value in r["hparams"].items():
            hparams[name][r["member"]] = value
    hparams = {
        k: jax.device_put(v.astype(state.hparams[k].dtype), state.hparams[k].sharding)
        for k, v in hparams.items()
    }
    learner = learner._replace(
        params=placed["params"],
        opt_state=placed["opt_state"],
        agent_state=placed["agent_state"],
        replay=break_streams(learner.replay, mask),
    )
    return state._replace(learner=learner, hparams=hparams)


def initial_lineage(members: int) -> list[dict[str, Any]]:
    return [
        {"parent": None, "parent_updates": None, "since": 0, "copies": 0} for _ in range(members)
    ]


def copied_lineage(lineage: list[dict[str, Any]], replaced, updates: int) -> list[dict[str, Any]]:
    out = [dict(line) for line in lineage]
    for r in replaced:
        line = out[r["member"]]
        line.update(
            parent=r["parent"],
            parent_updates=r["parent_updates"],
            since=updates,
            copies=line["copies"] + 1,
        )
    return out


class Pod:
    """One pod: a compiled Anakin population of ``members`` that reports to the leaderboard
    every ``interval`` updates and takes the tournament's copies (a Ray actor; a plain class,
    so it also runs in-process).

    Its checkpoint (the whole Anakin state, its lineage and the updates done) is written after
    every acknowledged report, so a restarted pod re-runs at most the segment it was in.
    """

    def __init__(
        self,
        run_dir: str,
        spec_dict: dict[str, Any],
        pod: int,
        members: int,
        leaderboard: Any,
        *,
        join: bool = False,
        cpus: float = 1.0,
        report_timeout_s: float = 120.0,
        checkpoint_s: float = 0.0,
    ):
        from podracer import parallel

        # Before JAX starts: one XLA:CPU device per core Ray gives the pod (the driver's own
        # device count, inherited through the environment, is not the pod's).
        flags = os.environ.get("XLA_FLAGS", "").split()
        flags = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
        os.environ["XLA_FLAGS"] = " ".join(flags)
        if cpus >= 2:
            parallel.use_cpu_cores(int(cpus))
        self.run_dir = run_dir
        self.spec_dict = spec_dict
        self.pod = pod
        self.members = members
        self.leaderboard = leaderboard
        self.join = join
        self.report_timeout_s = report_timeout_s
        self.checkpoint_s = checkpoint_s

    def info(self) -> dict[str, Any]:
        """Where the pod runs: ``{"pod", "node", "pid", "host"}``."""
        node = None
        try:
            import ray

            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except ImportError:
            pass
        return {"pod": self.pod, "node": node, "pid": os.getpid(), "host": socket.gethostname()}

    def _call(self, method: str, *args):
        target = getattr(self.leaderboard, method)
        if hasattr(target, "remote"):
            import ray

            return ray.get(target.remote(*args), timeout=self.report_timeout_s)
        return target(*args)

    def train(self) -> dict[str, Any]:
        """Trains the pod to the run's end (from its checkpoint when it has one); returns
        ``{"pod", "updates", "reports", "replaced", "start_update"}``."""
        import jax

        from podracer.runs import spec_from_dict
        from podracer.runs.checkpoint import Checkpointer

        spec = spec_from_dict(self.spec_dict)
        system = pod_system(spec, self.pod, self.members)
        seed = spec.seed + self.pod * self.members
        interval = spec.population.interval
        total = pod_updates(spec, system)
        spu = system.recipe.steps_per_update
        state = system.init(seed)
        template = member_state(state.learner, 0)
        lineage = initial_lineage(self.members)
        directory = os.path.join(self.run_dir, POD_DIR, f"pod-{self.pod}")
        checkpointer = Checkpointer(directory, keep=1, keep_best=False)
        start = 0
        replaced_total = 0
        try:
            if checkpointer.latest_step() is not None:
                state, meta = checkpointer.restore(state)
                start = int(meta["updates"])
                lineage = meta["lineage"]
            elif self.join:
                seeds = self._call("seed_members", self.pod, self.members, template)
                state = replace_members(state, seeds)
                lineage = copied_lineage(lineage, seeds, 0)
                replaced_total += len(seeds)
            reports = 0
            updates = start
            saved_at = time.monotonic()
            report_s = 0.0  # the leaderboard's round trips: the tournament's cost to a pod
            run_started = time.perf_counter()
            while updates < total:
                end = min(updates + interval, total)
                segment = system._replace(recipe=system.recipe._replace(total_timesteps=end * spu))
                result = segment.run(state, seed=seed, start_update=updates)
                state, updates = result.state, end
                boards = [e for e in result.events if e.get("kind") == "leaderboard"]
                record = boards[-1]
                hparams = [
                    m["hparams"] for m in sorted(record["members"], key=lambda m: m["member"])
                ]
                states = [member_state(state.learner, i) for i in range(self.members)]
                sums = [checksum(s["params"]) for s in states]
                row = pod_row(self.pod, updates, spu, record["scores"], hparams, lineage, sums)
                t0 = time.perf_counter()
                answer = self._call("report", row, states, template)
                report_s += time.perf_counter() - t0
                reports += 1
                state = replace_members(state, answer["replaced"])
                lineage = copied_lineage(lineage, answer["replaced"], updates)
                replaced_total += len(answer["replaced"])
                if updates == total or time.monotonic() - saved_at >= self.checkpoint_s:
                    meta = {"updates": updates, "lineage": lineage, "pod": self.pod}
                    checkpointer.save(updates, state, meta)
                    saved_at = time.monotonic()
            jax.block_until_ready(state)
        finally:
            checkpointer.close()
        return {
            "pod": self.pod,
            "updates": updates,
            "start_update": start,
            "reports": reports,
            "replaced": replaced_total,
            "report_s": report_s / max(reports, 1),
            "round_s": (time.perf_counter() - run_started) / max(reports, 1),
        }


# --- the driver ----------------------------------------------------------------------------------


class PodHandle:
    """The driver's view of one pod."""

    def __init__(self, pod: int, actor: Any, members: int, node: str | None, join: bool):
        self.pod = pod
        self.actor = actor
        self.members = members
        self.node = node
        self.join = join
        self.attempt = 0
        self.future = None  # train()
        self.info_future = None
        self.waiting_since = None  # a restart not yet started
        self.done = False


def connect(config: ElasticConfig, ray) -> float:
    """Starts a local Ray or joins the cluster at ``config.cluster``; returns the seconds it took.
    An address that does not answer within ``connect_timeout_s`` is a one-line error."""
    t0 = time.perf_counter()
    kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if config.cluster == "ray":
        if config.temp_dir is not None:
            kwargs["_temp_dir"] = os.path.abspath(config.temp_dir)
        ray.init(num_cpus=config.num_cpus, **kwargs)
    else:
        host, port = parse_address(config.cluster)
        try:
            socket.create_connection((host, port), timeout=config.connect_timeout_s).close()
        except OSError as error:
            raise ConfigError(
                f"--cluster={config.cluster!r}: no Ray cluster answers there ({error}); start "
                "one with `ray start --head --port PORT` (docs/elastic.md), or give --cluster ray"
            ) from None
        ray.init(address=f"{host}:{port}", **kwargs)
    return time.perf_counter() - t0


def alive_nodes(ray) -> list[str]:
    """The ids of the cluster's alive nodes that have CPUs, in the order Ray lists them."""
    return [
        n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU")
    ]


class Driver:
    """Starts the pods and the leaderboard, watches the pods, restarts or drops failed ones,
    starts a pod on every node that joins (``pods="auto"``), and writes ``pods.jsonl``."""

    def __init__(self, spec, run_dir: str, config: ElasticConfig, ray, *, resume: bool = False):
        self.spec = spec
        self.run_dir = run_dir
        self.config = config
        self.ray = ray
        self.resume = resume
        self.pods: dict[int, PodHandle] = {}
        self.log_path = os.path.join(run_dir, PODS_FILE)
        self.events: list[dict[str, Any]] = []

    def log(self, event: str, pod: PodHandle, **fields: Any) -> None:
        record = {"event": event, "pod": pod.pod, "attempt": pod.attempt, "time": time.time()}
        record.update(fields)
        append_jsonl(self.log_path, record)
        self.events.append(record)
        print(f"podracer elastic: {json.dumps(record)}", file=sys.stderr, flush=True)

    def start_pod(self, pod: int, members: int, node: str | None, join: bool) -> PodHandle:
        options = {
            "num_cpus": self.config.cpus_per_pod,
            "num_gpus": self.config.gpus_per_pod,
            "max_restarts": self.config.max_restarts,
            "max_task_retries": 0,
        }
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        actor = (
            self.ray.remote(Pod)
            .options(**options)
            .remote(
                self.run_dir,
                self.spec.to_dict(),
                pod,
                members,
                self.leaderboard,
                join=join,
                cpus=self.config.cpus_per_pod,
                report_timeout_s=self.config.report_timeout_s,
                checkpoint_s=self.config.pod_checkpoint_s,
            )
        )
        handle = PodHandle(pod, actor, members, node, join)
        self.pods[pod] = handle
        self._submit(handle)
        return handle

    def _submit(self, handle: PodHandle) -> None:
        handle.info_future = handle.actor.info.remote()
        handle.future = handle.actor.train.remote()
        handle.waiting_since = time.monotonic()

    def run(self) -> dict[str, Any]:
        ray = self.ray
        spec, config = self.spec, self.config
        t0 = time.perf_counter()
        self.leaderboard = (
            ray.remote(Leaderboard)
            .options(num_cpus=0, max_restarts=-1, max_task_retries=-1)
            .remote(self.run_dir, spec.to_dict(), config.top_k)
        )
        ray.get(self.leaderboard.summary.remote(), timeout=config.start_timeout_s)
        layout = self._layout()
        for pod in layout["pods"]:
            if pod["pod"] in layout["ended"]:
                continue
            # A resumed run's pods go where Ray finds resources: its nodes may be new ones.
            node = None if self.resume else pod.get("node")
            self.start_pod(pod["pod"], pod["members"], node, pod.get("join", False))
        # Nodes that join from now on get a pod (--pods auto); those here already have one.
        self.seen_nodes = set(alive_nodes(ray)) | {p.get("node") for p in layout["pods"]}
        start_s = time.perf_counter() - t0
        self._watch(layout)
        summary = ray.get(self.leaderboard.summary.remote(), timeout=config.start_timeout_s)
        ends = [e for e in self.events if e["event"] == "end"]
        summary.update(
            pods=len(layout["pods"]),
            pods_finished=sum(e["status"] == "finished" for e in ends),
            pods_dropped=sum(e["status"] == "dropped" for e in ends),
            restarts=sum(e["event"] == "restart" for e in self.events),
            report_s=_mean([e.get("report_s") for e in ends]),
            round_s=_mean([e.get("round_s") for e in ends]),
            population=spec.population.size,
            start_s=start_s,
            run_s=time.perf_counter() - t0,
        )
        return summary

    def _layout(self) -> dict[str, Any]:
        """The pods of the run: ``elastic.json``'s (resumed) or new; ``ended``: the pods that
        ``pods.jsonl`` shows finished or dropped."""
        path = os.path.join(self.run_dir, ELASTIC_FILE)
        if self.resume:
            with open(path) as f:
                layout = json.load(f)
            ended = {
                e["pod"]
                for e in read_jsonl(self.log_path)
                if e["event"] == "end" and e["status"] in ("finished", "dropped")
            }
            return {**layout, "ended": ended}
        size = self.spec.population.size
        if self.config.pods == "auto":
            nodes = alive_nodes(self.ray)
            members = pod_sizes(size, len(nodes))
            pods = [{"pod": i, "members": members, "node": n} for i, n in enumerate(nodes)]
        else:
            members = pod_sizes(size, self.config.pods)
            pods = [{"pod": i, "members": members} for i in range(self.config.pods)]
        layout = {"config": dataclasses.asdict(self.config), "pods": pods}
        _write_json(path, layout)
        return {**layout, "ended": set()}

    def _add_joined(self, layout: dict[str, Any]) -> None:
        for node in alive_nodes(self.ray):
            if node in self.seen_nodes:
                continue
            self.seen_nodes.add(node)
            members = layout["pods"][0]["members"]
            pod = {"pod": len(layout["pods"]), "members": members, "node": node, "join": True}
            layout["pods"].append(pod)
            _write_json(
                os.path.join(self.run_dir, ELASTIC_FILE),
                {k: v for k, v in layout.items() if k != "ended"},
            )
            handle = self.start_pod(pod["pod"], members, node, True)
            self.log("join", handle, node=node)

    def _watch(self, layout: dict[str, Any]) -> None:
        """Until every pod has finished or been dropped: logs starts, collects ends, restarts
        failed pods once Ray has brought their actor back, drops those it cannot, and (auto)
        starts pods on joining nodes. Every wait is bounded (``ray.wait`` with a timeout)."""
        ray = self.ray
        last_poll = 0.0
        while True:
            live = [p for p in self.pods.values() if not p.done]
            if not live:
                return
            for p in live:
                if p.info_future is not None:
                    self._check_started(p)
            futures = {p.future: p for p in live if p.future is not None}
            if futures:
                ready, _ = ray.wait(list(futures), num_returns=1, timeout=0.25)
            else:
                ready = []
                time.sleep(0.25)
            for future in ready:
                p = futures[future]
                try:
                    result = ray.get(future, timeout=5)
                except Exception as error:
                    self._failed(p, error)
                else:
                    p.done = True
                    result.pop("pod", None)
                    self.log("end", p, status="finished", **result)
            now = time.monotonic()
            for p in live:
                limit = self.config.restart_timeout_s if p.attempt else self.config.start_timeout_s
                waiting = p.waiting_since is not None and not p.done
                if waiting and now - p.waiting_since > limit:
                    self._drop(p, f"not started within {limit:g} s")
            if self.config.pods == "auto" and now - last_poll > 1.0:
                last_poll = now
                self._add_joined(layout)

    def _check_started(self, p: PodHandle) -> None:
        """A pod's ``info`` answered: it has started (a restart's ``train`` is sent now). While
        Ray restarts the actor, ``info`` fails as unavailable and is asked again."""
        ray = self.ray
        ready, _ = ray.wait([p.info_future], timeout=0)
        if not ready:
            return
        try:
            info = ray.get(p.info_future, timeout=5)
        except ray.exceptions.ActorDiedError as error:
            p.info_future = None
            if p.future is None:
                self._drop(p, f"its actor cannot be restarted: {_cause(error)}")
            return
        except ray.exceptions.RayActorError:  # restarting: ask again
            time.sleep(0.1)
            p.info_future = p.actor.info.remote()
            return
        p.info_future = None
        p.waiting_since = None
        p.node = p.node or info["node"]
        self.log("start", p, node=info["node"], pid=info["pid"])
        if p.future is None:
            p.future = p.actor.train.remote()

    def _failed(self, p: PodHandle, error: BaseException) -> None:
        ray = self.ray
        p.future = None
        self.log("end", p, status="failed", cause=_cause(error))
        if isinstance(error, ray.exceptions.RayTaskError):
            p.done = True  # an error of the pod's own (a bad config): restarting repeats it
            return
        if isinstance(error, ray.exceptions.ActorUnschedulableError):
            self._drop(p, "its node is gone and it is pinned there")
            return
        if p.attempt >= self.config.max_restarts:
            self._drop(p, f"{p.attempt} restarts done (max_restarts={self.config.max_restarts})")
            return
        p.attempt += 1
        self.log("restart", p, reason="from its last checkpoint")
        p.info_future = p.actor.info.remote()  # train is sent once the actor is back
        p.waiting_since = time.monotonic()

    def _drop(self, p: PodHandle, why: str) -> None:
        p.done = True
        with contextlib.suppress(Exception):
            self.ray.kill(p.actor, no_restart=True)
        self.log("end", p, status="dropped", cause=why)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _cause(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    gist = next((line for line in text if line.strip()), "")
    return f"{type(error).__name__}: {gist[:300]}"


def train(
    spec,
    run_dir: str,
    config: ElasticConfig,
    *,
    resume: bool = False,
) -> dict[str, Any]:
    """An elastic tournament of ``spec`` (a RunSpec with a population) in ``run_dir``; returns
    the summary (the final JSON line: the scores over every member's latest report)."""
    from podracer import loops, runs

    ray = import_ray()
    if spec.population is None:
        raise ConfigError("--pods and --cluster need --population P (the members the pods share)")
    if not loops.get(spec.arch).runs_in_pods:
        allowed = ", ".join(name for name in loops.names() if loops.get(name).runs_in_pods)
        raise ConfigError(
            f"--pods is not allowed with --arch {spec.arch}: pods run the loops {allowed}"
        )
    if config.pods != "auto":
        pod_sizes(spec.population.size, config.pods)
    if not resume:
        runs.check_run_dir(run_dir, resume=False)
        os.makedirs(run_dir, exist_ok=True)
        runs.save_spec(run_dir, spec)
    started = time.perf_counter()
    ray_s = connect(config, ray)
    try:
        driver = Driver(spec, run_dir, config, ray, resume=resume)
        summary = driver.run()
    finally:
        ray.shutdown()
    summary.update(
        agent=spec.agent,
        env=spec.env,
        arch="elastic",
        run_dir=run_dir,
        ray_start_s=ray_s,
        wall_s=time.perf_counter() - started,
    )
    return summary


# --- the command line ----------------------------------------------------------------------------


def wanted(argv: Sequence[str]) -> bool:
    """Whether ``podracer train ARGV`` is an elastic run: ``--pods`` or ``--cluster`` given, or
    ``--resume DIR`` of a directory that holds ``elastic.json``."""
    flags = {a.split("=")[0] for a in argv}
    if flags & {"--pods", "--cluster"}:
        return True
    resume = _value(list(argv), "--resume")
    return resume is not None and os.path.exists(os.path.join(resume, ELASTIC_FILE))


def _value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _without(argv: list[str], flags: Sequence[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if any(a.startswith(f + "=") for f in flags):
            continue
        out.append(a)
    return out


def _elastic_fields(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``--elastic.FIELD VALUE`` (or ``=VALUE``) flags as ElasticConfig fields, and the rest."""
    types = {f.name: f.type for f in dataclasses.fields(ElasticConfig)}
    fields, rest, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--elastic."):
            rest.append(a)
            i += 1
            continue
        name, eq, value = a[len("--elastic.") :].partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        i += 1
        name = name.replace("-", "_")
        if name not in types or name in ("pods", "cluster"):
            allowed = ", ".join(n for n in types if n not in ("pods", "cluster"))
            raise ConfigError(f"--elastic.{name} is not allowed: the fields are {allowed}")
        kind = str if "str" in str(types[name]) else int if "int" in str(types[name]) else float
        try:
            fields[name] = kind(value)
        except ValueError:
            raise ConfigError(
                f"--elastic.{name}={value!r} is not allowed: give a number ({kind.__name__})"
            ) from None
    return fields, rest


def _pods_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"--pods={text!r} is not allowed: give a number of pods >= 1, or auto"
        ) from None


def train_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``podracer train ... --population P --pods N|auto --cluster ray|HOST:PORT`` and
    ``podracer train --resume RUN_DIR`` of an elastic run; prints the final JSON line."""
    from podracer import runs
    from podracer.cli import main as cli

    argv = list(argv)
    fields, argv = _elastic_fields(argv)
    pods = _value(argv, "--pods")
    cluster = _value(argv, "--cluster")
    resume = _value(argv, "--resume")
    if cli._dry_run(argv)[0] and resume is None:  # checked and planned; nothing started
        config = ElasticConfig(
            pods=2 if pods is None else pods if pods == "auto" else _pods_int(pods),
            cluster=cluster or "ray",
            **fields,
        )
        import_ray()
        rest = _without(argv, ("--pods", "--cluster"))
        spec, _ = cli.run_spec(cli._dry_run(rest)[1])
        if spec.population is None:
            raise ConfigError("--pods and --cluster need --population P (the members of the pods)")
        if config.pods != "auto":
            pod_sizes(spec.population.size, config.pods)
        return cli.train_dry_run(rest)
    if resume is not None:
        with open(os.path.join(resume, ELASTIC_FILE)) as f:
            saved = json.load(f)["config"]
        if pods is not None or cluster is not None:
            saved.update({k: v for k, v in (("pods", pods), ("cluster", cluster)) if v})
        if isinstance(saved.get("pods"), str) and saved["pods"].isdigit():
            saved["pods"] = int(saved["pods"])
        config = ElasticConfig(**{**saved, **fields})
        spec = runs.load_spec(resume)
        total = _value(argv, "--total-timesteps")
        if total is not None:
            spec = dataclasses.replace(spec, total_timesteps=int(total))
        summary = train(spec, resume, config, resume=True)
    else:
        if pods is None:
            pods = "2"
        pods_value = pods if pods == "auto" else _pods_int(pods)
        config = ElasticConfig(pods=pods_value, cluster=cluster or "ray", **fields)
        import_ray()
        spec, selectors = cli.run_spec(_without(argv, ("--pods", "--cluster")))
        if spec.population is None:
            raise ConfigError("--pods and --cluster need --population P (the members of the pods)")
        if config.pods != "auto":
            pod_sizes(spec.population.size, config.pods)
        run_dir = selectors.run_dir or runs.default_run_dir(spec, kind="elastic")
        summary = train(spec, run_dir, config)
    print(json.dumps(summary), flush=True)
    return summary
