"""The ``podracer`` command line.

``podracer train --arch LOOP --agent NAME --env ID [--env-param NAME=VALUE ...]
[--env-observe INDICES] [--total-timesteps N] [--seed S] [--run-dir DIR] [--config FILE]
[--agent.FIELD VALUE ...] [--arch.FIELD VALUE ...]``,
``podracer train --resume DIR [--total-timesteps N]``, ``podracer eval DIR [--episodes N]`` and
``podracer plot DIR... --out FILE.png``.

Parsing has two stages: the selectors (``--arch``, ``--agent``, ``--env``, run length, seed) are
read first; they choose the config dataclasses, whose every field tyro then exposes as
``--agent.<field>`` / ``--arch.<field>`` (kebab-case or snake_case). New selectors and new config
fields add flags without changing existing ones. Loops and agents come from their registries
(:mod:`podracer.loops`, :mod:`podracer.agents`); ``--agent module:attribute`` and
``--env module:attribute`` name a user's own.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NamedTuple

from podracer.util.validation import ArgumentParser

TOP_USAGE = """usage: podracer COMMAND [ARGS]

commands:
  train    train an agent, or resume a run (podracer train --help)
  sweep    seeds and hyper-parameters: one vmapped program for Anakin (podracer sweep --help)
  eval     evaluate a saved run's checkpoint (podracer eval --help)
  plot     learning curves from run directories (podracer plot --help)
  backtest a trading run against buy-and-hold and equal weight (podracer backtest --help)
