"""The package's modules form layers: no module imports, however late, one that imports it.

Imports are read from the source: at module level, inside functions (a late import still
runs) and under ``if TYPE_CHECKING:`` (a type-only import still ties two modules: neither
can be read, type-checked or moved without the other). A circle would mean two modules that
cannot be read, tested or changed one without the other.
"""

import ast
from pathlib import Path

import pytest

import safeact

PACKAGE = Path(safeact.__file__).resolve().parent
"""The package as imported: the tree's, or the installed wheel's in CI's artifact step."""


def imports(path: Path) -> set[str]:
    """The ``safeact`` modules (and names) ``path`` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            # A relative import (``from ._store import Store``) is of the package's own.
            module = (
                "safeact" + (f".{node.module}" if node.module else "")
                if node.level
                else node.module
            )
            if module and module.startswith("safeact"):
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("safeact"))
    return found


def graph() -> dict[str, set[str]]:
    """Each module of the package, and the modules of the package it imports."""
    modules = {f"safeact.{path.stem}": path for path in PACKAGE.glob("*.py")}
    modules["safeact"] = modules.pop("safeact.__init__")
    return {
        name: {target for target in imports(path) if target in modules and target != name}
        for name, path in modules.items()
    }


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle of imports through each group of modules that import each other.

    A group is the modules each of which reaches every other one; its circle starts at its
    first module (by name) and goes the shortest way round, the first module again last.
    """
    reach = {name: _reached(edges, name) for name in edges}
    found: list[list[str]] = []
    placed: set[str] = set()
    for start in sorted(edges):
        group = {name for name in reach[start] if start in reach[name]}
        if start in placed or not group:
            continue
        placed |= group
        found.append(_shortest_way_round(edges, start, group))
    return found


def _reached(edges: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(edges[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges.get(name, ()))
    return seen


def _shortest_way_round(edges: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """The shortest path from ``start`` back to it, through ``group`` (breadth first)."""
    paths = [[start]]
    while paths:
        longer = []
        for path in paths:
            for target in sorted(edges[path[-1]] & group):
                if target == start:
                    return [*path, start]
                if target not in path:
                    longer.append([*path, target])
        paths = longer
    raise AssertionError(f"{start} is in no circle")  # pragma: no cover - reach says it is


def test_no_module_of_the_package_imports_one_that_imports_it() -> None:
    """No circle of imports, late and type-only ones included; each circle found is named."""
    edges = graph()
    # The package itself re-exports: it imports everything and nothing imports it.
    edges = {name: targets - {"safeact"} for name, targets in edges.items()}
    found = [f"import circle: {' -> '.join(circle)}" for circle in circles(edges)]
    assert not found, "\n".join(found)


def test_nothing_in_the_package_imports_the_package_itself() -> None:
    """Only users import ``safeact``: a module of it that did would sit in a circle unseen."""
    assert sorted(name for name, targets in graph().items() if "safeact" in targets) == []


def test_the_check_sees_late_type_only_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: an import in a function, under TYPE_CHECKING or relative counts."""
    late = tmp_path / "late.py"
    late.write_text("def f():\n    from safeact._store import Store\n")
    typed = tmp_path / "typed.py"
    typed.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from safeact._store import X\n"
    )
    relative = tmp_path / "relative.py"
    relative.write_text("from ._store import X\nfrom . import _ledger\n")
    assert "safeact._store" in imports(late)
    assert "safeact._store" in imports(typed)
    assert {"safeact._store", "safeact._ledger"} <= imports(relative)


def test_the_check_names_every_circle_the_shortest_way_round() -> None:
    """One circle per group of modules that import each other, from its first module."""
    edges = {
        "a": {"b"},
        "b": {"c", "a"},
        "c": {"a"},
        "d": {"e"},
        "e": {"d"},
        "f": {"a"},
    }
    assert circles(edges) == [["a", "b", "a"], ["d", "e", "d"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("name", ["safeact._ledger", "safeact._store", "safeact._protocol"])
def test_the_low_layers_import_no_backend(name: str) -> None:
    """The key's rules and the store's base know no backend: the backends build on them."""
    assert not {"safeact._sqlite", "safeact._postgres", "safeact._open"} & graph()[name]


DESIGN = Path(__file__).resolve().parent.parent / "DESIGN.md"


def layers() -> dict[str, int]:
    """Each module's row in DESIGN.md's map of the package, counted from the top."""
    text = DESIGN.read_text()
    table = text[text.index("| layer | modules | job |") :].split("\n\n", 1)[0]
    placed: dict[str, int] = {}
    for row, line in enumerate(table.splitlines()[2:]):
        for name in line.split("|")[2].replace("`", "").split(","):
            stem = name.strip()
            placed["safeact" if stem == "safeact" else f"safeact.{stem}"] = row
    return placed


def test_every_import_goes_up_the_map_of_the_package() -> None:
    """A module imports only modules of its own row or the rows above it in DESIGN's map."""
    placed = layers()
    edges = graph()
    assert sorted(set(edges) - set(placed)) == [], "modules DESIGN.md's map does not place"
    downward = sorted(
        f"{name} -> {target}"
        for name, targets in edges.items()
        for target in targets
        if placed[target] > placed[name]
    )
    assert downward == []
