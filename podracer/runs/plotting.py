"""Learning curves over seeds and members, and benchmark plots (host side, matplotlib Agg).

``podracer plot RUN_DIR... --out curves.png`` draws the mean over every member of the runs with a
shaded 95% bootstrap confidence interval (:mod:`podracer.util.stats`); a sweep's run directory
(``results.json``) is drawn as one curve per sweep point, over its seeds; ``--members`` draws one
line per member of one run; ``--benchmark`` plots the JSON lines of ``benchmarks/*.py``.

The run directory format
------------------------
A run directory holds ``metrics.jsonl``: one JSON object per line, appended as the run goes, so
a run that is killed leaves at most its last line truncated (it is skipped). Each record has a
``kind``; the library writes two kinds:

- training records, one per logging interval::

    {"kind": "train",
     "step": int,                  # environment steps *per member* so far (the x axis)
     "updates": int,               # learner updates so far
     "elapsed_s": float,           # wall-clock seconds since the run started
     "sps": float,                 # environment steps per second, all members together
     "episode_return": float|null, # mean over members of the episodes ended in the interval
     "episode_returns": [float|null, ...],  # the same per member (seed), null: none ended
     "loss": float, "entropy": float, ...}  # the learner's loss metrics, mean over members

- evaluation records, one per evaluation::

    {"kind": "eval",
     "step": int,                  # environment steps per member at the evaluation
     "eval_return": float,         # mean over members of the evaluation episodes' returns
     "eval_returns": [float, ...], # per member
     "eval_return_std": float,     # standard deviation over all evaluation episodes
     "episodes": int}              # evaluation episodes per member

A member is one independent run inside the directory: a seed of a vmapped Anakin run or a member
of a population. For a metric ``m``, the per-member list is the field ``m + "s"``
(``episode_return`` -> ``episode_returns``); a metric logged only as a scalar (``loss``) is read
as a single member. An optional ``config.json`` next to ``metrics.jsonl`` may name the run's
``agent``, ``arch`` and ``env``; plots use them in titles and labels when present.

Figures are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, never
through ``pyplot``, so plotting changes no global backend state and needs no display.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from podracer.runs.leaderboard import population_records
from podracer.runs.rundir import CONFIG_FILE, LEADERBOARD_FILE, METRICS_FILE, RESULTS_FILE
from podracer.util.stats import bootstrap_ci
from podracer.util.validation import ArgumentParser

KINDS = ("train", "eval")
DEFAULT_METRIC = {"train": "episode_return", "eval": "eval_return"}
# Keys of benchmark records that can be the x axis, in the order they are tried.
BENCHMARK_X_KEYS = ("num_envs", "devices", "processes", "population", "envs_per_actor")

PathLike = str | Path


class Curve(NamedTuple):
    """One run's learning curve: ``values[m, p]`` is member ``m``'s metric at ``step[p]``."""

    run_dir: str
    step: np.ndarray  # [P] i64: environment steps per member
    values: np.ndarray  # [M, P] f64: NaN where the record had null or no value


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON objects of a JSON-lines file; blank lines and a truncated last line are skipped."""
    lines = path.read_text().splitlines()
    numbered = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
    records = []
    for position, (number, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if position == len(numbered) - 1:
                break  # the writer was killed mid-line
            raise ValueError(f"{path}:{number} is not a JSON object: {error}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number} is not a JSON object: {line[:80]!r}")
        records.append(record)
    return records


def read_metrics(run_dir: PathLike) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` (or of the file itself when given one).

    Raises:
      FileNotFoundError: naming the path, when there is no metrics file.
      ValueError: naming the file and line, when a line other than the last is not JSON.
    """
    path = Path(run_dir)
    if path.is_dir() or path.suffix != ".jsonl":
        path = path / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no metrics file at {path}: a run directory must hold {METRICS_FILE} "
            "(see podracer.runs.plotting's docstring for the format)"
        )
    return _read_jsonl(path)


def read_config(run_dir: PathLike) -> dict[str, Any]:
    """``run_dir/config.json`` as a dict, or ``{}`` when there is none."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return {}
    config = json.loads(path.read_text())
    return config if isinstance(config, dict) else {}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not allowed: choose one of {', '.join(KINDS)}")


def _as_list(run_dirs: PathLike | Sequence[PathLike]) -> list[PathLike]:
    if isinstance(run_dirs, str | Path):
        return [run_dirs]
    run_dirs = list(run_dirs)
    if not run_dirs:
        raise ValueError("run_dirs is empty: give one or more run directories")
    return run_dirs


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _curve(run_dir: PathLike, metric: str, kind: str) -> Curve:
    records = [r for r in read_metrics(run_dir) if r.get("kind") == kind]
    if not records:
        kinds = sorted({str(r.get("kind")) for r in read_metrics(run_dir)})
        raise ValueError(
            f"{run_dir}: no {kind!r} records in {METRICS_FILE} (kinds present: "
            f"{', '.join(kinds) or 'none'})"
        )
    records.sort(key=lambda r: r["step"])  # stable: a resumed run keeps its order per step
    per_member = metric + "s"
    rows: list[list[float] | None] = []
    for record in records:
        if isinstance(record.get(per_member), list):
            rows.append([_float(v) for v in record[per_member]])
        elif metric in record and not isinstance(record[metric], list):
            rows.append([_float(record[metric])])
        else:
            rows.append(None)
    sizes = {len(row) for row in rows if row is not None}
    if not sizes:
        keys = sorted({k for r in records for k in r})
        raise ValueError(
            f"{run_dir}: no {kind!r} record has {metric!r} or {per_member!r}; "
            f"its keys are {', '.join(keys)}"
        )
    if len(sizes) > 1:
        raise ValueError(
            f"{run_dir}: {per_member!r} has {sorted(sizes)} members in different records; "
            "every record of a run must list the same members"
        )
    (num_members,) = sizes
    values = np.array([[math.nan] * num_members if row is None else row for row in rows])
    step = np.array([int(r["step"]) for r in records], dtype=np.int64)
    return Curve(str(run_dir), step, values.T.astype(np.float64))


def learning_curves(
    run_dirs: PathLike | Sequence[PathLike], metric: str | None = None, kind: str = "train"
) -> list[Curve]:
    """Per run directory, ``Curve(run_dir, step [P], values [M, P])``.

    ``metric`` defaults to ``episode_return`` for ``kind="train"`` and ``eval_return`` for
    ``kind="eval"``; its per-member list (``metric + "s"``) gives ``M`` rows, NaN where null.
    """
    _check_kind(kind)
    metric = metric or DEFAULT_METRIC[kind]
    return [_curve(run_dir, metric, kind) for run_dir in _as_list(run_dirs)]


def _pool(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray]:
    """Every member of ``curves`` on one step grid: ``(step [P], values [sum M, P])``.

    Runs logged at the same steps are stacked as they are; otherwise each member is linearly
    interpolated onto the union of the steps, NaN outside the steps where it has values.
    """
    if all(np.array_equal(c.step, curves[0].step) for c in curves):
        return curves[0].step, np.concatenate([c.values for c in curves])
    grid = np.unique(np.concatenate([c.step for c in curves]))
    rows = []
    for curve in curves:
        for member in curve.values:
            valid = ~np.isnan(member)
            row = np.full(grid.shape, np.nan)
            if valid.any():
                xs, ys = curve.step[valid], member[valid]
                inside = (grid >= xs.min()) & (grid <= xs.max())
                row[inside] = np.interp(grid[inside], xs, ys)
            rows.append(row)
    return grid, np.stack(rows)


def mean_and_ci(
    values: np.ndarray, *, confidence: float = 0.95, num_resamples: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over members ``[M, P] -> [P]`` with its percentile-bootstrap interval per point.

    NaNs are dropped point by point; a point with no value is NaN, one with a single value has a
    zero-width interval.
    """
    num_points = values.shape[1]
    mean, low, high = (np.full(num_points, np.nan) for _ in range(3))
    for p in range(num_points):
        column = values[:, p][~np.isnan(values[:, p])]
        if column.size == 0:
            continue
        mean[p] = column.mean()
        if column.size == 1:
            low[p] = high[p] = mean[p]
        else:
            low[p], high[p] = bootstrap_ci(
                column, np.mean, num_resamples=num_resamples, confidence=confidence, seed=seed
            )
    return mean, low, high


def _figure():
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # not a core dependency of the library
        raise ImportError(
            "podracer.runs.plotting needs matplotlib: pip install matplotlib"
        ) from error
    figure = Figure(figsize=(8, 5), layout="constrained")
    return figure, figure.add_subplot()


def _save(figure, out: PathLike) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=150)
    return out


def _shared_config(run_dirs: Sequence[PathLike]) -> str:
    """``"ppo on gymnax:CartPole-v1 (anakin)"`` when every run's config.json agrees, else ``""``."""
    configs = [read_config(d) for d in run_dirs]
    parts = {}
    for key in ("agent", "env", "arch"):
        values = [c.get(key) for c in configs]
        if all(isinstance(v, str) for v in values) and len(set(values)) == 1:
            parts[key] = values[0]
    text = " on ".join(parts[k] for k in ("agent", "env") if k in parts)
    if "arch" in parts:
        text = f"{text} ({parts['arch']})" if text else parts["arch"]
    return text


def _metric_label(metric: str) -> str:
    return metric.replace("_", " ")


def plot_runs(
    run_dirs: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    metric: str | None = None,
    kind: str = "train",
    labels: Sequence[str] | None = None,
    group: bool = True,
) -> Path:
    """Learning curves: the mean over members with a shaded 95% bootstrap interval; writes a PNG.

    Curves are drawn per label: runs that share a label are pooled (every member of every run
    in one curve). Without ``labels``, ``group=True`` pools all the runs into one curve (seeds
    of one configuration spread over directories) and ``group=False`` draws one curve per run
    directory. The x axis is environment steps per member.

    Returns:
      the path written.
    """
    _check_kind(kind)
    metric = metric or DEFAULT_METRIC[kind]
    run_dirs = _as_list(run_dirs)
    shared = _shared_config(run_dirs)
    if len(run_dirs) == 1 and labels is None and (Path(run_dirs[0]) / RESULTS_FILE).is_file():
        labels, curves = sweep_curves(run_dirs[0], metric, kind)
        run_dirs = [curve.run_dir for curve in curves]
    else:
        curves = learning_curves(run_dirs, metric, kind)
    if labels is None:
        if group:
            labels = [shared or f"{len(run_dirs)} run{'s' * (len(run_dirs) > 1)}"] * len(run_dirs)
        else:
            labels = [Path(d).name or str(d) for d in run_dirs]
    labels = list(labels)
    if len(labels) != len(run_dirs):
        raise ValueError(
            f"labels has {len(labels)} entries for {len(run_dirs)} run directories: give one "
            "label per directory (directories with the same label are pooled)"
        )
    figure, ax = _figure()
    for label in dict.fromkeys(labels):  # first-seen order
        step, values = _pool([c for c, lab in zip(curves, labels, strict=True) if lab == label])
        mean, low, high = mean_and_ci(values)
        (line,) = ax.plot(step, mean, label=f"{label} ({values.shape[0]} members)")
        ax.fill_between(step, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel("environment steps (per member)")
    ax.set_ylabel(_metric_label(metric))
    title = f"{_metric_label(metric)} ({kind}): mean over members, 95% bootstrap CI"
    ax.set_title(f"{shared}\n{title}" if shared else title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return _save(figure, out)


def sweep_curves(run_dir: PathLike, metric: str, kind: str) -> tuple[list[str], list[Curve]]:
    """A sweep's run directory (``results.json``) as one curve per sweep point: ``(labels,
    curves)``, each curve holding the seeds of one combination of the swept values. A sweep run
    as one program has every member in its ``metrics.jsonl`` (combination-major: member
    ``c * seeds + s``); a sweep run in turn has one directory ``member-<i>`` per member."""
    results = json.loads((Path(run_dir) / RESULTS_FILE).read_text())
    names = list(results["grid"])
    labels, curves = [], []
    if (Path(run_dir) / METRICS_FILE).is_file():
        whole = _curve(run_dir, metric, kind)
        rows = results["members"]
        for combo in dict.fromkeys(tuple(r[n] for n in names) for r in rows):
            members = [i for i, r in enumerate(rows) if tuple(r[n] for n in names) == combo]
            labels.append(", ".join(f"{n}={v:g}" for n, v in zip(names, combo, strict=True)))
            curves.append(whole._replace(values=whole.values[members]))
        return labels, curves
    for row in results["members"]:
        labels.append(", ".join(f"{n}={row[n]:g}" for n in names))
        curves.append(_curve(Path(run_dir) / f"member-{row['member']}", metric, kind))
    return labels, curves


def plot_members(
    run_dir: PathLike, out: PathLike, *, metric: str | None = None, kind: str = "train"
) -> Path:
    """One line per member of one run (seeds, or a population's members); writes a PNG."""
    _check_kind(kind)
    metric = metric or DEFAULT_METRIC[kind]
    (curve,) = learning_curves([run_dir], metric, kind)
    figure, ax = _figure()
    for m, member in enumerate(curve.values):
        valid = ~np.isnan(member)
        ax.plot(curve.step[valid], member[valid], label=f"member {m}", linewidth=1.2)
    ax.set_xlabel("environment steps (per member)")
    ax.set_ylabel(_metric_label(metric))
    shared = _shared_config([run_dir])
    title = f"{_metric_label(metric)} ({kind}) per member: {Path(run_dir).name or run_dir}"
    ax.set_title(f"{shared}\n{title}" if shared else title)
    ax.grid(alpha=0.3)
    if curve.values.shape[0] <= 16:
        ax.legend(loc="best", fontsize="small", ncols=2 if curve.values.shape[0] > 8 else 1)
    return _save(figure, out)


def read_leaderboard(run_dir: PathLike) -> list[dict[str, Any]]:
    """The ``"leaderboard"`` records of a population run (``leaderboard.jsonl``), in order."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / LEADERBOARD_FILE
    if not path.is_file():
        raise ValueError(
            f"{path} does not exist: a population run (podracer train --population P) writes it"
        )
    records = [r for r in _read_jsonl(path) if r.get("kind") == "leaderboard"]
    if not records:
        raise ValueError(f"{path} holds no leaderboard record")
    return records


def survivor_hparams(records: Sequence[dict[str, Any]]) -> dict[int, dict[str, np.ndarray]]:
    """``{member: {name: values [R]}}``: the hyper-parameters each final member's *lineage*
    trained with at each of the ``R`` leaderboards.

    Walking back from the end, a member that the tournament of leaderboard ``r`` replaced was,
    before it, its parent: the lineage continues in the parent's slot.
    """
    size = len(records[-1]["members"])
    out = {}
    for member in range(size):
        slot = member
        rows = []
        for record in reversed(records):
            for replaced in record["replaced"]:
                if replaced["member"] == slot:
                    slot = replaced["parent"]
                    break
            by_id = {m["member"]: m for m in record["members"]}
            rows.append(by_id[slot]["hparams"])
        rows.reverse()
        out[member] = {name: np.asarray([row[name] for row in rows]) for name in rows[0]}
    return out


def plot_population(run_dir: PathLike, out: PathLike) -> Path:
    """A population run: each member's score at every leaderboard (crosses mark the members the
    tournament then replaced), and below, one panel per hyper-parameter, the values that each
    survivor's lineage trained with. Writes a PNG."""
    from matplotlib.figure import Figure

    records = read_leaderboard(run_dir)
    if "pod" in records[0]:  # an elastic run's rows, one per pod report: all pods' members
        records = population_records(records)
    step = np.asarray([r.get("step", r["updates"]) for r in records], np.float64)
    size = len(records[-1]["members"])
    scores = np.asarray(
        [[np.nan if s is None else s for s in r["scores"]] for r in records], np.float64
    )  # [R, P]
    lineages = survivor_hparams(records)
    names = sorted(lineages[0])
    figure = Figure(figsize=(8, 3 + 2.2 * len(names)), layout="constrained")
    axes = figure.subplots(1 + len(names), 1, sharex=True, squeeze=False)[:, 0]
    colors = [f"C{i % 10}" for i in range(size)]
    for m in range(size):
        axes[0].plot(step, scores[:, m], color=colors[m], linewidth=1.0, label=f"member {m}")
        gone = [i for i, r in enumerate(records) if any(x["member"] == m for x in r["replaced"])]
        axes[0].plot(step[gone], scores[gone, m], "x", color=colors[m], markersize=5)
    axes[0].plot(step, np.nanmedian(scores, axis=1), "k--", linewidth=2.0, label="median")
    axes[0].set_ylabel("leaderboard score")
    shared = _shared_config([run_dir])
    title = f"population of {size}: score per member (x: replaced by the tournament)"
    axes[0].set_title(f"{shared}\n{title}" if shared else title)
    if size <= 16:
        axes[0].legend(loc="best", fontsize="x-small", ncols=2)
    for ax, name in zip(axes[1:], names, strict=True):
        values = np.stack([lineages[m][name] for m in range(size)])  # [P, R]
        for m in range(size):
            ax.plot(step, values[m], color=colors[m], linewidth=1.0, drawstyle="steps-post")
        positive = values[values > 0]
        if positive.size == values.size and positive.max() / positive.min() > 20:
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.set_title(f"{name} along each survivor's lineage", fontsize="small")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("environment steps (per member)")
    return _save(figure, out)


def read_benchmarks(jsonl_paths: PathLike | Sequence[PathLike]) -> list[dict[str, Any]]:
    """The JSON-object lines of benchmark outputs; other lines (log text) are skipped."""
    records = []
    for path in _as_list(jsonl_paths):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no benchmark file at {path}")
        for line in path.read_text().splitlines():
            if not line.lstrip().startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a truncated line of an interrupted sweep
            if isinstance(record, dict):
                records.append(record)
    return records


def _series_name(record: dict[str, Any]) -> str:
    """``"ppo"`` for ``config="ppo-64"``: the config without its trailing size, else the env."""
    if "config" in record:
        return re.sub(r"[-_]\d+$", "", str(record["config"]))
    return str(record.get("env", "benchmark"))


def _benchmark_x(records: Sequence[dict[str, Any]], x: str | None) -> str:
    if x is not None:
        if not any(x in r for r in records):
            keys = sorted({k for r in records for k in r})
            raise ValueError(f"x={x!r} is in no benchmark record: their keys are {', '.join(keys)}")
        return x
    present = [k for k in BENCHMARK_X_KEYS if any(k in r for r in records)]
    if not present:
        raise ValueError(
            f"no benchmark record has an x key: give x= one of their keys "
            f"(tried {', '.join(BENCHMARK_X_KEYS)})"
        )
    varying = [k for k in present if len({r.get(k) for r in records if k in r}) > 1]
    return (varying or present)[0]


def plot_benchmark(
    jsonl_paths: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    x: str | None = None,
    y: str = "sps",
) -> Path:
    """``y`` (steps per second) against ``x`` on a log axis, from benchmark JSON lines.

    ``x`` defaults to the first of :data:`BENCHMARK_X_KEYS` whose value varies across the
    records (else the first present). One series per configuration family (``config`` without
    its trailing size, ``ppo-64`` -> ``ppo``; the ``env`` when there is no ``config``): a marker
    per record and a line through the mean at each ``x``. Writes a PNG and returns its path.
    """
    records = read_benchmarks(jsonl_paths)
    if not records:
        raise ValueError(f"no JSON records in {', '.join(map(str, _as_list(jsonl_paths)))}")
    x = _benchmark_x(records, x)
    usable = [r for r in records if r.get(x) is not None and r.get(y) is not None]
    if not usable:
        raise ValueError(f"no benchmark record has both {x!r} and {y!r}")
    bad = [r[x] for r in usable if not float(r[x]) > 0]
    if bad:
        raise ValueError(f"{x}={bad[0]!r} cannot be drawn on a log axis: values must be > 0")
    series: dict[str, list[tuple[float, float]]] = {}
    for record in usable:
        series.setdefault(_series_name(record), []).append((float(record[x]), float(record[y])))
    figure, ax = _figure()
    for name, points in series.items():
        xs = np.array([p[0] for p in points])
        ys = np.array([p[1] for p in points])
        envs = {str(r.get("env")) for r in usable if _series_name(r) == name and "env" in r}
        label = f"{name} ({envs.pop()})" if len(envs) == 1 and name not in envs else name
        distinct = np.unique(xs)
        means = np.array([ys[xs == v].mean() for v in distinct])
        (line,) = ax.plot(distinct, means, marker="o", label=label)
        ax.scatter(xs, ys, color=line.get_color(), alpha=0.5, s=16)
    from matplotlib.ticker import NullFormatter, ScalarFormatter, StrMethodFormatter

    ax.set_xscale("log")
    ticks = np.unique([float(r[x]) for r in usable])
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(bottom=0)
    if max(float(r[y]) for r in usable) >= 1000:
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_xlabel(x.replace("_", " ") + " (log scale)")
    ax.set_ylabel("environment steps per second" if y == "sps" else y.replace("_", " "))
    ax.set_title(f"{y} against {x}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return _save(figure, out)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="podracer plot",
        description="Plot learning curves of run directories (mean over members, 95% bootstrap "
        "CI), one line per member (--members), or benchmark JSON lines (--benchmark).",
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="run directories (JSONL files with --benchmark)"
    )
    parser.add_argument("--out", required=True, help="the PNG file to write")
    parser.add_argument(
        "--metric", default=None, help="metric to plot (default: episode_return / eval_return)"
    )
    parser.add_argument("--kind", choices=KINDS, default="train", help="record kind to read")
    parser.add_argument("--members", action="store_true", help="one line per member of one run")
    parser.add_argument(
        "--population",
        action="store_true",
        help="a population run: scores per member and the survivors' hyper-parameters",
    )
    parser.add_argument(
        "--separate", action="store_true", help="one curve per run directory instead of pooling"
    )
    parser.add_argument(
        "--label",
        action="append",
        dest="labels",
        help="label of each run directory, in order (repeat; equal labels are pooled)",
    )
    parser.add_argument("--benchmark", action="store_true", help="PATHs are benchmark JSONL files")
    parser.add_argument("--x", default=None, help="benchmark x key (default: what is given)")
    parser.add_argument("--y", default="sps", help="benchmark y key (default: sps)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the flags and which PATHs exist, then exit: nothing read or written",
    )
    return parser


def _dry_run(args) -> int:
    """``--dry-run``: the flags checked as a real plot checks them; the PATHs that do not exist
    yet are named (a run directory an earlier command of a script will write)."""
    missing = [path for path in args.paths if not Path(path).exists()]
    for path in missing:
        print(f"dry run: podracer plot reads {path}, which is not there yet", file=sys.stderr)
    record = {"dry_run": True, "command": "plot", "paths": args.paths, "missing": missing}
    print(json.dumps({**record, "out": args.out}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``podracer plot PATH... --out FILE.png [...]``; returns the exit code (2 on bad input)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.population and len(args.paths) != 1:
            raise ValueError(f"--population takes one run directory, got {len(args.paths)}")
        if args.members and len(args.paths) != 1:
            raise ValueError(f"--members takes one run directory, got {len(args.paths)}")
        if args.dry_run:
            return _dry_run(args)
        if args.benchmark:
            out = plot_benchmark(args.paths, args.out, x=args.x, y=args.y)
        elif args.population:
            out = plot_population(args.paths[0], args.out)
        elif args.members:
            out = plot_members(args.paths[0], args.out, metric=args.metric, kind=args.kind)
        else:
            out = plot_runs(
                args.paths,
                args.out,
                metric=args.metric,
                kind=args.kind,
                labels=args.labels,
                group=not args.separate,
            )
    except (OSError, ValueError) as error:
        print(f"podracer plot: error: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0


__all__ = [
    "BENCHMARK_X_KEYS",
    "DEFAULT_METRIC",
    "METRICS_FILE",
    "Curve",
    "learning_curves",
    "main",
    "mean_and_ci",
    "plot_benchmark",
    "plot_members",
    "plot_population",
    "plot_runs",
    "read_benchmarks",
    "read_config",
    "read_leaderboard",
    "read_metrics",
    "survivor_hparams",
    "sweep_curves",
]

if __name__ == "__main__":
    sys.exit(main())
