"""The one parse of a ``podracer train`` or ``podracer sweep`` command line.

Parsing has two stages: the selectors (``--arch``, ``--agent``, ``--env``, run length, seed) are
read first (:func:`parse_selectors`, once per command line: every later step reads its
:class:`TrainArgs`); they choose the config dataclasses, whose every field tyro then exposes as
``--agent.<field>`` / ``--arch.<field>`` (kebab-case or snake-case, :func:`parse_train_args`).
New selectors and new config fields add flags without changing existing ones. Loops and agents
come from their registries (:mod:`podracer.loops`, :mod:`podracer.agents`); ``--agent
module:attribute`` and ``--env module:attribute`` name a user's own. A sweep first takes out its
grid's flags (:func:`parse_sweep`), an elastic run its pods' (:func:`parse_elastic`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from podracer.util.validation import ArgumentParser

SELECTORS = ("arch", "agent", "env", "seed", "total_timesteps")
SELECTOR_DEFAULTS = ("anakin", "ppo", None, 0, 500_000)
MULTI_PROCESS = ("coordinator", "num_processes", "process_id", "fault_timeout")
# The flag of every RunOptions field (a boolean's flag sets the value that is not its default);
# docs/config.md lists them (podracer.cli.reference).
OPTION_FLAGS = {
    "checkpoint_interval": "--checkpoint-interval N",
    "keep_checkpoints": "--keep-checkpoints K",
    "eval_interval": "--eval-interval N",
    "eval_episodes": "--eval-episodes N",
    "eval_greedy": "--eval-stochastic",
    "video_interval": "--video-interval N",
    "tensorboard": "--no-tensorboard",
    "wandb": "--wandb",
    "wandb_online": "--wandb-online",
    "check_finite": "--no-check-finite",
}
DRY_RUN = ("--dry-run", "--dry_run")


class CLIError(Exception):
    """A bad command line: printed as one line, exit code 2."""


# --- the selector parser -------------------------------------------------------------------------


def _selector_parser(agent_names: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of ``podracer train``'s own flags (every flag but the config fields')."""
    parser = ArgumentParser(
        prog="podracer train",
        add_help=False,
        allow_abbrev=False,
        description="Train an agent. Every config field is a flag: --agent.FIELD, --arch.FIELD.",
    )
    _add_run_flags(parser, agent_names)
    _add_option_flags(parser)
    _add_process_flags(parser)
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    return parser


def _add_run_flags(parser: argparse.ArgumentParser, agent_names: Sequence[str]) -> None:
    """The selectors, the environment's options, the population, the config file and the run
    directory."""
    from podracer import loops

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
        help="environment steps per seed (500000, or the preset's where it sets one)",
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
    for flag, metavar, help_text in (
        ("run-dir", "DIR", "run directory (default runs/<env>-<agent>-<arch>-<time>)"),
        ("resume", "DIR", "continue the run saved in DIR"),
        ("resume-step", "STEP", "the checkpoint to resume (the latest)"),
    ):
        spellings = [f"--{flag}", f"--{flag.replace('-', '_')}"] if "-" in flag else [f"--{flag}"]
        kind = int if metavar == "STEP" else str
        parser.add_argument(*spellings, type=kind, metavar=metavar, help=help_text)


def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the run options (:data:`OPTION_FLAGS`), ``--quiet`` and ``--dry-run``."""
    from podracer.runs import RunOptions

    defaults = RunOptions()
    for name, help_text in (
        ("checkpoint_interval", "updates between checkpoints (0: at the end and on Ctrl-C)"),
        ("keep_checkpoints", "checkpoints kept (the latest, plus the best by eval return)"),
        ("eval_interval", "updates between evaluations (0: none)"),
        ("eval_episodes", "episodes per evaluation and seed"),
        ("video_interval", "updates between videos of a greedy episode (0: none)"),
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
        *DRY_RUN,
        action="store_true",
        help="resolve and check everything, print the config and what would run (devices, "
        "updates, replay memory), then exit: nothing compiled or written",
    )


def _add_process_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run of several processes."""
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


# --- the one parse -------------------------------------------------------------------------------


class TrainArgs(NamedTuple):
    """A ``podracer train`` (or ``sweep``) command line parsed once: every helper of a command
    reads these selectors instead of parsing ``argv`` again."""

    argv: list[str]  # the arguments as given (without the command)
    selectors: argparse.Namespace  # the selector parser's values (None: not given)
    rest: list[str]  # what it left: --agent.FIELD, --arch.FIELD, --population.FIELD flags


