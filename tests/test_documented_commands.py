"""Every ``podracer`` command line of README.md and docs/ runs with ``--dry-run``, and every
Python code block of them compiles and imports only names that exist.

A command is found in a fenced code block (not ``text``, ``json``, ``yaml``, ``toml`` or
``python``, which hold synopses, output and files), wherever ``podracer COMMAND`` starts on its
line (after ``XLA_FLAGS=...``, ``srun``, ``host0$``, ``.venv/bin/``, ``cd examples &&``), with
``\\`` continuations joined and a trailing ``# comment`` dropped. Each runs in this process
(``podracer.cli.main.main``, conftest's two devices: the ``XLA_FLAGS`` the docs set) in an empty
directory holding what the docs' commands read: ``examples/`` on the path (the docs' own agent
and environment), a ``yaml`` block whose first line is ``# NAME.yaml`` written as NAME.yaml, and
``prices.csv`` (real daily index prices, FinRL's format). A run directory that a ``train``
command of the same page names with ``--run-dir`` holds, for the commands after it (``eval``,
``plot``, ``backtest``, ``--resume``), the config.json that command would write and a
checkpoint of its last update: what the dry run of the commands after it reads.
"""

import ast
import importlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from price_files import real_index_prices

from podracer import envs, loops, parallel, runs
from podracer.cli import main as cli
from podracer.cli.parse import parse_selectors, run_spec
from podracer.runs.rundir import CHECKPOINT_DIR

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^\s*```\s*([\w-]*)")
NOT_COMMANDS = {"text", "json", "yaml", "toml", "python", "jsonl"}
COMMAND = re.compile(r"(?:^|[\s/])podracer (train|sweep|eval|plot|backtest)\b(.*)$")


def blocks(page: Path):
    """``(language, first line number, lines)`` of each fenced block of ``page``."""
    language, start, lines = None, 0, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        match = FENCE.match(line)
        if match and language is None:
            language, start, lines = match.group(1), number + 1, []
        elif match:
            yield language, start, lines
            language = None
        elif language is not None:
            lines.append(line)


def commands(page: Path):
    """``(line number, argv, what comes before podracer)`` of every podracer command line of
    ``page``, in order."""
    for language, start, lines in blocks(page):
        if language in NOT_COMMANDS:
            continue
        joined, first = "", None
        for number, line in enumerate(lines, start):
            first = number if first is None else first
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            text, joined = joined + line, ""
            for part in re.split(r"&&|;", text):
                match = COMMAND.search(part)
                if match:
                    prefix = part[: match.start()]
                    yield first, [match.group(1), *split(match.group(2))], prefix
            first = None


def split(text: str) -> list[str]:
    """The words of a command's tail: a ``# comment``, a trailing ``&`` and the closing quote
    of a command given inside quotes (``--command='... podracer train ...'``) dropped."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # the quote that ends an outer command
        words = shlex.split(text.strip().rstrip("'\""), comments=True)
    return words[:-1] if words and words[-1] == "&" else words


def files(page: Path) -> dict[str, str]:
    """The files a page shows: ``yaml`` blocks whose first line is ``# NAME.yaml``."""
    out = {}
    for language, _, lines in blocks(page):
        if language == "yaml" and lines and re.fullmatch(r"#\s*\S+\.ya?ml\s*", lines[0]):
            out[lines[0].lstrip("#").strip()] = "\n".join(lines[1:]) + "\n"
    return out


def first_of_each():
    """The commands of every page, a command written again (on another page) once."""
    seen = set()
    for page in PAGES:
        for number, argv, prefix in commands(page):
            if (tuple(argv), prefix.strip()) not in seen:
                seen.add((tuple(argv), prefix.strip()))
                yield page, number, argv, prefix


CASES = [
    pytest.param(page, number, argv, prefix, id=f"{page.name}:{number}:{' '.join(argv)[:50]}")
    for page, number, argv, prefix in first_of_each()
]
# MuJoCo (under Brax's and MuJoCo Playground's environments) logs its warnings to a file of its
# own in the working directory; the rest must be as before a dry run.
LIBRARY_LOGS = {"MUJOCO_LOG.TXT"}


def test_the_docs_have_commands():
    assert len(CASES) >= 40
    assert {case.values[2][0] for case in CASES} >= {
        "train",
        "sweep",
        "eval",
        "plot",
        "backtest",
    }


def written_before(page: Path, number: int, root: Path) -> None:
    """The run directories that the ``train`` commands of ``page`` before line ``number``
    name with ``--run-dir``: the config.json each would write, and a checkpoint of its last
    update."""
    for earlier, argv, _ in commands(page):
        if earlier >= number or argv[0] != "train" or "--run-dir" not in argv:
            continue
        run_dir = root / argv[argv.index("--run-dir") + 1]
        if run_dir.exists():
            continue
        spec, _ = run_spec(parse_selectors(argv[1:]))
        runs.save_spec(str(run_dir), spec)
        updates = spec.total_timesteps // loops.get(spec.arch).steps_per_update(spec.arch_config)
        (run_dir / CHECKPOINT_DIR / str(max(1, updates))).mkdir(parents=True)


def as_on_two_cores(monkeypatch, prefix: str = "") -> None:
    """What ``podracer train`` does on a 2-core machine (conftest's two devices): one CPU
    device per core, members spread over them (:func:`podracer.parallel.use_cpu_cores`),
    unless the command sets the device count itself."""
    given = "xla_force_host_platform_device_count" in prefix
    monkeypatch.setattr(parallel.mesh, "_cpu_cores_set", 0 if given else 2)


@pytest.fixture
def examples_forgotten(monkeypatch):
    """The docs' own environment and agent (examples/) imported for a command and forgotten
    after it, their registration too: other tests import and register them themselves."""
    monkeypatch.setattr(envs.factory, "_REGISTRY", dict(envs.factory._REGISTRY))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        path = getattr(sys.modules[name], "__file__", None) or ""
        if path.startswith(str(ROOT / "examples")):
            del sys.modules[name]


@pytest.mark.slow
@pytest.mark.parametrize("page, number, argv, prefix", CASES)
@pytest.mark.usefixtures("examples_forgotten")
def test_documented_command_passes_its_dry_run(page, number, argv, prefix, tmp_path, monkeypatch):
    as_on_two_cores(monkeypatch, prefix)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    for name, text in files(page).items():
        (tmp_path / name).write_text(text)
    real_index_prices(tmp_path)[0].rename(tmp_path / "prices.csv")
    written_before(page, number, tmp_path)
    if "--help" in argv or "-h" in argv:
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
        assert stop.value.code in (0, None)
        return
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert cli.main([*argv, "--dry-run"]) == 0, f"{page.name}:{number}: podracer {' '.join(argv)}"
    after = sorted(p.name for p in tmp_path.rglob("*") if p.name not in LIBRARY_LOGS)
    assert after == before  # a dry run writes nothing


def python_blocks():
    for page in PAGES:
        for language, start, lines in blocks(page):
            if language == "python":
                yield pytest.param("\n".join(lines), id=f"{page.name}:{start}")


def imported_names(tree: ast.AST):
    """``(module, name or None)`` of every podracer import of ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("podracer"):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("podracer"):
                    yield alias.name, None


def attribute_chains(tree: ast.AST):
    """``podracer.a.b`` of every attribute chain that starts at the name ``podracer``."""
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id == "podracer" and chain:
            yield list(reversed(chain))


@pytest.mark.parametrize("source", list(python_blocks()))
def test_documented_python_compiles_and_its_podracer_names_exist(source):
    tree = ast.parse(source)  # a SyntaxError fails the test, naming the line
    compile(tree, "<docs>", "exec")
    for module, name in imported_names(tree):
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or the test fails
    for chain in attribute_chains(tree):
        value = importlib.import_module("podracer")
        for i, attr in enumerate(chain):
            if not hasattr(value, attr):
                value = importlib.import_module(".".join(["podracer", *chain[: i + 1]]))
            else:
                value = getattr(value, attr)


def test_the_command_finder_reads_what_the_docs_write(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n"
        "XLA_FLAGS=--x=2 podracer train --agent ppo \\\n"
        "    --arch.num-envs 8   # a comment\n"
        "cd examples && podracer eval runs/cp --episodes 3 && cd ..\n"
        "host1$ podracer sweep --seeds 2 &\n"
        "```\n"
        "```text\npodracer backtest RUN_DIR [--period P]\n```\n"
        "```yaml\n# my.yaml\nagent_config: {lr: 0.001}\n```\n"
    )
    assert list(commands(page)) == [
        (2, ["train", "--agent", "ppo", "--arch.num-envs", "8"], "XLA_FLAGS=--x=2"),
        (4, ["eval", "runs/cp", "--episodes", "3"], ""),
        (5, ["sweep", "--seeds", "2"], "host1$"),
    ]
    assert files(page) == {"my.yaml": "agent_config: {lr: 0.001}\n"}


def test_a_dry_run_refuses_what_a_run_refuses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--agent.gamma", "1.5", "--dry-run"]) == 2
    assert cli.main(["train", "--resume", "nowhere", "--dry-run"]) == 2
    assert not os.listdir(tmp_path)


def test_the_plan_counts_updates_and_replay_memory(tmp_path, monkeypatch, capsys):
    as_on_two_cores(monkeypatch)  # one member: one device, one buffer
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--agent", "dqn", "--total-timesteps", "100000", "--dry-run"]
    argv += ["--agent.buffer-size", "1000", "--agent.learning-starts", "500"]
    argv += ["--arch.num-envs", "8", "--arch.rollout-len", "4"]
    assert cli.main(argv) == 0
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert record["steps_per_update"] == 8 * 4
    assert record["num_updates"] == 100000 // 32
    # CartPole: obs and next obs (4 float32 each), action, n-step return, discount (4 bytes).
    one = 2 * 4 * 4 + 3 * 4
    assert 1000 * one <= record["replay_bytes"] <= 1000 * one + 1024
    assert record["replay_bytes"] < record["state_bytes"]
