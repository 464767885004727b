"""A griffe extension for the API reference (mkdocs.yml): podracer's docstrings use a few
reStructuredText constructs, which this turns into the Markdown that mkdocstrings renders.

- ``:func:`name```, ``:class:`~a.b.Name```, ... (any role but ``:math:``) become inline code
  (``~`` keeps the last part of the name, as Sphinx does);
- ``:math:`x``` becomes ``\\(x\\)`` and a ``.. math::`` block a ``\\[ ... \\]`` block, which
  ``pymdownx.arithmatex`` hands to MathJax;
- a paragraph ending in ``::`` (a literal block follows, indented) ends in ``:``.

Only the rendered text changes; the docstrings stay as they are in the code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|obj|exc|const):`~?([^`]+)`")
_TILDE_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|obj|exc|const):`~([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`", re.DOTALL)
_MATH_BLOCK = re.compile(r"^(\s*)\.\. math::\s*$")


def _math_blocks(text: str) -> str:
    """Every ``.. math::`` directive and its indented body as a ``\\[ ... \\]`` block."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _MATH_BLOCK.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent = match.group(1)
        body: list[str] = []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            if not lines[i].strip() and body and body[-1] == "":
                break  # a second blank line ends the block
            body.append(lines[i].strip())
            i += 1
        while body and not body[-1]:
            body.pop()
        while body and not body[0]:
            body.pop(0)
        out.extend([f"{indent}\\[", *(f"{indent}{line}" for line in body), f"{indent}\\]", ""])
    return "\n".join(out)


def to_markdown(text: str) -> str:
    """``text`` (a docstring) with its reStructuredText constructs in Markdown."""
    text = _math_blocks(text)
    text = _MATH_ROLE.sub(lambda m: "\\(" + " ".join(m.group(1).split()) + "\\)", text)
    text = _TILDE_ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.MULTILINE)


class RstToMarkdown(griffe.Extension):
    """Rewrites every docstring's reStructuredText constructs (:func:`to_markdown`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