"""

SELECTORS = ("arch", "agent", "env", "seed", "total_timesteps")
MULTI_PROCESS = ("coordinator", "num_processes", "process_id", "fault_timeout")
# The flag of every RunOptions field (a boolean's flag sets the value that is not its default);
# docs/config.md lists them (podracer.cli.reference).
OPTION_FLAGS = {
    "checkpoint_interval": "--checkpoint-interval N",
    "keep_checkpoints": "--keep-checkpoints K",
    "eval_interval": "--eval-interval N",
    "eval_episodes": "--eval-episodes N",
    "eval_greedy": "--eval-stochastic",
    "tensorboard": "--no-tensorboard",
    "wandb": "--wandb",
    "wandb_online": "--wandb-online",
    "check_finite": "--no-check-finite",
}


class CLIError(Exception):
    """A bad command line: printed as one line, exit code 2."""


def _selector_parser(agent_names: Sequence[str]) -> argparse.ArgumentParser:
    from podracer import loops
    from podracer.runs import RunOptions

    defaults = RunOptions()
    parser = ArgumentParser(
        prog="podracer train",
        add_help=False,
        allow_abbrev=False,
        description="Train an agent. Every config field is a flag: --agent.FIELD, --arch.FIELD.",
    )
    parser.add_argument("--arch", help=f"the loop: {', '.join(loops.names())} (anakin)")
    parser.add_argument(
        "--agent",
        metavar="NAME",
        help=f"the agent: {', '.join(agent_names)}, or module:SPEC of your own (ppo)",
    )
    parser.add_argument(
        "--env",
        metavar="ID",
        help="environment id, or module:make_env of your own (default: the agent's own)",
    )
    parser.add_argument(
        "--total-timesteps",
        "--total_timesteps",
        type=int,
        metavar="N",
        help="environment steps per seed (500000)",
    )
    parser.add_argument(
        "--seed", type=int, metavar="S", help="run seed (seeds seed..seed+N-1 for N seeds)"
    )
    parser.add_argument(
        "--env-param",
        "--env_param",
        dest="env_param",
        action="append",
        metavar="NAME=VALUE",
        help="set a parameter of the environment (repeatable): a field of a JAX environment's "
        "EnvParams (--env-param memory_length=10), a make keyword of an envpool or gymnasium one",
    )
    parser.add_argument(
        "--env-observe",
        "--env_observe",
        dest="env_observe",
        metavar="INDICES",
        help="keep these entries of a vector observation, e.g. 0,2 (all)",
    )
    parser.add_argument(
        "--population",
        type=int,
        default=None,
        metavar="P",
        help="tournament-based ensemble of P members (Anakin; --population.FIELD: its config)",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="a YAML or JSON file with any keys of config.json"
    )
    parser.add_argument(
        "--run-dir",
        "--run_dir",
        metavar="DIR",
        help="run directory (default runs/<env>-<agent>-<arch>-<time>)",
    )
    parser.add_argument("--resume", metavar="DIR", help="continue the run saved in DIR")
    parser.add_argument(
        "--resume-step",
        "--resume_step",
        type=int,
        metavar="STEP",
        help="the checkpoint to resume (the latest)",
    )
    for name, help_text in (
        ("checkpoint_interval", "updates between checkpoints (0: at the end and on Ctrl-C)"),
        ("keep_checkpoints", "checkpoints kept (the latest, plus the best by eval return)"),
        ("eval_interval", "updates between evaluations (0: none)"),
        ("eval_episodes", "episodes per evaluation and seed"),
    ):
        flag = name.replace("_", "-")
        parser.add_argument(
            f"--{flag}",
            f"--{name}",
            dest=name,
            type=int,
            metavar=OPTION_FLAGS[name].split()[1],
            help=f"{help_text} ({getattr(defaults, name)})",
        )
    parser.add_argument("--eval-stochastic", action="store_true", help="sample when evaluating")
    parser.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard events")
    parser.add_argument("--wandb", action="store_true", help="log to wandb too (offline)")
    parser.add_argument(
        "--wandb-online",
        "--wandb_online",
        action="store_true",
        help="log to wandb, synced to the server as it runs (implies --wandb)",
    )
    parser.add_argument(
        "--no-check-finite",
        "--no_check_finite",
        action="store_true",
        help="go on when a loss, gradient norm or parameter is not finite (the run stops)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        action="store_true",
        help="resolve and check everything, print the config and what would run (devices, "
        "updates, replay memory), then exit: nothing compiled or written",
    )
    multi = parser.add_argument_group(
        "several processes (one per host; see docs/scaling.md)",
        "Nothing to pass where JAX detects the cluster (SLURM, Cloud TPU). Every process prints "
        "the final JSON line; only process 0 prints progress.",
    )
    multi.add_argument("--coordinator", metavar="HOST:PORT", help="the address of process 0")
    multi.add_argument(
        "--num-processes", "--num_processes", type=int, metavar="N", help="processes in the run"
    )
    multi.add_argument(
        "--process-id", "--process_id", type=int, metavar="I", help="this process: 0..N-1"
    )
    multi.add_argument(
        "--fault-timeout",
        "--fault_timeout",
        type=float,
        metavar="SECONDS",
        help="seconds after which a dead or stuck process ends the others (default 60)",
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    return parser


class TrainArgs(NamedTuple):
    """A ``podracer train`` (or ``sweep``) command line parsed once: every helper of a command
    reads these selectors instead of parsing ``argv`` again."""

    argv: list[str]  # the arguments as given (without the command)
    selectors: argparse.Namespace  # the selector parser's values (None: not given)
    rest: list[str]  # what it left: --agent.FIELD, --arch.FIELD, --population.FIELD flags


def parse_selectors(argv: Sequence[str] | TrainArgs) -> TrainArgs:
    """``argv`` through the selector parser (:func:`_selector_parser`), once; a
    :class:`TrainArgs` already parsed is returned as it is."""
    if isinstance(argv, TrainArgs):
        return argv
    from podracer import agents

    argv = list(argv)
    selectors, rest = _selector_parser(list(agents.AGENTS)).parse_known_args(argv)
    return TrainArgs(argv, selectors, rest)


def train_flags() -> list[tuple[str, str]]:
    """``(flag, help)`` of the flags of ``podracer train`` that are not config fields, in the
    order of ``--help`` (for docs/config.md)."""
    from podracer import agents

    parser = _selector_parser(list(agents.AGENTS))
    out = []
    for action in parser._actions:  # argparse has no public way to list its arguments
        flag = next(f for f in action.option_strings if f.startswith("--"))
        if action.nargs != 0:
            flag += f" {action.metavar or action.dest.upper()}"
        out.append((flag, action.help or ""))
    return out


def _options(selectors, base) -> object:
    from podracer.runs import RunOptions

    values = dataclasses.asdict(base)
    for name in ("checkpoint_interval", "keep_checkpoints", "eval_interval", "eval_episodes"):
        if getattr(selectors, name) is not None:
            values[name] = getattr(selectors, name)
    if selectors.eval_stochastic:
        values["eval_greedy"] = False
    if selectors.no_tensorboard:
        values["tensorboard"] = False
    if selectors.no_check_finite:
        values["check_finite"] = False
    if selectors.wandb or selectors.wandb_online:
        values["wandb"] = True
    if selectors.wandb_online:
        values["wandb_online"] = True
    return RunOptions(**values)


def parse_train_args(argv: Sequence[str] | TrainArgs):
    """``(selectors, agent_config, arch_config)`` from a ``podracer train`` command line (or
    its :class:`TrainArgs`, parsed once by :func:`parse_selectors`).

    Values come from, in increasing priority: the defaults, ``--config FILE``, the flags.
    ``selectors.options`` is the resolved :class:`~podracer.runs.RunOptions`;
    ``selectors.agent_spec`` the agent's :class:`~podracer.agents.AgentSpec`, resolved here once.
    """
    import tyro

    from podracer import agents
    from podracer.loops.presets import describe, preset_for
    from podracer.runs import RunOptions, dataclass_from_dict, load_config_file

    parsed = parse_selectors(argv)
    selectors = argparse.Namespace(**vars(parsed.selectors))  # filled in below
    rest = list(parsed.rest)
    file = load_config_file(selectors.config) if selectors.config else {}
    where = f"--config={selectors.config}"
    sections = ("agent_config", "arch_config", "options", "population", "env_options")
    unknown = sorted(set(file) - {*SELECTORS, *sections})
    if unknown:
        raise CLIError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
            f"{', '.join(SELECTORS)}, {', '.join(sections)}"
        )
    for name, default in zip(SELECTORS, ("anakin", "ppo", None, 0, 500_000), strict=True):
        if getattr(selectors, name) is None:
            setattr(selectors, name, file.get(name, default))
    from podracer import loops

    if selectors.arch not in loops.names():
        raise CLIError(
            f"--arch={selectors.arch!r} is not allowed: choose one of {', '.join(loops.names())}"
        )
    loop = loops.get(selectors.arch)
    if ":" not in selectors.agent and selectors.agent not in agents.AGENTS:
        raise CLIError(
            f"--agent={selectors.agent!r} is not allowed: choose one of "
            f"{', '.join(agents.AGENTS)}, or module:SPEC (an AgentSpec of your own)"
        )
    agent_spec = agents.get(selectors.agent)
    selectors.agent_spec = agent_spec
    if selectors.total_timesteps <= 0:
        raise CLIError(
            f"--total-timesteps={selectors.total_timesteps} is not allowed: it must be > 0"
        )
    if selectors.env is None:
        selectors.env = loop.default_env(agent_spec)
    arch_cls = loop.config_cls
    arch_defaults = loops.loop_defaults(agent_spec, loop)
    preset = preset_for(agent_spec, selectors.env, loop)
    agent_preset = {}
    if preset is not None:
        arch_defaults.update(preset.loop)
        agent_preset = dict(preset.agent)
        if not selectors.help:
            print(describe(preset, selectors.agent, selectors.env), file=sys.stderr)
    agent_default = dataclass_from_dict(
        agent_spec.config_cls,
        {**agent_preset, **file.get("agent_config", {})},
        f"{where}: agent_config",
    )
    arch_default = dataclass_from_dict(
        arch_cls, {**arch_defaults, **file.get("arch_config", {})}, f"{where}: arch_config"
    )
    selectors.options = _options(
        selectors, dataclass_from_dict(RunOptions, file.get("options", {}), f"{where}: options")
    )
    if not selectors.help:
        selectors.env_options = _env_options(selectors, file, where)

    fields = [
        ("agent", agent_spec.config_cls, dataclasses.field(default=agent_default)),
        ("arch", arch_cls, dataclasses.field(default=arch_default)),
    ]
    population_default = _population_default(selectors, file, where)
    if population_default is not None:
        from podracer.population.tournament import PopulationConfig

        fields.append(
            ("population", PopulationConfig, dataclasses.field(default=population_default))
        )
    elif any(a.startswith("--population.") for a in rest):
        raise CLIError("--population.FIELD needs --population P (the number of members) before it")
    spec = dataclasses.make_dataclass("TrainConfig", fields, frozen=True)
    if not selectors.help:
        check_field_flags(rest, {name: cls for name, cls, _ in fields}, selectors)
    if selectors.help:
        _selector_parser(list(agents.AGENTS)).print_help()
        print()
        rest = [*rest, "--help"]
    parsed = tyro.cli(
        spec,
        args=rest,
        prog=f"podracer train --arch {selectors.arch} --agent {selectors.agent}",
        description=f"Config fields of --arch {selectors.arch} and --agent {selectors.agent}.",
        config=(tyro.conf.FlagConversionOff,),
    )
    population = getattr(parsed, "population", None)
    # Its default was built unchecked (_population_default): the parsed value is checked here.
    selectors.population_config = None if population is None else dataclasses.replace(population)
    arch_config = parsed.arch
    if selectors.population_config is not None:
        if not loop.members_in_one_program:
            raise CLIError(
                f"--population is not allowed with --arch {selectors.arch}: a population "
                "trains its members as one program"
            )
        arch_config = loop.with_members(arch_config, selectors.population_config.size)
    return selectors, parsed.agent, arch_config


def _env_options(selectors, file, where):
    """The run's :class:`~podracer.envs.EnvOptions`: ``--config``'s ``env_options``, then
    ``--env-param`` (added, replacing a name the file sets) and ``--env-observe`` (replacing the
    file's), the values typed by the environment's defaults
    (:func:`podracer.envs.options.resolve`); a bad name, value or index is a one-line error."""
    from podracer.envs.options import EnvOptions, parse_indices, parse_params, resolve

    options = EnvOptions.from_dict(file.get("env_options"), f"{where}: env_options")
    observe = None if selectors.env_observe is None else parse_indices(selectors.env_observe)
    options = options.merged(parse_params(selectors.env_param or ()), observe)
    return resolve(selectors.env, options)


def run_spec(argv: Sequence[str] | TrainArgs):
    """``(RunSpec, selectors)`` of a ``podracer train`` (or ``sweep``) command line or its
    :class:`TrainArgs`; the spec carries the resolved agent spec (``RunSpec.agent_spec``)."""
    from podracer.runs import RunSpec

    selectors, agent_config, arch_config = parse_train_args(argv)
    spec = RunSpec(
        arch=selectors.arch,
        agent=selectors.agent,
        agent_spec=selectors.agent_spec,
        env=selectors.env,
        seed=selectors.seed,
        total_timesteps=selectors.total_timesteps,
        agent_config=agent_config,
        arch_config=arch_config,
        options=selectors.options,
        population=selectors.population_config,
        env_options=selectors.env_options,
    )
    return spec, selectors


def _parse_bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(text)
    return text == "True"


_PARSE = {
    int: ("an integer", int),
    float: ("a number", float),
    bool: ("True or False", _parse_bool),
}


def check_field_flags(args: Sequence[str], classes: dict[str, type], selectors) -> None:
    """``--PREFIX.FIELD VALUE`` flags checked before tyro parses them: an unknown field, or a
    value its field's type cannot take, is a :class:`CLIError` naming the flag and what it
    takes (tyro would draw a box of help around it)."""
    import difflib
    import typing

    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        prefix, dot, rest = arg.removeprefix("--").partition(".")
        if not arg.startswith("--") or not dot or prefix not in classes:
            raise CLIError(f"unrecognized argument {arg!r}: podracer train --help lists the flags")
        cls = classes[prefix]
        name, has_value, inline = rest.partition("=")
        field = name.replace("-", "_")
        hints = typing.get_type_hints(cls)
        if field not in hints:
            flags = [f"--{prefix}.{f.replace('_', '-')}" for f in hints]
            close = difflib.get_close_matches(f"--{prefix}.{name}", flags, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise CLIError(
                f"--{prefix}.{name} is not a field of {cls.__name__}: {hint}podracer train "
                f"--arch {selectors.arch} --agent {selectors.agent} --help lists them"
            )
        kind = hints[field]
        many = typing.get_origin(kind) is tuple
        item = typing.get_args(kind)[0] if many else kind
        if has_value:
            values = [inline]
        else:
            values = []
            while i < len(args) and not args[i].startswith("--") and (many or not values):
                values.append(args[i])
                i += 1
        if item not in _PARSE:
            continue  # strings
        what, parse = _PARSE[item]
        for value in values:
            try:
                parse(value)
            except ValueError:
                raise CLIError(
                    f"--{prefix}.{name}={value!r} is not allowed: {cls.__name__}.{field} takes "
                    f"{what}{' per item' if many else ''}"
                ) from None


def _population_default(selectors, file, where):
    """The PopulationConfig defaults: ``--config``'s ``population`` section, then
    ``--population P`` as its size; None when neither is given."""
    if selectors.population is None and file.get("population") is None:
        return None
    from podracer.population.tournament import PopulationConfig
    from podracer.runs import dataclass_from_dict

    values = dict(file.get("population") or {})
    if selectors.population is not None:
        values["size"] = selectors.population
    return dataclass_from_dict(PopulationConfig, values, f"{where}: population", checked=False)


def _resume_spec(argv: Sequence[str] | TrainArgs):
    """``(selectors, spec, run_dir)`` for ``podracer train --resume DIR [--total-timesteps N]``."""
    from podracer.runs import load_spec

    selectors, rest = parse_selectors(argv)[1:]
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


def _initialize(argv: Sequence[str] | TrainArgs) -> None:
    """Joins the processes of a multi-process run, before any JAX computation (nothing to do
    for one process)."""
    from podracer import parallel

    args, options = _process_flags(argv)
    parallel.initialize(*args, **options)


def _process_flags(argv: Sequence[str] | TrainArgs):
    """``(coordinator, num_processes, process_id), {"timeout_s": ...}`` of a command line."""
    selectors = parse_selectors(argv).selectors
    args = (selectors.coordinator, selectors.num_processes, selectors.process_id)
    return args, {"timeout_s": selectors.fault_timeout}


def process_setup(argv: Sequence[str] | TrainArgs):
    """The :class:`~podracer.parallel.ProcessSetup` of a command line: its process flags
    checked as :func:`_initialize` checks them, without joining."""
    from podracer import parallel

    args, options = _process_flags(argv)
    return parallel.resolve(*args, **options)


def _check_run_dir(argv: Sequence[str] | TrainArgs) -> None:
    """The run directory checked by every process before the processes join
    (:func:`podracer.runs.check_run_dir`), so none has written into it yet."""
    from podracer import runs

    selectors = parse_selectors(argv).selectors
    if selectors.resume is not None:
        runs.check_run_dir(selectors.resume, resume=True, flag="--resume")
    elif selectors.run_dir is not None:
        runs.check_run_dir(selectors.run_dir, resume=False)


DRY_RUN = ("--dry-run", "--dry_run")


def _dry_run(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether ``argv`` asks for a dry run, and ``argv`` without the flag."""
    rest = [a for a in argv if a not in DRY_RUN]
    return len(rest) != len(argv), rest


def _print_plan(record: dict) -> None:
    from podracer.runs import describe_plan

    print(describe_plan(record), file=sys.stderr)
    print(json.dumps(record), flush=True)


def _resuming(args: TrainArgs) -> bool:
    return args.selectors.resume is not None


def train_dry_run(argv: Sequence[str] | TrainArgs) -> dict:
    """``podracer train ... --dry-run``: everything a run resolves and checks (agent,
    environment, loop, every flag, the run directory; a resume's checkpoint), with the same
    one-line errors, then the plan (:func:`podracer.runs.plan`) on stderr and as a JSON line;
    nothing is compiled, written or joined (the processes of a multi-process run are not
    contacted: the devices are this process's)."""
    from podracer import runs

    args = parse_selectors(argv)
    _check_run_dir(args)
    process_setup(args)
    if _resuming(args):
        selectors, spec, run_dir = _resume_spec(args)
        record = runs.dry_run(spec, run_dir, resume=True, resume_step=selectors.resume_step)
    else:
        spec, selectors = run_spec(args)
        run_dir = selectors.run_dir or runs.default_run_dir(spec)
        record = runs.dry_run(spec, run_dir)
    _print_plan(record)
    return record


def train(argv: Sequence[str] | TrainArgs) -> dict:
    """``podracer train``: ``argv`` (or its :class:`TrainArgs`) parsed once and every step
    (run directory, processes, spec, run) reading that one parse; ``--pods`` or ``--cluster``
    hand the command line to the elastic tournament on Ray (:mod:`podracer.experiments.elastic`)."""
    from podracer.experiments import elastic
    from podracer import parallel
    from podracer import runs

    args = parse_selectors(argv)
    if elastic.wanted(args.argv):  # --pods, --cluster: the elastic tournament on Ray
        return elastic.train_cli(args.argv)
    if args.selectors.dry_run:
        return train_dry_run(args)
    _check_run_dir(args)
    _initialize(args)
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


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, ``kill``) in a single-process run: handled as Ctrl-C is, so
    the state the run has reached is saved; the exit status is 143 (128 + SIGTERM), as a
    process killed by it. A process of a multi-process run ends at once, as before."""


def _terminated(stop: BaseException) -> bool:
    return isinstance(stop, Terminated) or isinstance(stop.__cause__, Terminated)


@contextlib.contextmanager
def _sigterm_as_interrupt():
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

    what = "terminated (SIGTERM)" if _terminated(stop) else "interrupted"
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


SWEEP_HELP = """usage: podracer sweep [TRAIN FLAGS] [--seeds N] [--sweep.FIELD V1,V2,...]

