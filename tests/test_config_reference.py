"""docs/config.md is generated from the config dataclasses and kept up to date."""

import dataclasses

import pytest

from podracer.agents import PPOConfig
from podracer.cli import reference as config_reference


def test_committed_reference_is_current():
    committed = config_reference.DOC_PATH.read_text()
    assert committed == config_reference.render(), (
        "docs/config.md is stale: regenerate with `python -m podracer.cli.reference`"
    )


def test_render_is_deterministic():
    assert config_reference.render() == config_reference.render()


@pytest.mark.parametrize("section", config_reference.sections(), ids=lambda s: s.title)
def test_every_field_appears_with_flag_default_and_help(section):
    text = config_reference.render_section(section)
    docs = config_reference.field_docs(section.cls)
    fields = dataclasses.fields(section.cls)
    assert fields
    for field in fields:
        value = field.default if field.default_factory is dataclasses.MISSING else None
        if value is None:
            value = field.default_factory()
        written = (
            (" ".join(map(str, value)) or "(empty)") if isinstance(value, tuple) else str(value)
        )
        flag = f"--{section.prefix}.{field.name.replace('_', '-')}"
        rows = [line for line in text.splitlines() if line.startswith(f"| `{flag}` |")]
        assert len(rows) == 1, flag
        assert f"| `{written}` |" in rows[0], (flag, written)
        assert docs.get(field.name), f"{section.cls.__name__}.{field.name} has no docstring"
        assert " ".join(docs[field.name].split()) in rows[0]


def test_known_docstrings_and_flags():
    text = config_reference.render()
    assert (
        "| `--agent.clip-eps` | `float` | `0.2` | Clipping range of the probability ratio "
        "(and of the value change). |" in text
    )
    assert "| `--arch.num-envs` | `int` | `4` |" in text
    assert "| `--agent.hidden-sizes` | `tuple[int, ...]` | `64 64` |" in text
    assert "PPO hyper-parameters (and the actor-critic" in text  # the class docstring
    assert "## `--arch sebulba`" in text
    assert config_reference.flag("agent", "num_minibatches") == "--agent.num-minibatches"


def test_field_docs_reads_attribute_docstrings_of_bases():
    @dataclasses.dataclass(frozen=True)
    class Base:
        """A base."""

        a: int = 1
        """First | field,
        on two lines."""
        b: int = 2

    @dataclasses.dataclass(frozen=True)
    class Child(Base):
        c: str = "x"
        """Third."""

    assert config_reference.field_docs(Child) == {
        "a": "First | field,\non two lines.",
        "c": "Third.",
    }
    assert config_reference.class_doc(Child) == ""  # not dataclasses' generated signature
    section = config_reference.ConfigSection("test", Child, "agent", "")
    text = config_reference.render_section(section)
    assert "| `--agent.a` | `int` | `1` | First \\| field, on two lines. |" in text
    assert "| `--agent.b` | `int` | `2` |  |" in text
    assert PPOConfig.__name__ in config_reference.render()


def test_check_mode(tmp_path, capsys):
    stale = tmp_path / "config.md"
    stale.write_text("old\n")
    assert config_reference.main(["--check", "--out", str(stale)]) == 1
    assert "python -m podracer.cli.reference" in capsys.readouterr().err
    assert config_reference.main(["--out", str(stale)]) == 0
    assert stale.read_text() == config_reference.render()
    assert config_reference.main(["--check", "--out", str(stale)]) == 0


def test_run_options_table_has_every_field_with_its_flag():
    from podracer.cli.parse import OPTION_FLAGS
    from podracer.runs import RunOptions

    text = config_reference.render_run_options()
    assert text in config_reference.render()
    docs = config_reference.field_docs(RunOptions)
    assert set(OPTION_FLAGS) == {f.name for f in dataclasses.fields(RunOptions)}
    for field in dataclasses.fields(RunOptions):
        rows = [line for line in text.splitlines() if f"| `{field.name}` |" in line]
        assert len(rows) == 1, field.name
        assert rows[0].startswith(f"| `{OPTION_FLAGS[field.name]}` | `{field.name}` |")
        assert f"| `{field.default}` |" in rows[0]
        assert docs.get(field.name) and " ".join(docs[field.name].split()) in rows[0]
    assert (
        "| `--keep-checkpoints K` | `keep_checkpoints` | `int` | `3` | Checkpoints kept: the "
        "latest ones, plus the best by evaluation return. |" in text
    )


def test_every_option_flag_sets_its_field():
    """The flags the table names are the parser's: each sets its field to a non-default value."""
    from podracer.cli.parse import OPTION_FLAGS, parse_selectors, parse_train_args
    from podracer.runs import RunOptions

    defaults = RunOptions()
    for name, flag in OPTION_FLAGS.items():
        args = flag.split()
        if len(args) == 2:
            args[1] = "7"
        options = parse_train_args(parse_selectors(args))[0].options
        changed = {
            f.name
            for f in dataclasses.fields(RunOptions)
            if getattr(options, f.name) != getattr(defaults, f.name)
        }
        expected = {name, "wandb"} if name == "wandb_online" else {name}
        assert changed == expected, flag
        assert getattr(options, name) == (7 if len(args) == 2 else not getattr(defaults, name))


def test_top_level_flags_table():
    text = config_reference.render_train_flags()
    rows = [line for line in text.splitlines() if line.startswith("| `--")]
    flags = [row.split("`")[1] for row in rows]
    assert flags[:5] == [
        "--arch ARCH",
        "--agent NAME",
        "--env ID",
        "--total-timesteps N",
        "--seed S",
    ]
    for flag in ("--resume DIR", "--run-dir DIR", "--config FILE", "--coordinator HOST:PORT"):
        assert flag in flags
    assert not any(f.startswith(("--eval-", "--wandb", "--checkpoint-")) for f in flags)
    assert "| `--run-dir DIR` | run directory (default runs/<env>-<agent>-<arch>-<time>) |" in text
