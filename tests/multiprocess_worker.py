"""``podracer train`` for the multi-process tests, saving the final params.

    python tests/multiprocess_worker.py OUT_DIR train ARGS...

Runs the real command line (``podracer.cli.main.main``), flags included, and writes this process's
final params to ``OUT_DIR/params_<process index>.npz`` (leaves in tree order), so a test can
compare them across processes and with a single-process run; the run directory is
``OUT_DIR/run``. Not a test module.
"""

from __future__ import annotations

import pathlib
import sys

import jax
import numpy as np

import podracer.loops.sebulba
from podracer.cli import main as cli
from podracer.loops import anakin


def main() -> int:
    out_dir, argv = pathlib.Path(sys.argv[1]), sys.argv[2:]
    if "--run-dir" not in argv and "--resume" not in argv:  # one run directory per launch
        argv = [*argv, "--run-dir", str(out_dir / "run")]
    results = []

    def capturing(train):
        def wrapped(*args, **kwargs):
            results.append(train(*args, **kwargs))
            return results[-1]

        return wrapped

    anakin.Anakin.run = capturing(anakin.Anakin.run)
    podracer.loops.sebulba.SebulbaSystem.run = capturing(podracer.loops.sebulba.SebulbaSystem.run)
    status = cli.main(argv)
    if status == 0:
        result = results[0]
        leaves = [np.asarray(x) for x in jax.tree.leaves(result.params)]
        out_dir.mkdir(parents=True, exist_ok=True)
        np.savez(out_dir / f"params_{jax.process_index()}.npz", *leaves)
    return status


if __name__ == "__main__":
    sys.exit(main())