Every combination of the swept values, each with N seeds (--seeds, default 1). On a loop that
runs members as one program (--arch anakin) the whole grid is one vmapped program
(hyper-parameters are traced values, one compile); on the others (--arch sebulba) the members
run one after another. Prints the table over seeds (mean, median, IQM and its bootstrap 95% CI)
on stderr and one JSON line per combination on stdout; the run directory gets config.json,
metrics.jsonl (one curve per member) and results.json (podracer plot draws one curve per
combination from it).

sweepable fields: {fields}
"""


class SweepArgs(NamedTuple):
    """A ``podracer sweep`` command line parsed once: the grid's flags taken out, the rest
    parsed as ``podracer train``'s (:class:`TrainArgs`)."""

    dry: bool  # --dry-run
    values: dict[str, tuple[float, ...]]  # --sweep.FIELD values
    seeds: int  # --seeds
    train: TrainArgs


def parse_sweep(argv: Sequence[str] | SweepArgs) -> SweepArgs:
    """``podracer sweep``'s ``argv``: ``--dry-run``, ``--sweep.FIELD`` and ``--seeds`` taken
    out, the rest through :func:`parse_selectors` once; a :class:`SweepArgs` is returned as it
    is."""
    if isinstance(argv, SweepArgs):
        return argv
    from podracer.experiments import sweep as sweeps

    dry, argv = _dry_run(argv)
    values, rest = sweeps.parse_sweep_flags(argv)
    seeds = 1
    if "--seeds" in rest:
        i = rest.index("--seeds")
        try:
            seeds = int(rest[i + 1])
        except (IndexError, ValueError) as error:
            raise CLIError("--seeds needs an integer, e.g. --seeds 4") from error
        rest = rest[:i] + rest[i + 2 :]
    return SweepArgs(dry, values, seeds, parse_selectors(rest))


