"""The library keeps no process-wide mutable state: every session's state is its own.

A module-level ``dict``, ``set``, ``list`` (or a call that builds one: ``defaultdict()``,
``WeakValueDictionary()``, ``deque()``, ...) is shared by every session of a worker process,
outlives them, and is how one call's state leaks into the next. The scan reads the source of
``resilient_agent/`` and ``middleware/`` (the library; ``testing`` and ``lab`` included) and fails
on any module-level assignment of a mutable value. A true constant is written as an immutable
value (a tuple, a ``frozenset``, a ``MappingProxyType``); the allow-list below names the few that
cannot be, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = (ROOT / "resilient_agent", ROOT / "middleware")

# Literals and calls that build a mutable container.
_MUTABLE_LITERALS = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)
_MUTABLE_CALLS = frozenset(
    {
        "dict",
        "set",
        "list",
        "bytearray",
        "defaultdict",
        "OrderedDict",
        "Counter",
        "deque",
        "ChainMap",
        "WeakValueDictionary",
        "WeakKeyDictionary",
        "WeakSet",
    }
)

# (module path relative to the repository, name): why it may stay process-wide. Each is about
# the process itself (its installed packages, its temporary files, its one meter provider, a
# warning given once per process), never about one session.
ALLOWED: dict[tuple[str, str], str] = {
    (
        "resilient_agent/_engine/plugins.py",
        "_installed_cache",
    ): "the process's installed entry points",
    (
        "resilient_agent/_engine/plugins.py",
        "_resolved_cache",
    ): "the plugins those entry points import",
    (
        "resilient_agent/_livekit/versions.py",
        "_version_checked",
    ): "livekit's installed version is checked once",
    (
        "resilient_agent/_livekit/versions.py",
        "_missing_reported",
    ): "a missing livekit name is reported once",
    ("resilient_agent/_livekit/shutdown.py", "_warned_about_sleeping"): "a once-per-process hint",
    (
        "resilient_agent/_session/tracing.py",
        "_trace_content",
    ): "the app's process-wide tracing switch",
    (
        "resilient_agent/_session/tracing.py",
        "_instruments",
    ): "instruments of the process's meter provider",
    (
        "resilient_agent/testing/pocketsphinx_stt.py",
        "_FOLDERS",
    ): "temporary folders removed at exit",
    ("resilient_agent/lab/explore.py", "_CATALOG"): "the lab's catalog, built once per process",
    ("resilient_agent/testing/clock.py", "_models_patched"): "livekit's model classes patched once",
}


def _files() -> list[Path]:
    found: list[Path] = []
    for top in LIBRARY:
        found.extend(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(set(found))


def _call_name(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_mutable(value: ast.expr | None) -> bool:
    if value is None:
        return False
    if isinstance(value, _MUTABLE_LITERALS):
        return True
    return _call_name(value) in _MUTABLE_CALLS


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def module_level_mutables(path: Path) -> list[tuple[str, int]]:
    """The names of a module's mutable state, with their lines.

    A name bound to a mutable value at the top level, or rebound from a function (``global``).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if _is_mutable(value):
            found.extend((name, node.lineno) for name in _targets(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.extend((name, node.lineno) for name in node.names)
    return found


def _relative(path: Path) -> str:
    # resilient_agent/middleware is a link to middleware/: name the real file
    return path.resolve().relative_to(ROOT).as_posix()


def test_the_library_keeps_no_module_level_mutable_state() -> None:
    offenders = [
        f"{_relative(path)}:{line}: {name}"
        for path in _files()
        for name, line in module_level_mutables(path)
        if (_relative(path), name) not in ALLOWED and name != "__all__"
    ]
    assert not offenders, (
        "module-level mutable state (shared by every session of the process): keep it in the "
        "session's runtime, or make a constant immutable (tuple, frozenset, MappingProxyType):\n"
        + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("_SEEN = set()", "_SEEN"),
        ("_BY_ID: dict[int, str] = {}", "_BY_ID"),
        ("_QUEUE = collections.deque()", "_QUEUE"),
        ("_CACHE = weakref.WeakValueDictionary()", "_CACHE"),
        ("_NAMES = [n for n in range(3)]", "_NAMES"),
        ("def warn():\n    global _WARNED\n    _WARNED = True", "_WARNED"),
    ],
)
def test_the_scan_finds_mutable_state(source: str, name: str, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert [found for found, _ in module_level_mutables(module)] == [name]


@pytest.mark.parametrize(
    "source",
    [
        "_NAMES = ('a', 'b')",
        "_NAMES = frozenset({'a'})",
        "HOOKS = MappingProxyType({'a': 1})",
        "LIMIT = 3",
    ],
)
def test_the_scan_lets_constants_pass(source: str, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert module_level_mutables(module) == []
