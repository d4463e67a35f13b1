"""The package's modules form layers: no module imports, however late, one that imports it.

Imports are read from the source (module level and inside functions alike: a late import
still runs), except those under ``if TYPE_CHECKING:``, which never run. A circle would mean
two modules that cannot be read, tested or changed one without the other.
"""

import ast
from pathlib import Path

import pytest

import safeact

PACKAGE = Path(safeact.__file__).resolve().parent
"""The package as imported: the tree's, or the installed wheel's in CI's artifact step."""


TYPE_ONLY = frozenset({"TYPE_CHECKING", "typing.TYPE_CHECKING"})
"""The tests of an ``if`` whose body runs only under a type checker (``not`` them runs)."""


def imports(path: Path) -> set[str]:
    """The ``safeact`` modules ``path`` imports when it runs."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_ONLY:
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("safeact"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("safeact"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def graph() -> dict[str, set[str]]:
    modules = {f"safeact.{path.stem}": path for path in PACKAGE.glob("*.py")}
    modules["safeact"] = modules.pop("safeact.__init__")
    return {
        name: {target for target in imports(path) if target in modules and target != name}
        for name, path in modules.items()
    }


def circle(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in ``edges`` (the modules in order, the first again last), if any."""
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(edges[node]):
            found = walk(target, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(edges):
        found = walk(start, [])
        if found:
            return found
    return None


def test_no_module_of_the_package_imports_one_that_imports_it() -> None:
    edges = graph()
    # The package itself re-exports: it imports everything and nothing imports it.
    edges = {name: targets - {"safeact"} for name, targets in edges.items()}
    assert circle(edges) is None, " -> ".join(circle(edges) or [])


def test_the_check_sees_a_late_import_and_ignores_a_type_only_one(tmp_path: Path) -> None:
    """The checker itself: a function-level import counts; one under TYPE_CHECKING does not."""
    late = tmp_path / "late.py"
    late.write_text("def f():\n    from safeact._store import Store\n")
    typed = tmp_path / "typed.py"
    typed.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from safeact._store import X\n"
    )
    assert "safeact._store" in imports(late)
    assert imports(typed) == set()
    assert circle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


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
