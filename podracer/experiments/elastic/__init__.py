"""The elastic tournament: populations in pods on Ray, crossing pods only through a leaderboard.

A run of ``P`` members in ``N`` pods (``podracer train ... --population P --pods N --cluster ray``)
is ``N`` Ray actors, each one compiled Anakin population of ``m = P / N`` members
(:func:`podracer.population.ensemble.build_system` with the in-pod tournament off), and one
leaderboard actor. A pod trains ``interval`` updates, scores its members (the population's own
evaluation, inside the compiled step), and reports to the leaderboard; no pod waits for another. The
leaderboard writes the report to ``leaderboard.jsonl`` (and the params of any member that enters the
top ``K`` to an orbax checkpoint) *before* it answers, then answers with the tournament's verdict
for that pod: every member of the pod that is among the ``n = floor(fraction x M)`` lowest of the
latest scores of all ``M`` members known (any pod) takes a copy of the learner state (params,
optimizer state, agent state) of a parent drawn uniformly from the ``n`` highest (any pod, whose
state the leaderboard holds), and the parent's hyper-parameters perturbed as in
:func:`podracer.population.ensemble.perturb`. This is
:func:`podracer.population.ensemble.select_parents`'s truncation selection over the whole
population, on scores that are at most one round old.

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

The modules: :mod:`~podracer.experiments.elastic.config` (:class:`ElasticConfig`, the file
names), :mod:`~podracer.experiments.elastic.leaderboard`, :mod:`~podracer.experiments.elastic.pod`
and :mod:`~podracer.experiments.elastic.driver` (:func:`train`); this package is their public
face. The command line's flags (``--pods``, ``--cluster``, ``--elastic.FIELD``) are read by
:mod:`podracer.cli.parse`.
"""

from __future__ import annotations

from podracer.experiments.elastic.config import (
    ELASTIC_FILE,
    POD_DIR,
    PODS_FILE,
    RAY_EXTRA,
    TOP_DIR,
    TOP_FILE,
    ElasticConfig,
    import_ray,
    is_elastic_run,
    parse_address,
    pod_sizes,
    write_json,
)
from podracer.experiments.elastic.driver import (
    Driver,
    PodHandle,
    alive_nodes,
    connect,
    train,
)
from podracer.experiments.elastic.leaderboard import (
    Entry,
    Leaderboard,
    MemberId,
    choose_replacements,
    entries_of,
    final_scores,
    load_member,
    load_member_meta,
    pod_row,
    record_id,
    save_member,
    top_members,
    top_name,
)
from podracer.experiments.elastic.pod import (
    Pod,
    copied_lineage,
    evaluate_best,
    initial_lineage,
    load_best,
    member_state,
    member_template,
    pod_hparams,
    pod_population,
    pod_system,
    pod_updates,
    replace_members,
)
from podracer.runs.leaderboard import append_jsonl, population_records, read_jsonl
from podracer.runs.rundir import LEADERBOARD_FILE

__all__ = [
    "ELASTIC_FILE",
    "LEADERBOARD_FILE",
    "PODS_FILE",
    "POD_DIR",
    "RAY_EXTRA",
    "TOP_DIR",
    "TOP_FILE",
    "Driver",
    "ElasticConfig",
    "Entry",
    "Leaderboard",
    "MemberId",
    "Pod",
    "PodHandle",
    "alive_nodes",
    "append_jsonl",
    "choose_replacements",
    "connect",
    "copied_lineage",
    "entries_of",
    "evaluate_best",
    "final_scores",
    "import_ray",
    "initial_lineage",
    "is_elastic_run",
    "load_best",
    "load_member",
    "load_member_meta",
    "member_state",
    "member_template",
    "parse_address",
    "pod_hparams",
    "pod_population",
    "pod_row",
    "pod_sizes",
    "pod_system",
    "pod_updates",
    "population_records",
    "read_jsonl",
    "record_id",
    "replace_members",
    "save_member",
    "top_members",
    "top_name",
    "train",
    "write_json",
]
