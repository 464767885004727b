"""The documentation site builds with ``mkdocs build --strict``: every page of the nav exists and
every page of ``docs/`` is in it, every link and anchor between pages resolves, every ``:::``
block of the API reference names an object that exists, and every docstring parses (a
Google-style ``Args:`` entry naming a parameter the function no longer has fails)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def mkdocs() -> str | None:
    """The mkdocs executable of this environment (the dev and docs extras install it)."""
    return shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")


def test_the_site_builds_strictly(tmp_path):
    exe = mkdocs()
    if exe is None:
        pytest.fail('mkdocs is not installed: pip install -e ".[docs]" (or ".[dev]")')
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about MkDocs 2
    proc = subprocess.run(
        [exe, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert not re.search(r"^WARNING", output, re.MULTILINE), output
    site = tmp_path / "site"
    for page in ("index.html", "sebulba/index.html", "api/core/index.html"):
        assert (site / page).is_file(), page
    # The API reference holds the documented objects, and the maths went to MathJax.
    core = (site / "api/core/index.html").read_text()
    assert 'id="podracer.core.learner.make_learner"' in core
    assert 'class="arithmatex"' in core


def test_the_api_page_of_podracer_names_every_public_name():
    """docs/api/podracer.md documents ``train`` and lists every other name of ``podracer``'s
    ``__all__`` with a link to where it is documented (the strict build checks the links)."""
    import podracer

    page = (ROOT / "docs" / "api" / "podracer.md").read_text()
    missing = [name for name in podracer.__all__ if f"`{name}`" not in page]
    assert not missing, f"add these names of podracer.__all__ to docs/api/podracer.md: {missing}"
