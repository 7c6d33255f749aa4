"""The house's shape holds: imports read from the source (``ast``, imports inside functions
included, ``if TYPE_CHECKING:`` blocks excluded) form no circle, and point one way:
``blackops -> projections, replay -> journal -> domain``; inside ``blackops`` the edges
(``http``, ``cli``, ``console``) are imported by nothing below them, and the engine
packages keep to their own concerns (architecture.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "journal", "projections", "replay", "blackops")
#: What each top-level package may import of ours (besides itself).
MAY_IMPORT = {
    "domain": set(),
    "journal": {"domain"},
    "projections": {"journal", "domain"},
    "replay": {"journal", "domain"},
    "blackops": {"projections", "replay", "journal", "domain"},
}
#: Inside blackops: subpackages that must not import these others (never, even in a function).
FORBIDDEN_INSIDE = {
    "blackops.operations": ("blackops.workflows", "blackops.control", "blackops.http",
                            "blackops.cli", "blackops.application", "blackops.worker"),
    "blackops.workflows": ("blackops.operations", "blackops.control", "blackops.http",
                           "blackops.cli", "blackops.application", "blackops.worker"),
    "blackops.control": ("blackops.http", "blackops.cli", "blackops.application"),
    "blackops.runtime": ("blackops.control", "blackops.http", "blackops.cli",
                         "blackops.application", "blackops.worker"),
    "blackops.worker": ("blackops.control", "blackops.http", "blackops.cli",
                        "blackops.application"),
    "blackops.application": ("blackops.http", "blackops.cli"),
    "blackops.audit": ("blackops.operations", "blackops.workflows", "blackops.control",
                       "blackops.http", "blackops.cli", "blackops.application",
                       "blackops.worker"),
    "blackops.http": ("blackops.cli",),
    "blackops.console": ("blackops.cli",),
    "blackops.observability": ("blackops.operations", "blackops.workflows", "blackops.control",
                               "blackops.http", "blackops.cli", "blackops.application",
                               "blackops.worker"),
}  # fmt: skip
#: Modules domain/ may not import: it is pure (architecture.md).
IO_MODULES = ("os", "sqlite3", "psycopg", "socket", "subprocess", "eventsourcing", "threading",
              "multiprocessing", "fastapi", "uvicorn", "httpx", "pathlib")  # fmt: skip


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.AST, typing_only: bool = False) -> Iterator[tuple[str, int]]:
    """``(dotted name, line)`` of every import, however deep, outside TYPE_CHECKING (inside
    it too with ``typing_only``)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node) and not typing_only:
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno
            yield node.module, node.lineno
        stack.extend(ast.iter_child_nodes(node))


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The most specific module of ours that ``name`` names (``a.b.C`` -> ``a.b``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def graph(typing_only: bool = False) -> dict[str, dict[str, int]]:
    """Module -> the modules of ours it imports (and the line); ``typing_only``: imports made
    for the type checker only count too."""
    known = modules()
    edges: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets: dict[str, int] = {}
        for name, line in imported_names(tree, typing_only):
            target = resolve(name, known)
            # A package's __init__ is not an edge of its own submodules' imports.
            if target is not None and target != module and not module.startswith(target + "."):
                targets.setdefault(target, line)
        edges[module] = targets
    return edges


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_product_packages_have_no_import_circles() -> None:
    assert circles(graph()) == []


def test_not_even_through_imports_for_the_type_checker() -> None:
    """A module that needs another's type only (``if TYPE_CHECKING:``) is still drawn
    depending on it: a shared type lives where both can import it (journal/appends.py,
    domain/operation_types.py) or is a Protocol of what the user needs."""
    assert circles(graph(typing_only=True)) == []


def test_imports_point_one_way_between_the_top_level_packages() -> None:
    wrong = [
        f"{module} imports {target} (line {line})"
        for module, targets in graph().items()
        for target, line in targets.items()
        if (top := module.split(".")[0]) != (other := target.split(".")[0])
        and other not in MAY_IMPORT[top]
    ]
    assert wrong == []


def test_inside_blackops_no_package_reaches_above_its_layer() -> None:
    wrong = [
        f"{module} imports {target} (line {line})"
        for module, targets in graph().items()
        for prefix, banned in FORBIDDEN_INSIDE.items()
        if module == prefix or module.startswith(prefix + ".")
        for target, line in targets.items()
        if any(target == b or target.startswith(b + ".") for b in banned)
    ]
    assert wrong == []


def test_domain_does_no_io() -> None:
    wrong = []
    for module, path in modules().items():
        if module.split(".")[0] != "domain":
            continue
        for name, line in imported_names(ast.parse(path.read_text(encoding="utf-8"))):
            if name.split(".")[0] in IO_MODULES:
                wrong.append(f"{module} imports {name} (line {line})")
    assert wrong == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import a.b\n", {"a.b"}),
        ("def f():\n    from a import b\n", {"a", "a.b"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a.b\n", set()),
    ],
)
def test_the_reader_sees_function_imports_and_skips_type_checking(
    source: str, expected: set[str]
) -> None:
    names = {name for name, _ in imported_names(ast.parse(source))}
    assert names - {"typing", "typing.TYPE_CHECKING"} == expected


def test_a_circle_is_found_when_there_is_one() -> None:
    edges = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert circles(edges) == [["a", "b", "c"]]
