"""Logging at the edges: one :class:`Logger` with pluggable backends.

Records are flat dicts of numbers (and per-member lists). Two kinds go through a logger:

- ``{"kind": "train", "step", "updates", "elapsed_s", "sps", "episode_return", "episode_returns",
  <learner metrics>...}`` after every call of the compiled step (Anakin) or every update (Sebulba);
- ``{"kind": "eval", "step", "eval_return", "eval_return_std", "eval_returns", "episodes"}`` after
  every periodic evaluation;
- ``{"kind": "leaderboard", "step", "updates", "best_member", "best_score", "median_score",
  "scores", "members": [...], "replaced": [...]}`` after every evaluation of a population
  (:func:`podracer.population.ensemble.leaderboard_record`); written to ``leaderboard.jsonl``,
  not to ``metrics.jsonl``.

``step`` counts environment steps of one member (seed); ``episode_return`` is the mean over
members, ``episode_returns`` the per-member values (``None`` where a member finished no episode).
Backends: the console (a live rich progress bar on a terminal, plain lines elsewhere), JSONL
(``metrics.jsonl``), TensorBoard (tensorboardX) and Weights & Biases (optional, offline unless
asked). Only process 0 of a multi-process run writes
(:func:`podracer.parallel.is_main_process`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from rich.console import Console

from podracer.parallel import is_main_process
from podracer.runs import rundir
from podracer.util.imports import import_extra


class Backend(Protocol):
    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's finite scalar numbers (lists, strings and None left out)."""
    out = {}
    for name, value in record.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[name] = float(value)
    return out


