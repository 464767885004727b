"""The process that writes ``--video-interval``'s videos: ``python -m
podracer.runs.video_worker RUN_DIR``, started by :class:`podracer.runs.video.VideoRecorder` at
the lowest priority before anything is imported (:data:`podracer.runs.video.BOOT`).

It builds the run's system from ``RUN_DIR/config.json`` on the CPU, then reads one update count
a line from stdin: the actor params of that update are ``videos/.jobs/update<U>.npz`` (arrays
in the order of the params' leaves, loaded without pickle). For each it records one greedy
episode (the run's own recorder, compiled once), writes ``videos/update<U>.mp4`` and its
preview, and answers one JSON line on stdout (:func:`podracer.runs.video.write_episode`'s
record, with ``updates``), or one line ``{"error": ...}`` and stops. It ends when stdin closes,
after the videos it was given.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
import numpy as np

from podracer.core.evaluation import eval_key
from podracer.runs import rundir
from podracer.runs.spec import load_spec
from podracer.runs.training import build_system
from podracer.runs.video import DUTY, JOBS_DIR, TRAINED, record, write_episode


class Pace:
    """Sleeps, after each piece of work, so that the process works :data:`DUTY` of its time
    while the run trains (until the file ``trained`` exists)."""

    def __init__(self, trained: str):
        self.trained = trained
        self.start()

    def start(self) -> None:
        self.since = time.perf_counter()

    def __call__(self) -> None:
        busy = time.perf_counter() - self.since
        if not os.path.exists(self.trained):
            time.sleep(busy * (1 / DUTY - 1))
        self.start()


def main(argv: list[str]) -> int:
    (run_dir,) = argv
    jobs = os.path.join(run_dir, rundir.VIDEO_DIR, JOBS_DIR)
    pace = Pace(os.path.join(jobs, TRAINED))
    try:
        spec = load_spec(run_dir)
        system = build_system(spec)
        agent, template = system.policy(system.init(spec.seed), 0)
        treedef = jax.tree.structure(template)
        recorders: dict = {}
        pace()  # the start (the libraries, the system) was work too
        for line in sys.stdin:
            updates = int(line)
            job = os.path.join(jobs, f"update{updates}.npz")
            with np.load(job, allow_pickle=False) as data:
                leaves = [data[f"arr_{i}"] for i in range(treedef.num_leaves)]
            os.remove(job)
            actor_params = jax.tree.unflatten(treedef, leaves)
            key = eval_key(spec.seed, updates)
            pace.start()
            episode = record(system, spec, agent, actor_params, key, recorders=recorders)
            path = os.path.join(run_dir, rundir.VIDEO_DIR, f"update{updates}.mp4")
            written = write_episode(path, episode, pace=pace)
            print(json.dumps({**written, "updates": updates}), flush=True)
    except Exception as error:  # one line for the training process, the traceback in the log
        import traceback

        traceback.print_exc()
        message = str(error).splitlines()[0] if str(error) else ""
        print(json.dumps({"error": f"{type(error).__name__}: {message}"}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
