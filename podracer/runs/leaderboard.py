"""A run's JSON-lines records, read and appended safely, and an elastic run's leaderboard rows
as a population's records (what :func:`podracer.runs.plotting.plot_population` draws).

An elastic run (:mod:`podracer.experiments.elastic`) writes one ``"leaderboard"`` row per pod
report to ``leaderboard.jsonl`` (:data:`podracer.runs.rundir.LEADERBOARD_FILE`): the pod's
members, each named by ``(pod, member)``, and its copies. :func:`population_records` turns them
into rows over the whole population, as a one-program population writes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The records of a JSONL file (none when there is no file); a line that is not JSON (the
    last one cut short: a process killed as it wrote) is skipped."""
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


def population_records(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of an elastic run as a population's leaderboard records over all its members
    (for :func:`podracer.runs.plotting.plot_population`): after each row, every member's latest
    score (None before its first report) and hyper-parameters, members numbered in (pod, member)
    order, copies as ``replaced`` with global ids, ``step`` the furthest so far."""
    ids = sorted({(r["pod"], m["member"]) for r in rows for m in r["members"]})
    index = {i: k for k, i in enumerate(ids)}
    first: dict[tuple[int, int], dict[str, Any]] = {}
    for row in rows:
        for m in row["members"]:
            first.setdefault((row["pod"], m["member"]), m)
    latest: dict[tuple[int, int], dict[str, Any]] = {}
    out, step = [], 0
    for row in rows:
        for m in row["members"]:
            latest[(row["pod"], m["member"])] = m
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
            parent = (r["parent"]["pod"], r["parent"]["member"])
            if parent in index:
                replaced.append(
                    {
                        "member": index[(row["pod"], r["member"])],
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
