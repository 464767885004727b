"""The leaderboard of an elastic run: its pure logic (rows, the tournament's verdict over all
pods, the top K) and :class:`Leaderboard`, the Ray actor (a plain class, so it is tested without
Ray) that records every pod report before it answers, and keeps the top K members' learner
state as orbax checkpoints under ``top/``."""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from podracer.experiments.elastic.config import TOP_DIR, TOP_FILE, write_json
from podracer.population.ensemble import score_summary
from podracer.runs.leaderboard import append_jsonl, read_jsonl
from podracer.runs.rundir import LEADERBOARD_FILE
from podracer.util.stats import nan_as_lowest


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

    The fields of :func:`podracer.population.ensemble.leaderboard_record` (``members`` best first,
    with ``member``, ``score``, ``rank`` in the pod, ``hparams``, ``age``, ``since``,
    ``copies``), plus ``pod`` and ``id``; a member's ``parent`` names a pod and a member
    (``None`` when it was never copied) and ``parent_updates`` the parent's updates at the copy.
    """
    values = np.asarray([np.nan if s is None else s for s in scores], np.float64)
    order = sorted(range(len(values)), key=lambda i: (-nan_as_lowest(values[i]), i))
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
    return {
        "kind": "leaderboard",
        "id": record_id(pod, updates),
        "pod": pod,
        "updates": updates,
        "step": updates * steps_per_update,
        "tournament": True,
        **score_summary(values, order[0]),
        "members": members,
        "replaced": [],
    }


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
    scores = np.asarray([nan_as_lowest(board[i].score) for i in ids])
    ties = rng.uniform(size=len(ids))
    order = np.lexsort((ties, scores))  # ascending
    losers = [ids[i] for i in order[:n]]
    top = [ids[i] for i in order[::-1] if eligible(ids[i])][:n]
    out = {}
    for loser in losers:
        if loser.pod != pod or not top:
            continue
        parent = top[int(rng.integers(len(top)))]
        if parent != loser and nan_as_lowest(board[parent].score) > nan_as_lowest(
            board[loser].score
        ):
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
    best = ids[int(np.argmax([nan_as_lowest(s) for s in scores]))] if ids else None
    return {
        "final_scores": [None if not np.isfinite(s) else float(s) for s in scores],
        "final_members": [i.name() for i in ids],
        "final_best_score": float(finite.max()) if finite.size else None,
        "final_median_score": float(np.median(finite)) if finite.size else None,
        "final_best_member": None if best is None else best.name(),
    }


class Leaderboard:
    """Records every pod report before acknowledging it, keeps the top K members' learner state
    on disk, and answers each report with the tournament's verdict for its pod.

    Its state is rebuilt from the run directory when it starts (a driver resumed with
    ``--resume``, or the actor restarted): ``leaderboard.jsonl`` gives the board and the ids
    already acknowledged; the top K checkpoints give parents until the pods report again.
    """

    def __init__(self, run_dir: str, spec_dict: dict[str, Any], top_k: int):
        from podracer import population
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
        hyper-parameters perturbed (:func:`podracer.population.ensemble.perturb`)."""
        import jax
        import jax.numpy as jnp

        from podracer.population.ensemble import perturb

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
        write_json(
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
        ids = sorted(self.board, key=lambda i: (-nan_as_lowest(self.board[i].score), i))
        n = max(1, math.floor(self.config.fraction * len(ids) + 1e-9))
        top = [i for i in ids if self._state_of(i, template) is not None][:n]
        if not top:
            return []
        verdict = {m: top[int(rng.integers(len(top)))] for m in range(count)}
        return self._copies(verdict, rng)


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
