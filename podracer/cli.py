"""The ``podracer`` command line.

``podracer train --arch anakin --agent ppo --env gymnax:CartPole-v1 --total-timesteps 500000
--seed 0 [--agent.FIELD VALUE ...] [--arch.FIELD VALUE ...]``

Parsing has two stages: the selectors (``--arch``, ``--agent``, ``--env``, run length, seed) are
read first; they choose the config dataclasses, whose every field tyro then exposes as
``--agent.<field>`` / ``--arch.<field>`` (kebab-case or snake_case). New selectors and new config
fields add flags without changing existing ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

TOP_USAGE = """usage: podracer COMMAND [ARGS]

commands:
  train    train an agent (podracer train --help)
"""

ARCHS = ("anakin", "sebulba")
SEBULBA_DEFAULT_ENV = "envpool:CartPole-v1"


class CLIError(Exception):
    """A bad command line: printed as one line, exit code 2."""


def _selector_parser(agent_names: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podracer train",
        add_help=False,
        allow_abbrev=False,
        description="Train an agent. Every config field is a flag: --agent.FIELD, --arch.FIELD.",
    )
    parser.add_argument("--arch", default="anakin", help=f"the loop: {', '.join(ARCHS)}")
    parser.add_argument("--agent", default="ppo", help=f"the agent: {', '.join(agent_names)}")
    parser.add_argument("--env", default=None, help="environment id (default: the agent's own)")
    parser.add_argument(
        "--total-timesteps",
        "--total_timesteps",
        type=int,
        default=500_000,
        help="environment steps per seed",
    )
    parser.add_argument("--seed", type=int, default=0, help="run seed (seeds seed..seed+N-1)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    multi = parser.add_argument_group(
        "several processes (one per host; see docs/scaling.md)",
        "Nothing to pass where JAX detects the cluster (SLURM, Cloud TPU). Every process prints "
        "the final JSON line; only process 0 prints progress.",
    )
    multi.add_argument("--coordinator", default=None, help="HOST:PORT of process 0")
    multi.add_argument("--num-processes", "--num_processes", type=int, default=None)
    multi.add_argument("--process-id", "--process_id", type=int, default=None)
    multi.add_argument(
        "--fault-timeout",
        "--fault_timeout",
        type=float,
        default=None,
        help="seconds after which a dead or stuck process ends the others (default 60)",
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    return parser


def parse_train_args(argv: Sequence[str]):
    """``(selectors, agent_config, arch_config)`` from a ``podracer train`` command line."""
    import tyro

    from podracer import agents
    from podracer.anakin import AnakinConfig

    parser = _selector_parser(list(agents.AGENTS))
    selectors, rest = parser.parse_known_args(list(argv))
    if selectors.arch not in ARCHS:
        raise CLIError(
            f"--arch={selectors.arch!r} is not allowed: choose one of {', '.join(ARCHS)}"
        )
    if selectors.agent not in agents.AGENTS:
        raise CLIError(
            f"--agent={selectors.agent!r} is not allowed: choose one of {', '.join(agents.AGENTS)}"
        )
    if selectors.total_timesteps <= 0:
        raise CLIError(
            f"--total-timesteps={selectors.total_timesteps} is not allowed: it must be > 0"
        )
    entry = agents.AGENTS[selectors.agent]
    if selectors.env is None:
        selectors.env = entry.default_env if selectors.arch == "anakin" else SEBULBA_DEFAULT_ENV
    if selectors.arch == "anakin":
        arch_cls, arch_defaults = AnakinConfig, entry.arch_defaults
    else:
        from podracer.sebulba import SebulbaConfig

        arch_cls, arch_defaults = SebulbaConfig, {}

    spec = dataclasses.make_dataclass(
        "TrainConfig",
        [
            ("agent", entry.config_cls, dataclasses.field(default_factory=entry.config_cls)),
            (
                "arch",
                arch_cls,
                dataclasses.field(default_factory=lambda: arch_cls(**arch_defaults)),
            ),
        ],
        frozen=True,
    )
    if selectors.help:
        parser.print_help()
        print()
        rest = [*rest, "--help"]
    parsed = tyro.cli(
        spec,
        args=rest,
        prog=f"podracer train --arch {selectors.arch} --agent {selectors.agent}",
        description=f"Config fields of --arch {selectors.arch} and --agent {selectors.agent}.",
        config=(tyro.conf.FlagConversionOff,),
    )
    return selectors, parsed.agent, parsed.arch


def train(argv: Sequence[str]) -> dict:
    selectors, agent_config, arch_config = parse_train_args(argv)
    from podracer import anakin, envs, parallel
    from podracer.logging import ConsoleProgress

    parallel.initialize(  # before any JAX computation; nothing to do for one process
        selectors.coordinator,
        selectors.num_processes,
        selectors.process_id,
        timeout_s=selectors.fault_timeout,
    )
    quiet = selectors.quiet or not parallel.is_main_process()
    progress = None if quiet else ConsoleProgress(selectors.total_timesteps)
    if selectors.arch == "sebulba":
        from podracer.sebulba import train as train_loop
    else:
        envs.make(selectors.env)  # fail early, with the list of known ids
        train_loop = anakin.train
    result = train_loop(
        selectors.env,
        agent_config,
        arch_config,
        seed=selectors.seed,
        total_timesteps=selectors.total_timesteps,
        progress=progress,
    )
    result.summary["agent"] = selectors.agent
    print(json.dumps(result.summary), flush=True)
    return result.summary


def main(argv: Sequence[str] | None = None) -> int:
    from podracer.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(TOP_USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "train":
            train(rest)
            return 0
        raise CLIError(f"unknown command {command!r}: choose one of train")
    except (CLIError, ConfigError) as error:
        print(f"podracer: error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # an unknown environment id, a size that does not divide, ...
        message = str(error).splitlines()[0]  # without the notes JAX appends when tracing
        print(f"podracer: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
