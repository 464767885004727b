"""A run's plan without training it (``--dry-run``): the system's sizes, its memory and the
checkpoints on disk, in one record and one line per field."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import jax

from podracer import loops
from podracer.agents.policy import describe_window
from podracer.runs.checkpoint import CheckpointError
from podracer.runs.rundir import CHECKPOINT_DIR
from podracer.runs.spec import RunSpec, load_spec
from podracer.runs.training import build_system


def checkpoint_steps(run_dir: str) -> list[int]:
    """The update counts of the checkpoints in ``run_dir``, read from the directory's names
    (nothing is opened or made)."""
    directory = os.path.join(run_dir, CHECKPOINT_DIR)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(name) for name in names if name.isdigit())


def _bytes(tree) -> int:
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


def _replay_bytes(state) -> int:
    """The bytes of the state's replay buffers: the leaves under a field named ``replay``."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return sum(
        leaf.size * leaf.dtype.itemsize
        for path, leaf in leaves
        if any(getattr(key, "name", None) == "replay" for key in path)
    )


def plan(system: loops.System, spec: RunSpec, run_dir: str, **more: Any) -> dict[str, Any]:
    """What a run of ``system`` would do, found without compiling: the resolved config, the
    devices, the steps per update and the updates, the memory of its state and of the replay
    buffers in it. The initial state's shapes come from tracing ``system.init`` (and, on
    Anakin, one update), so a size that does not divide fails here as it would in the run.

    Args:
      system: the built system (:func:`build_system`).
      spec: the run's spec.
      run_dir: where the run would write.
      **more: added to the returned record (what a sweep or a resume adds).

    Returns:
      One JSON-ready record (``podracer train --dry-run`` prints it as its last line).
    """
    state = jax.eval_shape(lambda: system.init(spec.seed))
    recipe = system.recipe
    devices = jax.devices()
    return {
        "dry_run": True,
        "run_dir": run_dir,
        **more,
        "config": spec.to_dict(),
        "devices": len(devices),
        "platform": devices[0].platform,
        "processes": jax.process_count(),
        "steps_per_update": recipe.steps_per_update,
        "num_updates": recipe.num_updates,
        "total_steps": recipe.num_updates * recipe.steps_per_update,
        "state_bytes": _bytes(state),
        "replay_bytes": _replay_bytes(state),
        **_memory_plan(system),
    }


def _memory_plan(system: loops.System) -> dict[str, Any]:
    """``{"memory": line}`` for an agent with memory: the sequences its learner re-runs on
    each device (:func:`podracer.agents.policy.describe_window`); ``{}`` otherwise."""
    rollout_len = getattr(system.config, "rollout_len", None)
    envs = getattr(system, "envs_per_device", None)
    if not rollout_len or not envs:
        return {}
    line = describe_window(system.recipe.agent_config, rollout_len, envs)
    return {"memory": line} if line else {}


def dry_run(
    spec: RunSpec,
    run_dir: str,
    *,
    resume: bool = False,
    resume_step: int | None = None,
    devices=None,
) -> dict[str, Any]:
    """What :func:`train` would do with these arguments, without compiling or writing anything
    (:func:`plan`): the system is built (environment, agent, sizes checked) and, for a resume,
    the checkpoint it would restore is found.

    Args:
      spec: the run's spec.
      run_dir: the run directory (checked by :func:`check_run_dir` beforehand).
      resume: resume the run in ``run_dir``.
      resume_step: the checkpoint to resume (default: the latest).
      devices: as for :func:`train`.

    Returns:
      The :func:`plan` record, with ``resume_from`` (a checkpoint's update count) for a resume.
    """
    system = build_system(spec, devices)
    if spec.options.video_interval:  # the family draws, and the video extra is installed
        from podracer.runs.video import check_renders

        check_renders(system, spec)
    more: dict[str, Any] = {}
    if resume:
        steps = checkpoint_steps(run_dir)
        directory = os.path.join(run_dir, CHECKPOINT_DIR)
        if not steps:
            raise CheckpointError(f"no checkpoint in {directory}")
        if resume_step is not None and resume_step not in steps:
            raise CheckpointError(
                f"no checkpoint of step {resume_step} in {directory}: the steps saved are {steps}"
            )
        more["resume_from"] = steps[-1] if resume_step is None else resume_step
    return plan(system, spec, run_dir, **more)


def dry_run_saved(
    command: str, run_dir: str, *, step: int | None = None, check=None
) -> dict[str, Any]:
    """``podracer eval`` or ``backtest`` with ``--dry-run``: the run directory's config is
    loaded and its system built (``check(run_dir) -> RunSpec`` instead of :func:`load_spec`
    where the command asks more of it), and ``step`` must be one of its checkpoints. A run
    directory that is not there yet (an earlier command of a script writes it) is named, not
    an error. Prints the record as one JSON line and returns it."""
    record: dict[str, Any] = {"dry_run": True, "command": command, "run_dir": run_dir}
    if not os.path.exists(run_dir):
        print(
            f"dry run: podracer {command} reads {run_dir}, which is not there yet "
            "(podracer train writes it)",
            file=sys.stderr,
        )
        record["exists"] = False
    else:
        spec = (check or load_spec)(run_dir)
        build_system(spec)
        steps = checkpoint_steps(run_dir)
        if step is not None and step not in steps:
            directory = os.path.join(run_dir, CHECKPOINT_DIR)
            raise CheckpointError(
                f"no checkpoint of step {step} in {directory}: the steps saved are {steps}"
            )
        record.update(exists=True, config=spec.to_dict(), checkpoints=steps)
    print(json.dumps(record), flush=True)
    return record


def describe_plan(record: dict[str, Any]) -> str:
    """The lines ``--dry-run`` prints on stderr for a :func:`plan` record."""
    config = record["config"]
    mib = 1 / 2**20
    lines = [
        f"dry run: --arch {config['arch']} --agent {config['agent']} --env {config['env']} "
        f"--seed {config['seed']}",
        f"  devices: {record['devices']} {record['platform']} "
        f"({record['processes']} process{'es' if record['processes'] > 1 else ''})",
        f"  {record['num_updates']} updates x {record['steps_per_update']} steps per update and "
        f"member = {record['total_steps']} steps",
        f"  state: {record['state_bytes'] * mib:.1f} MiB, of which replay buffers "
        f"{record['replay_bytes'] * mib:.1f} MiB",
        *([f"  memory: {record['memory']}"] if "memory" in record else []),
        f"  run directory: {record['run_dir']}"
        + (f" (resumed from update {record['resume_from']})" if "resume_from" in record else ""),
        "  nothing was compiled or written",
    ]
    return "\n".join(lines)
