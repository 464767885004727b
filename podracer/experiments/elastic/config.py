"""An elastic run's configuration (:class:`ElasticConfig`: pods, cluster, restarts, timeouts),
the names of the files it writes in its run directory, and the checks that need no Ray."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from podracer.errors import ConfigError

RAY_EXTRA = 'the ray extra: pip install "podracer[ray]" (pip install -e ".[ray]" in a checkout)'


ELASTIC_FILE = "elastic.json"


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


def write_json(path: str, data: Any) -> None:
    """Writes ``data`` to ``path`` as JSON at once: a reader sees the old file or the new one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def is_elastic_run(run_dir: str) -> bool:
    """Whether ``run_dir`` holds an elastic run (its ``elastic.json``)."""
    return os.path.exists(os.path.join(run_dir, ELASTIC_FILE))
