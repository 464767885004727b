"""The driver of an elastic run (:func:`train`): Ray started or joined, the leaderboard and the
pods started as Ray actors, the pods watched, restarted from their checkpoints or dropped, a pod
started on every node that joins (``--pods auto``), every event written to ``pods.jsonl``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from typing import Any

import numpy as np

from podracer.errors import ConfigError
from podracer.experiments.elastic.config import (
    ELASTIC_FILE,
    PODS_FILE,
    ElasticConfig,
    import_ray,
    parse_address,
    pod_sizes,
    write_json,
)
from podracer.experiments.elastic.leaderboard import Leaderboard
from podracer.experiments.elastic.pod import Pod
from podracer.runs.leaderboard import append_jsonl, read_jsonl


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
        write_json(path, layout)
        return {**layout, "ended": set()}

    def _add_joined(self, layout: dict[str, Any]) -> None:
        for node in alive_nodes(self.ray):
            if node in self.seen_nodes:
                continue
            self.seen_nodes.add(node)
            members = layout["pods"][0]["members"]
            pod = {"pod": len(layout["pods"]), "members": members, "node": node, "join": True}
            layout["pods"].append(pod)
            write_json(
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
