"""The package is a stack of layers (docs/design.md, "The layers"): every import of ``podracer/``,
inside functions too, goes to the same layer or a lower one, and no modules import each other in
a circle. Read with ``ast`` from the files, against the table written in docs/design.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "podracer"


def layer_table(text: str) -> list[tuple[str, list[str]]]:
    """The (layer, [path, ...]) rows of the block after the ``<!-- layers`` mark, bottom first."""
    block = text.split("<!-- layers", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    rows = []
    for line in block.splitlines():
        if not line.strip() or line.startswith(" "):
            continue
        name, *rest = line.split()
        paths = [word for word in rest if word.startswith("podracer/")]
        rows.append((name, paths))
    return rows


LAYERS = layer_table((ROOT / "docs" / "design.md").read_text())


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer (0 is the bottom); None for the package's face."""
    path = MODULES[module].relative_to(ROOT).as_posix()
    for index, (_, paths) in enumerate(LAYERS):
        for prefix in paths:
            if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
                return index
    return None


def resolve(name: str) -> str | None:
    """The module of ``podracer`` that an import of ``name`` (a module or a name in one) loads."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> dict[str, int]:
    """Every podracer module ``module`` imports (at any depth of its code) -> the first line."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        for name in names:
            if name.startswith("podracer"):
                target = resolve(name)
                if target and target != module:
                    found.setdefault(target, node.lineno)
    return found


EDGES = {module: imports_of(module) for module in MODULES}


def test_the_table_covers_every_module():
    """Every module of podracer/ belongs to one layer of the table, except the package's face."""
    assert [name for name, _ in LAYERS][:3] == ["errors", "util", "types"]
    unplaced = sorted(m for m in MODULES if layer_of(m) is None and m != "podracer")
    assert unplaced == []


def test_no_import_from_a_higher_layer():
    upward = []
    for module, targets in EDGES.items():
        mine = layer_of(module)
        if mine is None:
            continue
        for target, line in targets.items():
            theirs = layer_of(target)
            if theirs is None or theirs > mine:
                where = f"{MODULES[module].relative_to(ROOT)}:{line}"
                upward.append(
                    f"{where} ({LAYERS[mine][0]}) imports {target} "
                    f"({LAYERS[theirs][0] if theirs is not None else 'the face'})"
                )
    assert upward == []


def strongly_connected(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert strongly_connected(EDGES) == []


def test_the_checks_find_what_they_look_for():
    """The scanner sees an import made inside a function, resolves a name to its module, and
    finds a circle of three."""
    source = "def f():\n    from podracer.util.validation import check_choice\n"
    tree = ast.parse(source)
    inner = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert inner and resolve(inner[0].module + ".check_choice") == "podracer.util.validation"
    circle = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert strongly_connected(circle) == [["a", "b", "c"]]
    assert layer_of("podracer.errors") == 0
    assert LAYERS[layer_of("podracer.cli.main")][0] == "cli"


@pytest.mark.parametrize("limit", [8])
def test_the_package_root_is_small(limit):
    """The root holds the contracts and the face; everything else is in a layer's folder."""
    root_modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root_modules) <= limit, root_modules


def test_no_file_or_function_too_long():
    """No file of podracer/ over 700 lines, no function over 100."""
    long = []
    for path in MODULES.values():
        text = path.read_text()
        if len(text.splitlines()) > 700:
            long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 100:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert long == []


def test_each_constant_written_once():
    """A file name or a marker the package shares is defined in one module."""
    defined: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    named = isinstance(target, ast.Name) and re.fullmatch(
                        r"[A-Z][A-Z_0-9]+", target.id
                    )
                    value = node.value.value
                    if named and isinstance(value, str) and value.endswith((".json", ".jsonl")):
                        defined.setdefault(value, []).append(module)
    twice = {value: modules for value, modules in defined.items() if len(modules) > 1}
    assert twice == {}


def test_the_environment_registry_names_makers_at_or_below_its_layer():
    """The registry names its makers by string (imported when an id of theirs is made); each is
    a module of the envs layer or a lower one, so the strings hide no import upwards."""
    from podracer.envs import registry

    envs_layer = layer_of("podracer.envs.registry")
    named = [
        maker.partition(":")[0]
        for row in registry.FAMILIES
        for maker in (row.jax, row.host, row.host_options)
        if maker
    ]
    assert "podracer.trading.environment" in named
    assert [m for m in named if m not in MODULES or layer_of(m) > envs_layer] == []
