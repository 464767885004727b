"""Every built-in agent's defaults, on each loop, with and without memory, through
``podracer train ... --dry-run`` on as many virtual CPU devices as the first argument says.

    python tests/defaults_worker.py DEVICES

Prints one JSON line per command: ``{"agent", "loop", "memory", "code", "error", "plan"}``
(``code`` is ``cli.main``'s exit status, ``error`` the last line it wrote on stderr, ``plan``
the dry run's record). Not a test module: the device count must be set before JAX is imported.
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={int(sys.argv[1])}"
os.environ["JAX_PLATFORMS"] = "cpu"

import contextlib
import dataclasses
import io
import json
import tempfile

from podracer import agents, loops
from podracer.cli import main as cli


def main() -> int:
    os.chdir(tempfile.mkdtemp(prefix="podracer-defaults-"))  # where a run directory would go
    for name, spec in agents.AGENTS.items():
        fields = {field.name for field in dataclasses.fields(spec.config_cls)}
        for loop in loops.names():
            for memory in ("none", "gru") if "memory" in fields else ("none",):
                argv = ["train", "--arch", loop, "--agent", name, "--dry-run"]
                argv += ["--agent.memory", memory] if memory != "none" else []
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli.main(argv)
                lines = out.getvalue().strip().splitlines()
                record = {
                    "agent": name,
                    "loop": loop,
                    "memory": memory,
                    "code": code,
                    "error": (err.getvalue().strip().splitlines() or [""])[-1],
                    "plan": json.loads(lines[-1]) if code == 0 and lines else None,
                }
                print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