def parse_selectors(argv: Sequence[str]) -> TrainArgs:
    """``argv`` (without the command) through the selector parser, once."""
    from podracer import agents

    argv = list(argv)
    selectors, rest = _selector_parser(list(agents.AGENTS)).parse_known_args(argv)
    return TrainArgs(argv, selectors, rest)


def process_setup(args: TrainArgs):
    """The :class:`~podracer.parallel.ProcessSetup` of a command line: its process flags
    checked as :func:`podracer.parallel.initialize` checks them, without joining."""
    from podracer import parallel

    return parallel.resolve(*process_flags(args), timeout_s=args.selectors.fault_timeout)


def process_flags(args: TrainArgs) -> tuple[Any, Any, Any]:
    """``(coordinator, num_processes, process_id)`` of a command line (None: not given)."""
    selectors = args.selectors
    return selectors.coordinator, selectors.num_processes, selectors.process_id


class SweepArgs(NamedTuple):
    """A ``podracer sweep`` command line parsed once: the grid's flags taken out, the rest
    parsed as ``podracer train``'s (:class:`TrainArgs`)."""

    dry: bool  # --dry-run
    values: dict[str, tuple[float, ...]]  # --sweep.FIELD values
    seeds: int  # --seeds
    train: TrainArgs


def parse_sweep(argv: Sequence[str]) -> SweepArgs:
    """``podracer sweep``'s ``argv``: ``--dry-run``, ``--sweep.FIELD`` and ``--seeds`` taken
    out, the rest through :func:`parse_selectors` once."""
    from podracer.experiments import sweep as sweeps

    rest = [a for a in argv if a not in DRY_RUN]
    dry = len(rest) != len(argv)
    values, rest = sweeps.parse_sweep_flags(rest)
    seeds = 1
    if "--seeds" in rest:
        i = rest.index("--seeds")
        try:
            seeds = int(rest[i + 1])
        except (IndexError, ValueError) as error:
            raise CLIError("--seeds needs an integer, e.g. --seeds 4") from error
        rest = rest[:i] + rest[i + 2 :]
    return SweepArgs(dry, values, seeds, parse_selectors(rest))


# --- the configs ---------------------------------------------------------------------------------


def parse_train_args(args: TrainArgs):
    """``(selectors, agent_config, arch_config)`` of a ``podracer train`` command line parsed
    once (:func:`parse_selectors`).

    Values come from, in increasing priority: the defaults, ``--config FILE``, the flags.
    ``selectors.options`` is the resolved :class:`~podracer.runs.RunOptions`;
    ``selectors.agent_spec`` the agent's :class:`~podracer.agents.AgentSpec`, resolved here once.
    """
    from podracer.runs import load_config_file

    selectors = argparse.Namespace(**vars(args.selectors))  # filled in below
    rest = list(args.rest)
    file = load_config_file(selectors.config) if selectors.config else {}
    where = f"--config={selectors.config}"
    loop = _resolve_selectors(selectors, file, where)
    fields = _config_fields(selectors, loop, file, where, rest)
    parsed = _parse_fields(selectors, fields, rest)
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


def _resolve_selectors(selectors: argparse.Namespace, file: dict, where: str):
    """The selectors' values (flag, else ``--config``'s key, else the default) checked, the
    agent's spec resolved (``selectors.agent_spec``) and the environment defaulted; returns the
    loop."""
    from podracer import agents, loops

    sections = ("agent_config", "arch_config", "options", "population", "env_options")
    unknown = sorted(set(file) - {*SELECTORS, *sections})
    if unknown:
        raise CLIError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
            f"{', '.join(SELECTORS)}, {', '.join(sections)}"
        )
    # A preset may set the run's length where neither the flag nor the file does.
    selectors.total_timesteps_given = (
        selectors.total_timesteps is not None or "total_timesteps" in file
    )
    for name, default in zip(SELECTORS, SELECTOR_DEFAULTS, strict=True):
        if getattr(selectors, name) is None:
            setattr(selectors, name, file.get(name, default))
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
    selectors.agent_spec = agents.get(selectors.agent)
    if selectors.total_timesteps <= 0:
        raise CLIError(
            f"--total-timesteps={selectors.total_timesteps} is not allowed: it must be > 0"
        )
    if selectors.env is None:
        selectors.env = loop.default_env(selectors.agent_spec)
    return loop


