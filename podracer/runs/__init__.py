"""Runs: a run directory, its config, loggers, checkpoints, periodic evaluation and resume.

A run directory holds::

    config.json      the full resolved RunSpec (load it back with load_spec), the environment's
                     options (env_options: params, observe) included
    metrics.jsonl    "train" and "eval" records (podracer.runs.logging)
    leaderboard.jsonl  a population's "leaderboard" records (podracer.population)
    tb/              TensorBoard events
    checkpoints/     orbax checkpoints, one step directory per saved update count
    videos/          episodes' videos (podracer eval --video, --video-interval)

:func:`train` starts or resumes a run for either loop. For Anakin, resume is exact: a run
resumed from a checkpoint calls the same compiled programs on the same state as a run that never
stopped, so it ends with bitwise identical params, optimizer state, environment state and keys.
For Sebulba, the learner state (params, optimizer state, key, update count) and the counters are
restored and the environments start afresh.

The modules: :mod:`~podracer.runs.spec` (what a run is), :mod:`~podracer.runs.training`,
:mod:`~podracer.runs.planning` (``--dry-run``), :mod:`~podracer.runs.checkpoint`,
:mod:`~podracer.runs.logging`, :mod:`~podracer.runs.rundir` (the file names),
:mod:`~podracer.runs.leaderboard` (a population's leaderboard rows, read and appended),
:mod:`~podracer.runs.video` (episodes recorded and captioned; :func:`video_of_run` is
``podracer eval --video``), :mod:`~podracer.runs.media` (video files) and
:mod:`~podracer.runs.plotting`.
"""

from __future__ import annotations

from podracer.runs.planning import (
    checkpoint_steps,
    describe_plan,
    dry_run,
    dry_run_saved,
    plan,
)
from podracer.runs.spec import (
    RunOptions,
    RunSpec,
    arch_config_cls,
    check_processes_agree,
    check_run_dir,
    dataclass_from_dict,
    default_run_dir,
    load_config_file,
    load_spec,
    save_spec,
    source_digest,
    spec_from_dict,
)
from podracer.runs.training import (
    Interrupted,
    build_system,
    evaluate_run,
    restore_run,
    run_logger,
    signals_held,
    train,
    video_of_run,
)

__all__ = [
    "Interrupted",
    "RunOptions",
    "RunSpec",
    "arch_config_cls",
    "build_system",
    "check_processes_agree",
    "check_run_dir",
    "checkpoint_steps",
    "dataclass_from_dict",
    "default_run_dir",
    "describe_plan",
    "dry_run",
    "dry_run_saved",
    "evaluate_run",
    "load_config_file",
    "load_spec",
    "plan",
    "restore_run",
    "run_logger",
    "save_spec",
    "signals_held",
    "source_digest",
    "spec_from_dict",
    "train",
    "video_of_run",
]
