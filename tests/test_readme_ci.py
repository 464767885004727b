"""CI and the README run the same commands: ``.ci/run`` runs the README's first ``bash`` block
and installs nothing of its own, so a person following the README gets CI's run.

The check (:func:`installs_only_in_ci`) reads the install commands (``pip``, ``uv pip``,
``apt-get``, ``conda``, ``npm``) of ``.ci/run`` and of the README's block; an install in
``.ci/run`` that the README lacks fails the test."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALL = re.compile(
    r"\b(?:python3? -m pip|uv pip|pip3?|apt-get|apt|conda|mamba|npm)\s+install\b[^&|;\n#]*"
)


def readme_block(text: str) -> str:
    """The README's first ``bash`` block (what ``.ci/run`` runs)."""
    match = re.search(r"^```bash[ \t]*\n(.*?)^```", text, re.M | re.S)
    assert match, "README.md has no ```bash block"
    return match.group(1)


def installs(text: str) -> set[str]:
    """The install commands of a shell text, whitespace normalised, comments left out."""
    found = set()
    for line in text.splitlines():
        code = line.split(" #")[0] if not line.lstrip().startswith("#") else ""
        found |= {" ".join(m.group(0).split()) for m in INSTALL.finditer(code)}
    return found


def installs_only_in_ci(ci: str, readme: str) -> set[str]:
    """What ``.ci/run`` (text ``ci``) installs that the README's block does not."""
    return installs(ci) - installs(readme_block(readme))


def test_ci_installs_nothing_the_readme_does_not():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert installs_only_in_ci(ci, readme) == set()
    # the check fails for an install line added to .ci/run alone
    extra = ci + "\npip install --no-deps -r requirements/popgym-arcade.txt  # an extra step\n"
    broken_readme = readme.replace(
        " && pip install --no-deps -r requirements/popgym-arcade.txt", ""
    )
    assert installs_only_in_ci(extra, broken_readme) == {
        "pip install --no-deps -r requirements/popgym-arcade.txt"
    }
    assert installs_only_in_ci(ci + "\npython -m pip install pytest-foo\n", readme) == {
        "python -m pip install pytest-foo"
    }


def test_ci_runs_the_readme_block_as_written():
    printed = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "--print"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert printed == readme_block((ROOT / "README.md").read_text())


def test_the_readme_block_is_the_main_job_then_both_tiers():
    lines = [
        line
        for line in readme_block((ROOT / "README.md").read_text()).splitlines()
        if line.strip() and not line.startswith("#")
    ]
    main_job, tests, full = lines
    assert "pip install -e . &&" in main_job and "podracer train --arch anakin" in main_job
    assert ".[dev]" not in main_job  # the main job's install is the light one
    assert tests.startswith('pip install -e ".[dev]"') and tests.endswith("python -m pytest -q")
    assert "requirements/popgym-arcade.txt" in tests  # every optional family the tests use
    assert full == "python -m pytest -q -m slow"
