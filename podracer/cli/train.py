"""``podracer train``: a run started, resumed or planned (``--dry-run``), and an elastic run on
Ray (``--pods``, ``--cluster``); every step reads the command line's one parse
(:class:`~podracer.cli.parse.TrainArgs`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
from typing import Any

from podracer.cli.parse import (
    MULTI_PROCESS,
    CLIError,
    ElasticArgs,
    TrainArgs,
    elastic_wanted,
    parse_elastic,
    process_flags,
    process_setup,
    run_spec,
)
from podracer.errors import ConfigError


def train(args: TrainArgs) -> dict:
    """``podracer train``: every step (run directory, processes, spec, run) reading the one
    parse ``args``; ``--pods`` or ``--cluster`` make it an elastic tournament on Ray
    (:func:`train_elastic`)."""
    from podracer import parallel, runs

    if elastic_wanted(args):  # --pods, --cluster: the elastic tournament on Ray
        return train_elastic(parse_elastic(args))
    if args.selectors.dry_run:
        return train_dry_run(args)
    check_run_dir(args)
    initialize(args)
    if _resuming(args):
        selectors, spec, run_dir = _resume_spec(args)
        resume = True
    else:
        spec, selectors = run_spec(args)
        run_dir = selectors.run_dir or runs.default_run_dir(spec)
        resume = False
    runs.check_processes_agree(spec, run_dir, resume=resume, resume_step=selectors.resume_step)
    try:
        summary = runs.train(
            spec,
            run_dir,
            resume=resume,
            resume_step=selectors.resume_step,
            console=not selectors.quiet and parallel.is_main_process(),
        )
    except KeyboardInterrupt as stop:
        print(interrupted_message(stop, run_dir), file=sys.stderr)
        raise
    print(json.dumps(summary), flush=True)
    return summary


def train_dry_run(args: TrainArgs, resolved: tuple | None = None) -> dict:
    """``podracer train ... --dry-run``: everything a run resolves and checks (agent,
    environment, loop, every flag, the run directory; a resume's checkpoint), with the same
    one-line errors, then the plan (:func:`podracer.runs.plan`) on stderr and as a JSON line;
    nothing is compiled, written or joined (the processes of a multi-process run are not
    contacted: the devices are this process's). ``resolved``: :func:`run_spec`'s
    ``(spec, selectors)`` of ``args`` when the caller has them already."""
    from podracer import runs

    check_run_dir(args)
    process_setup(args)
    if _resuming(args):
        selectors, spec, run_dir = _resume_spec(args)
        record = runs.dry_run(spec, run_dir, resume=True, resume_step=selectors.resume_step)
    else:
        spec, selectors = resolved or run_spec(args)
        run_dir = selectors.run_dir or runs.default_run_dir(spec)
        record = runs.dry_run(spec, run_dir)
    print_plan(record)
    return record


def print_plan(record: dict) -> None:
    """A dry run's plan: its lines on stderr, its record as the JSON line on stdout."""
    from podracer.runs import describe_plan

    print(describe_plan(record), file=sys.stderr)
    print(json.dumps(record), flush=True)


def _resuming(args: TrainArgs) -> bool:
    return args.selectors.resume is not None


def _resume_spec(args: TrainArgs):
    """``(selectors, spec, run_dir)`` for ``podracer train --resume DIR [--total-timesteps N]``."""
    from podracer.runs import load_spec

    selectors, rest = args.selectors, args.rest
    allowed = {"resume", "resume_step", "total_timesteps", "quiet", "dry_run", *MULTI_PROCESS}
    given = {
        name
        for name, value in vars(selectors).items()
        if value not in (None, False) and name not in allowed
    }
    if rest or given:
        extra = rest or [f"--{name.replace('_', '-')}" for name in sorted(given)]
        raise CLIError(
            f"--resume takes only --total-timesteps, --resume-step, --quiet, --dry-run and the "
            f"process flags, not {extra[0]}: a resumed run keeps its config.json"
        )
    spec = load_spec(selectors.resume)
    if selectors.total_timesteps is not None:
        if selectors.total_timesteps <= 0:
            raise CLIError(
                f"--total-timesteps={selectors.total_timesteps} is not allowed: it must be > 0"
            )
        spec = dataclasses.replace(spec, total_timesteps=selectors.total_timesteps)
    return selectors, spec, selectors.resume


def initialize(args: TrainArgs) -> None:
    """Joins the processes of a multi-process run, before any JAX computation (nothing to do
    for one process)."""
    from podracer import parallel

    parallel.initialize(*process_flags(args), timeout_s=args.selectors.fault_timeout)


def check_run_dir(args: TrainArgs) -> None:
    """The run directory checked by every process before the processes join
    (:func:`podracer.runs.check_run_dir`), so none has written into it yet."""
    from podracer import runs

    selectors = args.selectors
    if selectors.resume is not None:
        runs.check_run_dir(selectors.resume, resume=True, flag="--resume")
    elif selectors.run_dir is not None:
        runs.check_run_dir(selectors.run_dir, resume=False)


def use_cpu_cores(args: TrainArgs) -> None:
    """One XLA:CPU device per core for a single-process run, before JAX starts
    (:func:`podracer.parallel.use_cpu_cores`), so that Anakin's members run side by side on
    them; a multi-process run keeps the devices each process has."""
    from podracer import parallel

    if parallel.resolve(*process_flags(args)).source == "single":
        parallel.use_cpu_cores()


# --- stopping ------------------------------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, ``kill``) in a single-process run: handled as Ctrl-C is, so
    the state the run has reached is saved; the exit status is 143 (128 + SIGTERM), as a
    process killed by it. A process of a multi-process run ends at once, as before."""


def terminated(stop: BaseException) -> bool:
    """Whether ``stop`` came from SIGTERM (:class:`Terminated`), not from Ctrl-C."""
    return isinstance(stop, Terminated) or isinstance(stop.__cause__, Terminated)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises :class:`Terminated` in the main thread while inside (nothing elsewhere:
    only the main thread may set a signal handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        import jax

        if jax.distributed.is_initialized():
            # A checkpoint is collective: one process cannot save alone, and processes stopped
            # one by one would save different updates. SIGTERM ends this one at once, as
            # before; the others stop through the heartbeat (docs/scaling.md).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_message(stop: KeyboardInterrupt, run_dir: str) -> str:
    """What Ctrl-C left in ``run_dir``: the checkpoint of the state the run had reached, an
    earlier checkpoint only, or nothing to resume."""
    from podracer.runs import Interrupted, checkpoint_steps

    what = "terminated (SIGTERM)" if terminated(stop) else "interrupted"
    if isinstance(stop, Interrupted):
        saved, latest = stop.saved, stop.latest
    else:  # before the run's loop started (building, compiling): its checkpoints are on disk
        saved, latest = None, max(checkpoint_steps(run_dir), default=None)
    resume = f"podracer train --resume {run_dir}"
    if saved is not None:
        return f"podracer: {what}; the state after {saved} updates is saved: {resume}"
    if latest is not None:
        return (
            f"podracer: {what}; the last state could not be saved, the latest checkpoint "
            f"is of update {latest}: {resume}"
        )
    return f"podracer: {what}; nothing was saved: no checkpoint in {run_dir}"


# --- an elastic run ------------------------------------------------------------------------------


def train_elastic(args: ElasticArgs) -> dict[str, Any]:
    """``podracer train ... --population P --pods N|auto --cluster ray|HOST:PORT`` and
    ``podracer train --resume RUN_DIR`` of an elastic run (:mod:`podracer.experiments.elastic`);
    prints the final JSON line."""
    from podracer import runs
    from podracer.experiments import elastic

    selectors = args.train.selectors
    if selectors.resume is not None:
        config = _resumed_elastic_config(args)
        spec = runs.load_spec(selectors.resume)
        if selectors.total_timesteps is not None:
            spec = dataclasses.replace(spec, total_timesteps=selectors.total_timesteps)
        summary = elastic.train(spec, selectors.resume, config, resume=True)
    else:
        config = elastic.ElasticConfig(
            pods=_pods(args.pods or "2"), cluster=args.cluster or "ray", **args.fields
        )
        elastic.import_ray()
        spec, selectors = run_spec(args.train)
        if spec.population is None:
            raise ConfigError("--pods and --cluster need --population P (the members of the pods)")
        if config.pods != "auto":
            elastic.pod_sizes(spec.population.size, config.pods)
        if selectors.dry_run:  # checked and planned; nothing started
            return train_dry_run(args.train, (spec, selectors))
        run_dir = selectors.run_dir or runs.default_run_dir(spec, kind="elastic")
        summary = elastic.train(spec, run_dir, config)
    print(json.dumps(summary), flush=True)
    return summary


def _resumed_elastic_config(args: ElasticArgs):
    """The :class:`~podracer.experiments.elastic.ElasticConfig` a resumed elastic run saved,
    with the ``--pods``, ``--cluster`` and ``--elastic.FIELD`` given now."""
    from podracer.experiments.elastic import ELASTIC_FILE, ElasticConfig

    with open(os.path.join(args.train.selectors.resume, ELASTIC_FILE)) as f:
        saved = json.load(f)["config"]
    saved.update({k: v for k, v in (("pods", args.pods), ("cluster", args.cluster)) if v})
    if isinstance(saved.get("pods"), str) and saved["pods"].isdigit():
        saved["pods"] = int(saved["pods"])
    return ElasticConfig(**{**saved, **args.fields})


def _pods(text: str) -> int | str:
    """``--pods``: a number, or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"--pods={text!r} is not allowed: give a number of pods >= 1, or auto"
        ) from None
