"""The ``podracer`` command line: the command's module (:mod:`~podracer.cli.train`,
:mod:`~podracer.cli.sweep`, :mod:`~podracer.cli.evaluate`, :mod:`~podracer.cli.backtest`,
:mod:`podracer.runs.plotting`'s ``plot``) chosen, its arguments parsed once
(:mod:`podracer.cli.parse`), its errors turned into one line and an exit status.

``podracer train --arch LOOP --agent NAME --env ID [--env-param NAME=VALUE ...]
[--env-observe INDICES] [--total-timesteps N] [--seed S] [--run-dir DIR] [--config FILE]
[--agent.FIELD VALUE ...] [--arch.FIELD VALUE ...]``,
``podracer train --resume DIR [--total-timesteps N]``, ``podracer eval DIR [--episodes N]`` and
``podracer plot DIR... --out FILE.png``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from podracer.cli.parse import CLIError, parse_selectors, parse_sweep

TOP_USAGE = """usage: podracer COMMAND [ARGS]

commands:
  train    train an agent, or resume a run (podracer train --help)
  sweep    seeds and hyper-parameters: one vmapped program for Anakin (podracer sweep --help)
  eval     evaluate a saved run's checkpoint (podracer eval --help)
  plot     learning curves from run directories (podracer plot --help)
  backtest a trading run against buy-and-hold and equal weight (podracer backtest --help)
"""
COMMANDS = ("train", "sweep", "eval", "plot", "backtest")


def main(
    argv: Sequence[str] | None = None,
    *,
    cpu_cores: bool | None = None,
    supervise: bool | None = None,
) -> int:
    """The ``podracer`` program: ``argv`` defaults to the command line. ``cpu_cores`` (default:
    True for the command line, False for a given ``argv``, as when called in a process that has
    started JAX already) gives ``train`` and ``sweep`` one CPU device per core. ``supervise``
    (the same default) runs a multi-process run's process other than process 0 under
    :mod:`podracer.cli.supervisor`, which ends it with podracer's line if process 0 dies."""
    from podracer.cli.train import terminated
    from podracer.errors import ConfigError
    from podracer.loops.common import Diverged
    from podracer.runs.checkpoint import CheckpointError

    if cpu_cores is None:
        cpu_cores = argv is None
    if supervise is None:
        supervise = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(TOP_USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        return _run(command, rest, cpu_cores=cpu_cores, supervise=supervise)
    except Diverged as error:
        print(f"podracer: {error}", file=sys.stderr)
        return 1
    except (CLIError, ConfigError, CheckpointError) as error:
        # One line: a ConfigError raised while tracing (a size that does not divide) carries
        # the notes JAX appends after its message. Any other exception is a bug: traceback.
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"podracer: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        return 143 if terminated(stop) else 130


def _run(command: str, rest: list[str], *, cpu_cores: bool, supervise: bool) -> int:
    """``podracer COMMAND REST``: the command's arguments parsed once (``train``, ``sweep``),
    then its function; returns the exit status."""
    helping = "-h" in rest or "--help" in rest
    if any(a.split("=")[0] in ("--video", "--video-interval", "--video_interval") for a in rest):
        from podracer.envs.render.mujoco import prepare

        prepare()  # MuJoCo's headless OpenGL (EGL) chosen before any environment imports mujoco
    if command == "train":
        from podracer.cli import supervisor
        from podracer.cli.train import sigterm_as_interrupt, train, use_cpu_cores

        args = parse_selectors(rest)  # the one parse of the command line: every step reads it
        if cpu_cores and not helping:
            use_cpu_cores(args)
        if supervise and not helping and supervisor.wanted(args):
            return supervisor.run(args)
        with sigterm_as_interrupt():
            train(args)
        return 0
    if command == "sweep":
        from podracer.cli import sweep
        from podracer.cli.train import use_cpu_cores

        if helping:
            sweep.print_help()
            return 0
        args = parse_sweep(rest)
        if cpu_cores:
            use_cpu_cores(args.train)
        sweep.sweep(args)
        return 0
    if command == "eval":
        from podracer.cli.evaluate import evaluate

        evaluate(rest)
        return 0
    if command == "plot":
        from podracer.runs import plotting

        return plotting.main(rest)
    if command == "backtest":
        from podracer.cli import backtest

        backtest.main(rest)
        return 0
    raise CLIError(f"unknown command {command!r}: choose one of {', '.join(COMMANDS)}")


if __name__ == "__main__":
    sys.exit(main())
