"""The config reference, ``docs/config.md``, generated from the config dataclasses.

Every field of every agent config (:data:`podracer.agents.AGENTS`) and of the loop configs
(:class:`~podracer.loops.anakin.AnakinConfig`, :class:`~podracer.loops.sebulba.SebulbaConfig`)
becomes a row: its command-line flag, type, default and help text. The help text is the field's
attribute docstring — the string literal under the field in the class body, the same text tyro
shows in ``podracer train --help`` — read with :mod:`ast` from the class source.

    python -m podracer.cli.reference           # rewrite docs/config.md
    python -m podracer.cli.reference --check   # exit 1 when docs/config.md is stale
    python -m podracer.cli.reference --print   # write the Markdown to stdout
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "config.md"
COMMAND = "python -m podracer.cli.reference"


class ConfigSection(NamedTuple):
    """One config dataclass and how the command line reaches it."""

    title: str  # e.g. "--agent ppo"
    cls: type
    prefix: str  # "agent", "arch" or "population": flags are --<prefix>.<field-in-kebab-case>
    note: str  # extra Markdown under the title ("" for none)


def public_name(cls: type) -> str:
    """``cls``'s dotted name through the package of its module when that package re-exports it
    (its public face): ``podracer.runs.RunOptions``, not ``podracer.runs.spec.RunOptions``."""
    import importlib

    package = cls.__module__.rpartition(".")[0]
    if package and getattr(importlib.import_module(package), cls.__qualname__, None) is cls:
        return f"{package}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a class's fields (its bases' first), from the class source.

    A field's docstring is a string literal statement right after its annotated assignment::

        clip_eps: float = 0.2
        \"\"\"Clipping range of the probability ratio.\"\"\"
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        body = _class_node(klass).body
        for node, following in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def class_doc(cls: type) -> str:
    """The docstring written in the class body ("" when none: not dataclasses' generated one)."""
    return ast.get_docstring(_class_node(cls)) or ""


def _class_node(cls: type) -> ast.ClassDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef), cls
    return node


def flag(prefix: str, name: str) -> str:
    """``flag("agent", "num_minibatches") == "--agent.num-minibatches"``."""
    return f"--{prefix}.{name.replace('_', '-')}"


