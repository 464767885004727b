"""The benchmarks' output: one JSON line per configuration on stdout, appended to ``--out``.

No JAX import here: scripts that set ``XLA_FLAGS`` before JAX starts import it freely.
"""

from __future__ import annotations

import json
from typing import Any


def emit(record: dict[str, Any], out: str | None = None) -> str:
    """Prints ``record`` as one JSON line (flushed at once, so a stopped run keeps what it
    measured) and, with ``out``, appends the line to that file. Returns the line."""
    line = json.dumps(record)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")
    return line