def _config_fields(selectors, loop, file: dict, where: str, rest: Sequence[str]) -> list:
    """The fields of the run's config dataclass, ``(name, class, field with its default)``: the
    agent's and the loop's (defaults, the preset for this agent and environment, ``--config``'s
    sections), and the population's when there is one. Sets ``selectors.options`` and
    ``selectors.env_options`` (not for ``--help``)."""
    from podracer import loops
    from podracer.loops.presets import describe, preset_for
    from podracer.runs import RunOptions, dataclass_from_dict

    agent_spec = selectors.agent_spec
    arch_defaults = loops.loop_defaults(agent_spec, loop)
    preset = preset_for(agent_spec, selectors.env, loop, _has_memory(agent_spec, file, rest))
    agent_preset = {}
    if preset is not None:
        arch_defaults.update(preset.loop)
        agent_preset = dict(preset.agent)
        if preset.total_timesteps is not None and not selectors.total_timesteps_given:
            selectors.total_timesteps = preset.total_timesteps
        if not selectors.help:
            print(describe(preset, selectors.agent, selectors.env), file=sys.stderr)
    agent_default = dataclass_from_dict(
        agent_spec.config_cls,
        {**agent_preset, **file.get("agent_config", {})},
        f"{where}: agent_config",
    )
    arch_default = dataclass_from_dict(
        loop.config_cls, {**arch_defaults, **file.get("arch_config", {})}, f"{where}: arch_config"
    )
    selectors.options = _options(
        selectors, dataclass_from_dict(RunOptions, file.get("options", {}), f"{where}: options")
    )
    if not selectors.help:
        selectors.env_options = _env_options(selectors, file, where)
    fields = [
        ("agent", agent_spec.config_cls, dataclasses.field(default=agent_default)),
        ("arch", loop.config_cls, dataclasses.field(default=arch_default)),
    ]
    population_default = _population_default(selectors, file, where)
    if population_default is not None:
        from podracer.population.ensemble import PopulationConfig

        fields.append(
            ("population", PopulationConfig, dataclasses.field(default=population_default))
        )
    elif any(a.startswith("--population.") for a in rest):
        raise CLIError("--population.FIELD needs --population P (the number of members) before it")
    return fields


def _has_memory(agent_spec, file: dict, rest: Sequence[str]) -> bool:
    """Whether the run's agent has memory (its ``memory`` field, from ``--agent.memory``, else
    ``--config``'s ``agent_config``, else the config's default, is not ``"none"``): a preset's
    ``"memory"`` sections apply then (:func:`podracer.loops.presets.preset_for`)."""
    value = None
    for i, arg in enumerate(rest):
        if arg.startswith("--agent.memory="):
            value = arg.split("=", 1)[1]
        elif arg == "--agent.memory" and i + 1 < len(rest):
            value = rest[i + 1]
    if value is None:
        value = file.get("agent_config", {}).get("memory")
    if value is None:
        default = getattr(agent_spec.config_cls, "memory", None)
        value = default if isinstance(default, str) else "none"
    return value != "none"


def _parse_fields(selectors, fields: list, rest: list[str]):
    """The config flags (``--agent.FIELD``, ``--arch.FIELD``, ``--population.FIELD``) checked
    (:func:`check_field_flags`) and parsed by tyro into the ``fields``' dataclass; ``--help``
    prints the selectors' help, then tyro's, and exits."""
    import tyro

    from podracer import agents

    spec = dataclasses.make_dataclass("TrainConfig", fields, frozen=True)
    if not selectors.help:
        check_field_flags(rest, {name: cls for name, cls, _ in fields}, selectors)
    if selectors.help:
        _selector_parser(list(agents.AGENTS)).print_help()
        print()
        rest = [*rest, "--help"]
    return tyro.cli(
        spec,
        args=rest,
        prog=f"podracer train --arch {selectors.arch} --agent {selectors.agent}",
        description=f"Config fields of --arch {selectors.arch} and --agent {selectors.agent}.",
        config=(tyro.conf.FlagConversionOff,),
    )


def _options(selectors, base) -> object:
    """The :class:`~podracer.runs.RunOptions`: ``base`` (the defaults and ``--config``'s) with
    the option flags given."""
    from podracer.runs import RunOptions

    values = dataclasses.asdict(base)
    for name in (
        "checkpoint_interval",
        "keep_checkpoints",
        "eval_interval",
        "eval_episodes",
        "video_interval",
    ):
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


