"""The light install (``pip install -e .``) leaves each heavy family and tool to an extra; a
feature whose extra is missing stops in one line that names the extra to install.

Each case hides the extra's package (``sys.modules[name] = None`` makes ``import name`` raise
``ImportError``, as on a machine without it) and runs the feature through the command line."""

import re
import sys
import tomllib
from pathlib import Path

import pytest

from podracer.cli import main as cli
from podracer.errors import ConfigError
from podracer.runs.logging import WandbWriter

ROOT = Path(__file__).resolve().parent.parent
# extra -> (the packages it installs that podracer imports, a command that needs them)
EXTRAS = {
    "ray": (["ray"], ["--population", "4", "--pods", "2"]),
    "brax": (["brax"], ["--env", "brax:ant"]),
    "playground": (["mujoco_playground"], ["--env", "playground:CartpoleBalance"]),
    "craftax": (["craftax"], ["--env", "craftax:Craftax-Classic-Symbolic-v1"]),
    "jumanji": (["jumanji"], ["--env", "jumanji:Snake-v1"]),
    "navix": (["navix"], ["--env", "navix:Navix-Empty-5x5-v0"]),
    "xminigrid": (["xminigrid"], ["--env", "xminigrid:MiniGrid-Empty-5x5"]),
    "pgx": (["pgx"], ["--agent", "dqn", "--env", "pgx:2048"]),
    "search": (["mctx"], ["--agent", "muzero"]),
}


def hide(monkeypatch, packages):
    """``import`` of each package (and of its submodules) raises ``ImportError``."""
    for package in packages:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_a_feature_whose_extra_is_missing_names_it_in_one_line(extra, monkeypatch, capsys):
    packages, flags = EXTRAS[extra]
    hide(monkeypatch, packages)
    argv = ["train", "--agent", "ppo", *flags, "--dry-run"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()  # a preset's line may come first
    assert "Traceback" not in "\n".join(err) and err[-1].startswith("podracer: error: "), err
    assert re.search(rf"""pip install ['"]podracer\[({extra}|envs)\]['"]""", err[-1]), err[-1]


def test_the_wandb_logger_without_wandb_names_its_extra(monkeypatch, tmp_path):
    hide(monkeypatch, ["wandb"])
    with pytest.raises(ConfigError, match=r"--wandb .*pip install 'podracer\[wandb\]'"):
        WandbWriter(str(tmp_path), {})


def test_the_popgym_arcade_family_names_its_requirements_file(monkeypatch, capsys):
    hide(monkeypatch, ["popgym_arcade"])
    assert cli.main(["train", "--env", "popgym_arcade:CountRecallEasy", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("podracer: error: ") and "Traceback" not in "\n".join(err)
    assert "pip install --no-deps -r requirements/popgym-arcade.txt" in err[-1]


def test_every_heavy_family_is_an_extra_and_the_core_holds_no_test_tool():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=\[; ]", d)[0].lower() for d in project["dependencies"]}
    extras = project["optional-dependencies"]
    heavy = {"ray", "playground", "craftax", "jumanji", "navix", "xminigrid", "pgx", "mctx"}
    heavy |= {"brax", "mkdocs-material", "mkdocstrings", "wandb", "mujoco"}
    tools = {"pytest", "pytest-cov", "pytest-xdist", "ruff", "distrax", "stockstats"}
    assert not core & (heavy | tools), core & (heavy | tools)
    for extra in (*EXTRAS, "wandb", "docs"):
        assert extra in extras, extra
