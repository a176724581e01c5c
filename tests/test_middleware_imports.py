"""The first-party middleware's modules import each other without a circle.

Walked statically (``ast``), every import counted, those under ``TYPE_CHECKING`` and inside
functions too: a circle there is a circle in the design (a part that reads its owner).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIDDLEWARE = ROOT / "middleware"
PACKAGE = "resilient_agent.middleware"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(MIDDLEWARE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(MIDDLEWARE.rglob("*.py"))}


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The middleware modules ``name`` (at ``path``) imports."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                # a module's own package is one level up; a package's is itself
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # ``from .package import module`` imports that module
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node) :], node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(graph[node]):
            found = visit(target)
            if found:
                return found
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node)
        if found:
            return found
    return None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imported(name, path, known) for name, path in modules.items()}
    # a package's __init__ importing its own modules is not a circle with them: a module of
    # the package importing a sibling does not run through the __init__ it already is in
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(f"{t}.")}
    return graph


def test_no_import_circle_among_the_middleware_modules() -> None:
    graph = _graph()
    assert f"{PACKAGE}.turn_keeper.keeper" in graph
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or ())


def test_the_walk_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]


def test_no_turn_keeper_part_imports_the_keeper() -> None:
    graph = _graph()
    keeper = f"{PACKAGE}.turn_keeper.keeper"
    parts = [m for m in graph if m.startswith(f"{PACKAGE}.turn_keeper.") and m != keeper]
    assert parts
    for part in parts:
        assert keeper not in graph[part], f"{part} imports the keeper"
