"""The package's shape: every import points down the layers, and none goes in a circle.

The allowed order is written here once (ARCHITECTURE.md draws it):

    core  <  parallel, storage  <  sources, io  <  runtime  <  tools  <  cli

A module may import its own layer and the layers below it. ``sources`` and
``io`` are side by side and never import each other: sources know nothing of
statistics files, writers nothing of the datasets' file layouts. ``parallel``
(the distributed runner) and ``storage`` (chunked reading of zarr/HDF5, local
or fsspec) stand on core alone: ranks never need a source, and the chunk
readers never know which source points them at an array; ``io`` needs neither.
The package
root (``wxstats/__init__.py``, ``__main__.py``) is the public face and may
import anything. Imports inside functions count as much as those at the top.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "wxstats"

ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "parallel": {"core", "parallel"},
    "storage": {"core", "storage"},
    "sources": {"core", "storage", "sources"},
    "io": {"core", "io"},
    "runtime": {"core", "parallel", "storage", "sources", "io", "runtime"},
    "tools": {"core", "parallel", "storage", "sources", "io", "runtime", "tools"},
    "cli": {"core", "parallel", "storage", "sources", "io", "runtime", "tools", "cli"},
}
ROOT_MODULES = {"wxstats", "wxstats.__main__"}
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str) -> set[str]:
    """The wxstats modules ``path`` imports (resolved to modules, not names)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "wxstats")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "wxstats":
                continue
            # "from wxstats.x import y": y may be a module of its own
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                found.add(candidate if candidate in MODULES else module)
    return {m for m in found if m in MODULES or m == "wxstats"}


MODULES = _modules()
GRAPH = {name: _imports(path, name) for name, path in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_the_layers_cover_every_module():
    strays = [m for m in MODULES if _layer(m) is None and m not in ROOT_MODULES]
    assert not strays, f"modules outside the layers {sorted(ALLOWED)}: {strays}"


def test_no_import_points_up_or_sideways():
    wrong = []
    for module, imported in GRAPH.items():
        layer = _layer(module)
        if layer is None:
            continue
        for target in imported:
            if target == "wxstats":
                continue  # the version string
            if _layer(target) not in ALLOWED[layer]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(GRAPH.get(module, ())):
            if target == module or target == "wxstats":
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _reached(module: str) -> set[str]:
    """Every wxstats module ``module`` imports, directly or through others (the
    package root only for its version string)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in GRAPH.get(todo.pop(), ()):
            if target not in seen and target != "wxstats":
                seen.add(target)
                todo.append(target)
    return seen


def test_the_distributed_runner_needs_no_source_and_no_format():
    """``parallel/`` runs ranks for any computation: nothing it imports, even
    through other modules, reads a dataset or writes a statistics file."""
    wrong = [
        f"{module} -> {target}"
        for module in GRAPH
        if _layer(module) == "parallel"
        for target in sorted(_reached(module))
        if _layer(target) in ("sources", "io")
    ]
    assert any(_layer(m) == "parallel" for m in GRAPH), "no parallel/ modules found"
    assert not wrong, "parallel/ reaches sources or io:\n" + "\n".join(wrong)


def _imports_argparse(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
    return False


def test_nothing_below_the_cli_sees_argparse():
    users = [m for m, p in MODULES.items() if _imports_argparse(p) and _layer(m) != "cli"]
    assert not users, f"argparse outside the CLI: {users}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_say_what_they_own_and_long_ones_are_named(module):
    """Every module opens with a docstring. Files follow concepts, so length is a
    warning, not a failure (a hard cap split concepts into pairs of modules): one
    over ``MAX_LINES`` is named in the test summary as a place to look."""
    path = MODULES[module]
    text = path.read_text()
    lines = text.count("\n")
    if lines > MAX_LINES:
        warnings.warn(f"{path.relative_to(PACKAGE)} has {lines} lines (>{MAX_LINES})", stacklevel=1)
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring, f"{path.relative_to(PACKAGE)} opens without a docstring"


def test_the_checker_sees_a_planted_violation(tmp_path):
    """The import reader resolves relative and function-level imports (so the
    tests above can fail)."""
    bad = tmp_path / "planted.py"
    bad.write_text(
        '"""x"""\n\n\ndef f():\n    from ..cli import main\n    from wxstats.runtime import run\n'
    )
    found = _imports(bad, "wxstats.core.planted")
    assert found == {"wxstats.cli", "wxstats.runtime.run"}
    assert _layer("wxstats.cli") not in ALLOWED["core"]