def sweep(argv: Sequence[str] | SweepArgs) -> list[dict]:
    from podracer import runs
    from podracer.util import stats
    from podracer.experiments import sweep as sweeps

    given = argv.train.argv if isinstance(argv, SweepArgs) else argv
    if "-h" in given or "--help" in given:
        from podracer import agents

        fields = "; ".join(
            f"{name}: {', '.join(sweeps.sweepable(spec))}" for name, spec in agents.AGENTS.items()
        )
        print(SWEEP_HELP.format(fields=fields), end="")
        return []
    args = parse_sweep(argv)
    dry, rest = args.dry, args.train
    grid = sweeps.Grid(values=args.values, seeds=args.seeds)
    _check_run_dir(rest)
    spec, selectors = run_spec(rest)
    if spec.population is not None:
        raise CLIError("--population is not allowed in a sweep: use podracer train --population")
    if selectors.resume or selectors.resume_step is not None:
        raise CLIError(
            "--resume is not allowed in a sweep: a sweep always starts afresh; resume one of "
            "its runs with podracer train --resume DIR"
        )
    sweeps.check_grid(spec.agent_spec, spec.agent_config, grid)
    run_dir = selectors.run_dir or runs.default_run_dir(spec, kind="sweep")
    if dry:
        process_setup(rest)
        grid_record = {"sweep": {k: list(v) for k, v in grid.values.items()}, "seeds": grid.seeds}
        _print_plan(runs.plan(sweeps.first_system(spec, grid), spec, run_dir, **grid_record))
        return []
    runs.check_processes_agree(
        spec, run_dir, sweep={k: list(v) for k, v in grid.values.items()}, seeds=grid.seeds
    )
    combos = sweeps.run_sweep(spec, grid, run_dir, console=not selectors.quiet)
    columns = [*grid.values, "n", "mean", "median", "iqm", "iqm_ci_low", "iqm_ci_high"]
    print(stats.format_table(combos, columns), file=sys.stderr)
    for row in combos:
        print(json.dumps(row), flush=True)
    return combos


