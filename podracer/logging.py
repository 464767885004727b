"""Console progress (host side). Progress goes to stderr; stdout keeps the final JSON line."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console


class ConsoleProgress:
    """Prints one progress line at most every ``interval_s`` seconds (and always the last)."""

    def __init__(self, total_steps: int, interval_s: float = 1.0, console: Console | None = None):
        self.total_steps = total_steps
        self.interval_s = interval_s
        self.console = console or Console(stderr=True, highlight=False)
        self._last = -float("inf")

    def __call__(self, record: dict[str, Any]) -> None:
        now = time.monotonic()
        final = record.get("fraction", 0.0) >= 1.0 or record["steps"] >= self.total_steps
        if not final and now - self._last < self.interval_s:
            return
        self._last = now
        ret = record.get("episode_return")
        ret_text = "   n/a" if ret is None else f"{ret:8.2f}"
        pct = 100.0 * record.get("fraction", record["steps"] / max(self.total_steps, 1))
        self.console.print(
            f"[bold]steps[/] {record['steps']:>11,} ({pct:5.1f}%)  "
            f"[bold]sps[/] {record['sps']:>11,.0f}  [bold]return[/] {ret_text}  "
            f"[bold]loss[/] {record.get('loss', float('nan')):.4f}"
        )