def _env_options(selectors, file, where):
    """The run's :class:`~podracer.envs.EnvOptions`: ``--config``'s ``env_options``, then
    ``--env-param`` (added, replacing a name the file sets) and ``--env-observe`` (replacing the
    file's), the values typed by the environment's defaults
    (:func:`podracer.envs.factory.resolve`); a bad name, value or index is a one-line error."""
    from podracer.envs.factory import resolve
    from podracer.envs.options import EnvOptions, parse_indices, parse_params

    options = EnvOptions.from_dict(file.get("env_options"), f"{where}: env_options")
    observe = None if selectors.env_observe is None else parse_indices(selectors.env_observe)
    options = options.merged(parse_params(selectors.env_param or ()), observe)
    return resolve(selectors.env, options)


def _population_default(selectors, file, where):
    """The PopulationConfig defaults: ``--config``'s ``population`` section, then
    ``--population P`` as its size; None when neither is given."""
    if selectors.population is None and file.get("population") is None:
        return None
    from podracer.population.ensemble import PopulationConfig
    from podracer.runs import dataclass_from_dict

    values = dict(file.get("population") or {})
    if selectors.population is not None:
        values["size"] = selectors.population
    return dataclass_from_dict(PopulationConfig, values, f"{where}: population", checked=False)


def run_spec(args: TrainArgs):
    """``(RunSpec, selectors)`` of a ``podracer train`` (or ``sweep``) command line parsed once
    (:func:`parse_selectors`); the spec carries the resolved agent spec
    (``RunSpec.agent_spec``)."""
    from podracer.runs import RunSpec

    selectors, agent_config, arch_config = parse_train_args(args)
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


# --- an elastic run's flags ----------------------------------------------------------------------

ELASTIC_FLAGS = ("--pods", "--cluster")


class ElasticArgs(NamedTuple):
    """The flags of an elastic run (``podracer train ... --pods N --cluster ray``,
    :mod:`podracer.experiments.elastic`), taken out of a parsed command line's rest."""

    pods: str | None  # --pods as given (None: not given)
    cluster: str | None  # --cluster as given
    fields: dict[str, Any]  # --elastic.FIELD values, typed as ElasticConfig's fields
    train: TrainArgs  # the command line without them


def elastic_wanted(args: TrainArgs) -> bool:
    """Whether ``podracer train`` is an elastic run: ``--pods`` or ``--cluster`` given, or
    ``--resume DIR`` of a directory that holds an elastic run (its ``elastic.json``)."""
    from podracer.experiments.elastic import is_elastic_run

    if {a.split("=")[0] for a in args.rest} & set(ELASTIC_FLAGS):
        return True
    resume = args.selectors.resume
    return resume is not None and is_elastic_run(resume)


def parse_elastic(args: TrainArgs) -> ElasticArgs:
    """``--elastic.FIELD``, ``--pods`` and ``--cluster`` out of the rest of ``args`` (the
    selector parser leaves them there)."""
    fields, rest = _elastic_fields(args.rest)
    pods, cluster = (_flag_value(rest, flag) for flag in ELASTIC_FLAGS)
    rest = _without(rest, ELASTIC_FLAGS)
    return ElasticArgs(pods, cluster, fields, args._replace(rest=rest))


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _without(argv: list[str], flags: Sequence[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if any(a.startswith(f + "=") for f in flags):
            continue
        out.append(a)
    return out


def _elastic_fields(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``--elastic.FIELD VALUE`` (or ``=VALUE``) flags as ElasticConfig fields, and the rest."""
    from podracer.errors import ConfigError
    from podracer.experiments.elastic import ElasticConfig

    types = {f.name: f.type for f in dataclasses.fields(ElasticConfig)}
    fields, rest, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--elastic."):
            rest.append(a)
            i += 1
            continue
        name, eq, value = a[len("--elastic.") :].partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        i += 1
        name = name.replace("-", "_")
        if name not in types or name in ("pods", "cluster"):
            allowed = ", ".join(n for n in types if n not in ("pods", "cluster"))
            raise ConfigError(f"--elastic.{name} is not allowed: the fields are {allowed}")
        kind = str if "str" in str(types[name]) else int if "int" in str(types[name]) else float
        try:
            fields[name] = kind(value)
        except ValueError:
            raise ConfigError(
                f"--elastic.{name}={value!r} is not allowed: give a number ({kind.__name__})"
            ) from None
    return fields, rest