def evaluate(argv: Sequence[str]) -> dict:
    parser = ArgumentParser(prog="podracer eval", description="Evaluate a saved run's checkpoint.")
    parser.add_argument("run_dir", help="a run directory (podracer train --run-dir)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes (per seed)")
    parser.add_argument("--stochastic", action="store_true", help="sample actions (not greedy)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="the checkpoint to evaluate (the latest)")
    which.add_argument(
        "--best", action="store_true", help="the checkpoint of the best evaluation return"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the flags and the run directory's config, then exit: nothing evaluated",
    )
    args = parser.parse_args(list(argv))
    if args.episodes < 1:
        raise CLIError(f"--episodes={args.episodes} is not allowed: it must be >= 1")
    if args.dry_run:
        from podracer.runs import dry_run_saved

        return dry_run_saved("eval", args.run_dir, step=args.step)
    from podracer.experiments import elastic
    from podracer.runs import evaluate_run

    if elastic.is_elastic_run(args.run_dir):  # the best member the leaderboard kept
        result = elastic.evaluate_best(
            args.run_dir, episodes=args.episodes, greedy=not args.stochastic
        )
        print(json.dumps(result), flush=True)
        return result
    result = evaluate_run(
        args.run_dir,
        episodes=args.episodes,
        greedy=not args.stochastic,
        step=args.step,
        best=args.best,
    )
    print(json.dumps(result), flush=True)
    return result


def _use_cpu_cores(argv: Sequence[str] | TrainArgs) -> None:
    """One XLA:CPU device per core for a single-process run, before JAX starts
    (:func:`podracer.parallel.use_cpu_cores`), so that Anakin's members run side by side on
    them; a multi-process run keeps the devices each process has."""
    from podracer import parallel

    selectors = parse_selectors(argv).selectors
    setup = parallel.resolve(selectors.coordinator, selectors.num_processes, selectors.process_id)
    if setup.source == "single":
        parallel.use_cpu_cores()


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
    from podracer.runs.checkpoint import CheckpointError
    from podracer.errors import ConfigError
    from podracer.loops.common import Diverged

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
        helping = "-h" in rest or "--help" in rest
        if command in ("train", "sweep") and not helping:
            # The one parse of the command line: every step below reads it.
            rest = parse_selectors(rest) if command == "train" else parse_sweep(rest)
            if cpu_cores:
                _use_cpu_cores(rest if command == "train" else rest.train)
        if command == "train" and supervise:
            from podracer.cli import supervisor

            if supervisor.wanted(rest):
                return supervisor.run(rest)
        if command == "train":
            with _sigterm_as_interrupt():
                train(rest)
            return 0
        if command == "eval":
            evaluate(rest)
            return 0
        if command == "sweep":
            sweep(rest)
            return 0
        if command == "plot":
            from podracer.runs import plotting

            return plotting.main(rest)
        if command == "backtest":
            from podracer.cli import backtest

            backtest.main(rest)
            return 0
        raise CLIError(
            f"unknown command {command!r}: choose one of train, sweep, eval, plot, backtest"
        )
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
        return 143 if _terminated(stop) else 130


if __name__ == "__main__":
    # podracer.cli.main's own main, not this __main__ copy's: the supervisor and the other modules
    # import podracer.cli.main, and a command line parsed here (TrainArgs) must be of their class.
    from podracer.cli.main import main as _main

    sys.exit(_main())
