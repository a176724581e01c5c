"""The house rules a maintainer relies on: no import circles, and one caller of the chain."""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import resilient_agent
from resilient_agent import ResilientAgent
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import run_scenario

CORE = Path(resilient_agent.__file__).parent
MIDDLEWARE = CORE.parent / "middleware"
# the public offline lab and its tools: not the core, and free to use the core's public names
NOT_CORE = ("testing", "lab", "middleware")


def _modules(root: Path, package: str, skip: tuple[str, ...] = ()) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts and parts[0] in skip:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([package, *parts])] = path
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of a module: function-local ones, and those for type checkers only (a
    module that names another in its annotations depends on it as much as one that calls it)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        imported: set[str] = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names if alias.name in modules)
                continue
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + int(is_package)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    imported.add(f"{target}.{alias.name}")
                elif target in modules:
                    imported.add(target)
        graph[name] = imported - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize(
    ("root", "package", "skip"),
    [
        (CORE, "resilient_agent", NOT_CORE),
        (MIDDLEWARE, "resilient_agent.middleware", ()),
    ],
    ids=["core", "middleware"],
)
def test_no_import_circle(root: Path, package: str, skip: tuple[str, ...]) -> None:
    circles = _circles(_import_graph(_modules(root, package, skip)))
    assert circles == [], f"modules that import each other in a circle: {circles}"


def test_no_turn_keeper_part_imports_the_keeper() -> None:
    graph = _import_graph(_modules(MIDDLEWARE, "resilient_agent.middleware"))
    keeper = "resilient_agent.middleware.turn_keeper.keeper"
    parts = [m for m in graph if m.startswith("resilient_agent.middleware.turn_keeper.")]
    assert keeper in parts
    for part in parts:
        assert keeper not in graph[part] or part == keeper, f"{part} imports the keeper"


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import z\n"
    )
    (tmp_path / "d.py").write_text("from .c import w\n")
    (tmp_path / "e.py").write_text("from .a import v\n")
    graph = _import_graph(_modules(tmp_path, "p"))
    assert sorted(_circles(graph)) == [["p.a", "p.b"], ["p.c", "p.d"]]


# the rooms the engine sits under: it is told about the session and livekit's replaced behaviour
# through what it is given (protocols, callables), never by importing them
_ABOVE_THE_ENGINE = ("resilient_agent._session", "resilient_agent._livekit")


def _reaches_above_the_engine(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    engine = {m: found for m, found in graph.items() if m.startswith("resilient_agent._engine")}
    return {
        module: sorted(m for m in found if m.startswith(_ABOVE_THE_ENGINE))
        for module, found in engine.items()
        if any(m.startswith(_ABOVE_THE_ENGINE) for m in found)
    }


def test_the_engine_imports_neither_the_session_nor_the_interceptions() -> None:
    graph = _import_graph(_modules(CORE, "resilient_agent", NOT_CORE))
    assert "resilient_agent._engine.state" in graph
    assert _reaches_above_the_engine(graph) == {}


def test_the_engine_check_sees_a_type_checking_import(tmp_path: Path) -> None:
    engine = tmp_path / "_engine"
    engine.mkdir()
    (engine / "__init__.py").write_text("")
    (engine / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .._session.b import X\n"
    )
    (engine / "c.py").write_text("def f():\n    from .._livekit import d\n")
    for room, module in (("_session", "b"), ("_livekit", "d")):
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
        (tmp_path / room / f"{module}.py").write_text("X = 1\n")
    graph = _import_graph(_modules(tmp_path, "resilient_agent"))
    assert _reaches_above_the_engine(graph) == {
        "resilient_agent._engine.a": ["resilient_agent._session.b"],
        "resilient_agent._engine.c": ["resilient_agent._livekit.d"],
    }


# -- one caller of the chain ------------------------------------------------------------------
_DISPATCH = (
    "handles",
    "listeners",
    "notify",
    "decide",
    "wrap_tool_call",
    "wrap_user_turn",
    "wrap_llm_request",
    "report_error",
    "without",
)
_CHAIN_RUN = str(CORE / "_session" / "chain_run.py")
_CHAIN = str(CORE / "_engine" / "chain.py")
# a call that covers every kind of hook: tool calls with protected speech, interrupts, a handoff,
# inferences, user turns, a hang-up decided by the chain, and setup and close
_COVERING = (
    "tool_gap/gap_disallow_and_say",
    "lost_words/handoff_during_protected_hold",
    "end_call/question_over_farewell_end_protected",
    "lost_words/typed_over_filler_with_reply_queued",
)


def _recording_callers(
    monkeypatch: pytest.MonkeyPatch, seen: dict[str, set[str]]
) -> Callable[[], None]:
    for name in _DISPATCH:
        method = getattr(MiddlewareChain, name)

        def recording(
            self: MiddlewareChain, *args: Any, _method: Any = method, _name: str = name, **kw: Any
        ) -> Any:
            caller = sys._getframe(1).f_code.co_filename
            seen.setdefault(_name, set()).add(caller)
            return _method(self, *args, **kw)

        monkeypatch.setattr(MiddlewareChain, name, recording)
    return monkeypatch.undo


def test_only_the_chain_run_calls_the_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, set[str]] = {}
    _recording_callers(monkeypatch, seen)
    by_name = {s.name: s for s in scenarios()}
    for name in _COVERING:
        _, outcome = run_scenario(by_name[name], ResilientAgent)
        assert outcome.passed, (name, outcome.reasons)
    hooks_called = {name for name in seen if name != "listeners"}
    assert {"decide", "wrap_tool_call", "wrap_llm_request", "wrap_user_turn"} <= hooks_called
    outside = {
        name: sorted(caller for caller in callers if caller not in (_CHAIN_RUN, _CHAIN))
        for name, callers in seen.items()
    }
    assert {name: callers for name, callers in outside.items() if callers} == {}


def test_the_caller_check_sees_a_call_from_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, set[str]] = {}
    _recording_callers(monkeypatch, seen)
    MiddlewareChain([]).handles("decide_speech")
    assert seen == {"handles": {inspect.getfile(sys.modules[__name__])}}