class ConsoleProgress:
    """Training progress on stderr (stdout keeps the final JSON line).

    On a terminal: a live rich progress bar with steps, SPS, episode return and ETA. Elsewhere (a
    pipe, a CI log): one plain line at most every ``interval_s`` seconds, and always the last.
    Evaluation records print one line each.
    """

    def __init__(
        self,
        total_steps: int,
        interval_s: float = 1.0,
        console: Console | None = None,
        live: bool | None = None,
    ):
        self.total_steps = total_steps
        self.interval_s = interval_s
        self.console = console or Console(stderr=True, highlight=False)
        self.live = self.console.is_terminal if live is None else live
        self._last = -float("inf")
        self._bar = None
        self._task = None

    def __call__(self, record: dict[str, Any]) -> None:
        self.write(record)

    def write(self, record: dict[str, Any]) -> None:
        if record.get("kind") == "leaderboard":
            self.console.print(leaderboard_line(record))
            return
        if record.get("kind") == "eval":
            self.console.print(
                f"[bold]eval[/] steps {record['step']:>11,}  return "
                f"{record['eval_return']:8.2f} ± {record.get('eval_return_std', 0.0):.2f} "
                f"({record.get('episodes', '?')} episodes)"
            )
            return
        steps = record.get("step", record.get("steps", 0))
        fraction = record.get("fraction", steps / max(self.total_steps, 1))
        ret = record.get("episode_return")
        ret_text = "   n/a" if ret is None else f"{ret:8.2f}"
        if self.live:
            self._update_bar(steps, record["sps"], ret_text)
            return
        now = time.monotonic()
        if fraction < 1.0 and now - self._last < self.interval_s:
            return
        self._last = now
        self.console.print(
            f"[bold]steps[/] {steps:>11,} ({100.0 * fraction:5.1f}%)  "
            f"[bold]sps[/] {record['sps']:>11,.0f}  [bold]return[/] {ret_text}  "
            f"[bold]loss[/] {record.get('loss', float('nan')):.4f}"
        )

    def _update_bar(self, steps: int, sps: float, ret_text: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        if self._bar is None:
            self._bar = Progress(
                TextColumn("[bold]steps"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("sps {task.fields[sps]:>10,.0f}  return {task.fields[ret]}"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._bar.add_task("train", total=self.total_steps, sps=0.0, ret="n/a")
            self._bar.start()
        self._bar.update(self._task, completed=steps, sps=sps, ret=ret_text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def leaderboard_line(record: dict[str, Any], top: int = 3) -> str:
    """One console line of a leaderboard: the best members with their hyper-parameters, age and
    lineage, the median score and the tournament's replacements (``member<-parent``).

    A member reads ``#5 412.00 (lr 0.00125, ent_coef 0.008; age 20 <-#2@40)``: member 5 scored
    412, has trained 20 updates since it became a copy of member 2 at update 40; a member never
    copied shows its age only (``age 60``).
    """

    def score(value):
        return "n/a" if value is None else f"{value:.2f}"

    def hparams(values):
        return ", ".join(f"{k} {v:.3g}" for k, v in values.items())

    def lineage(m):
        age = f"age {m['age']}"
        if not m.get("copies"):
            return age
        return f"{age} <-#{m['parent']}@{m['since']}"

    def about(m):
        return "; ".join(part for part in (hparams(m["hparams"]), lineage(m)) if part)

    best = "  ".join(
        f"#{m['member']} {score(m['score'])} ({about(m)})" for m in record["members"][:top]
    )
    replaced = " ".join(f"{r['member']}<-{r['parent']}" for r in record["replaced"]) or "none"
    return (
        f"[bold]leaderboard[/] steps {record.get('step', 0):>11,}  best {best}  median "
        f"{score(record['median_score'])}  replaced {replaced}"
    )


class JsonlWriter:
    """One JSON object per line, flushed after every record (a run killed loses nothing).

    ``kinds``: the record kinds written (default: all). The file is opened at the first record
    written, so a run with no such record leaves no empty file.
    """

    def __init__(self, path: str, kinds: Sequence[str] | None = None):
        self.path = path
        self.kinds = None if kinds is None else frozenset(kinds)
        self._file = None

    def write(self, record: dict[str, Any]) -> None:
        if self.kinds is not None and record.get("kind", "train") not in self.kinds:
            return
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (see close())
        record = _finite_or_null(record)
        self._file.write(json.dumps(record, allow_nan=False, default=_json_default) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _finite_or_null(value):
    """``value`` with every NaN or infinite float (a diverged run's loss) as None: JSON has no
    NaN, and ``null`` keeps the file readable by every JSON parser."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    if isinstance(value, np.ndarray):
        return _finite_or_null(value.tolist())
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return None
    return value


def _json_default(value):
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


class TensorBoardWriter:
    """Every scalar of a record as ``<kind>/<name>`` at the record's ``step``."""

    def __init__(self, logdir: str):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir)

    def write(self, record: dict[str, Any]) -> None:
        kind = record.get("kind", "train")
        step = int(record.get("step", 0))
        for name, value in _scalars(record).items():
            if name != "step":
                self._writer.add_scalar(f"{kind}/{name}", value, step)

    def video(self, record: dict[str, Any]) -> None:
        """The video's preview (an animated GIF's bytes) in TensorBoard's image panel
        (``video/eval``)."""
        from tensorboardX.proto.summary_pb2 import Summary

        image = Summary.Image(
            height=record["preview_height"],
            width=record["preview_width"],
            colorspace=3,
            encoded_image_string=record["preview"],
        )
        summary = Summary(value=[Summary.Value(tag="video/eval", image=image)])
        self._writer._get_file_writer().add_summary(summary, int(record["step"]))

    def close(self) -> None:
        self._writer.close()


class WandbWriter:
    """Weights & Biases (``pip install podracer[wandb]``); offline unless ``online``."""

    def __init__(self, run_dir: str, config: dict[str, Any], online: bool = False, **kwargs):
        wandb = import_extra("wandb", "wandb", "--wandb (the Weights & Biases logger)")
        self._run = wandb.init(
            dir=run_dir, config=config, mode="online" if online else "offline", **kwargs
        )

    def write(self, record: dict[str, Any]) -> None:
        kind = record.get("kind", "train")
        scalars = {f"{kind}/{k}": v for k, v in _scalars(record).items() if k != "step"}
        self._run.log(scalars, step=int(record.get("step", 0)))

    def video(self, record: dict[str, Any]) -> None:
        """The video file as a ``wandb.Video`` (``video/eval``), at the run's current step:
        it is written after the training steps that followed it were logged."""
        import wandb

        self._run.log({"video/eval": wandb.Video(record["path"], format="mp4")}, step=None)

    def close(self) -> None:
        self._run.finish()


class Logger:
    """Sends every record to every backend; only process 0 writes anything.

    A logger is also the ``progress`` callable the loops take: ``logger(record)``.
    """

    def __init__(self, backends: Sequence[Backend]):
        self.backends = list(backends) if is_main_process() else []

    def __call__(self, record: dict[str, Any]) -> None:
        self.log(record)

    def log(self, record: dict[str, Any]) -> None:
        record = {"kind": "train", **record}
        for backend in self.backends:
            backend.write(record)

    def video(self, record: dict[str, Any]) -> None:
        """A video (``path`` of its file, ``preview`` the bytes of its preview GIF of
        ``preview_height x preview_width``, ``step``) to every backend that shows videos
        (TensorBoard, wandb); called from the thread that reads the video process."""
        for backend in self.backends:
            if hasattr(backend, "video"):
                backend.video(record)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_logger(
    run_dir: str | None,
    total_steps: int,
    *,
    console: bool = True,
    tensorboard: bool = True,
    wandb: bool = False,
    wandb_online: bool = False,
    config: dict[str, Any] | None = None,
) -> Logger:
    """The standard logger: console progress, and with a run directory ``metrics.jsonl`` and
    TensorBoard events (``tb/``) in it, plus wandb when asked."""
    backends: list[Backend] = []
    if console:
        backends.append(ConsoleProgress(total_steps))
    if run_dir is not None and is_main_process():
        os.makedirs(run_dir, exist_ok=True)
        metrics, board = (
            os.path.join(run_dir, f) for f in (rundir.METRICS_FILE, rundir.LEADERBOARD_FILE)
        )
        backends.append(JsonlWriter(metrics, ("train", "eval")))
        backends.append(JsonlWriter(board, ("leaderboard",)))
        if tensorboard:
            backends.append(TensorBoardWriter(os.path.join(run_dir, rundir.TENSORBOARD_DIR)))
        if wandb or wandb_online:  # online implies wandb
            backends.append(WandbWriter(run_dir, config or {}, online=wandb_online))
    return Logger(backends)