def default_value(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def command_line_value(value: Any) -> str:
    """A default as it is written on the command line: ``(64, 64)`` -> ``64 64``."""
    if value is dataclasses.MISSING:
        return "(required)"
    if isinstance(value, tuple | list):
        return " ".join(map(command_line_value, value)) if value else "(empty)"
    return str(value)


def type_name(field: dataclasses.Field) -> str:
    annotation = field.type
    if isinstance(annotation, str):  # from __future__ import annotations: as written
        return annotation
    return inspect.formatannotation(annotation)


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def sections() -> list[ConfigSection]:
    """The documented configs, in a fixed order: agents as in AGENTS, then the loops."""
    from podracer import agents, loops
    from podracer.population.ensemble import PopulationConfig

    out = []
    for name, entry in agents.AGENTS.items():
        if ":" in name:
            continue  # a user's agent imported by path, not a built-in one
        note = f"Default environment: `{entry.default_env}`."
        if entry.search_space:
            note += f" Sweepable: {', '.join(f'`{f}`' for f in entry.search_space)}."
        for loop in loops.names():
            defaults = loops.loop_defaults(entry, loop)
            if not defaults:
                continue
            flags = ", ".join(
                f"`{flag('arch', k)} {command_line_value(v)}`" for k, v in defaults.items()
            )
            note += f" With `--arch {loop}` this agent changes the loop's defaults: {flags}."
        out.append(ConfigSection(f"--agent {name}", entry.config_cls, "agent", note))
    for name in loops.names():
        out.append(ConfigSection(f"--arch {name}", loops.get(name).config_cls, "arch", ""))
    out.append(
        ConfigSection(
            "--population P",
            PopulationConfig,
            "population",
            "Tournament-based ensemble training on the Anakin loop (`docs/population.md`): "
            "`--population P` sets `size`; the other fields are `--population.FIELD VALUE`.",
        )
    )
    return out


def render_section(section: ConfigSection) -> str:
    cls = section.cls
    lines = [f"## `{section.title}`: `{public_name(cls)}`", ""]
    if class_doc(cls):
        lines += [class_doc(cls), ""]
    if section.note:
        lines += [section.note, ""]
    lines += ["| flag | type | default | help |", "|---|---|---|---|"]
    lines += _field_rows(cls, lambda name: [f"`{flag(section.prefix, name)}`"])
    return "\n".join(lines) + "\n"


def _field_rows(cls, first_cells) -> list[str]:
    """A table row per init field of ``cls``: ``first_cells(name)``, then its type, default and
    docstring."""
    docs = field_docs(cls)
    rows = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        cells = (
            *first_cells(field.name),
            f"`{_cell(type_name(field))}`",
            f"`{_cell(command_line_value(default_value(field)))}`",
            _cell(docs.get(field.name, "")),
        )
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def render_train_flags() -> str:
    """The flags of ``podracer train`` that are neither config fields nor run options, from its
    argument parser."""
    from podracer.cli.parse import OPTION_FLAGS, train_flags

    options = {flag.split()[0] for flag in OPTION_FLAGS.values()}
    lines = [
        "## Top-level flags of `podracer train`",
        "",
        "The selectors (`--arch`, `--agent`, `--env`, `--total-timesteps`, `--seed`) choose the "
        "configs below; the run options that follow are top-level flags too. `podracer sweep` "
        "takes them as well, except `--resume`, `--resume-step` and `--population`.",
        "",
        "| flag | help |",
        "|---|---|",
    ]
    for flag, help_text in train_flags():
        if flag.split()[0] not in options:
            lines.append(f"| `{flag}` | {_cell(help_text)} |")
    return "\n".join(lines) + "\n"


def render_run_options() -> str:
    """:class:`~podracer.runs.RunOptions`: one row per field, with its flag and its key in the
    ``options`` section of a config file."""
    from podracer.cli.parse import OPTION_FLAGS
    from podracer.runs import RunOptions

    lines = [
        f"## Run options: `{public_name(RunOptions)}`",
        "",
        class_doc(RunOptions),
        "",
        "Top-level flags (a boolean's flag sets the value that is not its default); in a "
        "`--config` file and in `config.json`, the keys of the `options` section.",
        "",
        "| flag | `options` key | type | default | help |",
        "|---|---|---|---|---|",
    ]
    lines += _field_rows(RunOptions, lambda name: [f"`{OPTION_FLAGS[name]}`", f"`{name}`"])
    return "\n".join(lines) + "\n"


def render() -> str:
    """The whole reference as Markdown; the same text for the same code."""
    header = f"""# Config reference

<!-- Generated by `{COMMAND}` from the config dataclasses; do not edit by hand. -->

`podracer train --arch ARCH --agent AGENT [--env ENV] [--total-timesteps N] [--seed S]` chooses
the configs below; every field is then a flag, `--agent.FIELD VALUE` for the agent's config and
`--arch.FIELD VALUE` for the loop's (kebab-case as listed, or snake_case). Booleans take a value
(`--agent.anneal-lr False`), tuples take their items separated by spaces
(`--agent.hidden-sizes 128 128`). `podracer train --arch ARCH --agent AGENT --help` shows the
same fields with the defaults of that combination.
"""
    body = "\n".join(
        [render_train_flags(), render_run_options(), *(render_section(s) for s in sections())]
    )
    return header + "\n" + body


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Generate docs/config.md from the config dataclasses."
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    mode.add_argument("--print", action="store_true", help="write the Markdown to stdout")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="the file to write or check")
    args = parser.parse_args(argv)
    text = render()
    if args.print:
        sys.stdout.write(text)
        return 0
    if args.check:
        current = args.out.read_text() if args.out.is_file() else None
        if current != text:
            print(f"{args.out} is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(args.out)
    return 0


__all__ = [
    "ConfigSection",
    "class_doc",
    "field_docs",
    "flag",
    "main",
    "render",
    "render_run_options",
    "render_train_flags",
    "sections",
]

if __name__ == "__main__":
    sys.exit(main())
