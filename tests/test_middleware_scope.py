"""First-party middleware keep no state outside the session's context and hear audio through it."""

from __future__ import annotations

import ast
from pathlib import Path

MIDDLEWARE = Path(__file__).parent.parent / "middleware"

# module-level values that can be changed in place (state that would outlive a session)
_MUTABLE_CALLS = {"dict", "list", "set", "deque", "defaultdict", "WeakKeyDictionary", "WeakSet"}


def _module_level_mutables(tree: ast.Module) -> list[str]:
    found = []
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if not names or names == ["__all__"] or value is None:
            continue
        call = value.func if isinstance(value, ast.Call) else None
        called = getattr(call, "id", None) or getattr(call, "attr", None)
        if isinstance(value, (ast.Dict, ast.List, ast.Set)) or called in _MUTABLE_CALLS:
            found.append(f"{names[0]} (line {node.lineno})")
    return found


def test_no_module_level_mutable_state_in_middleware() -> None:
    offenders = {
        path.name: found
        for path in sorted(MIDDLEWARE.glob("*.py"))
        if (found := _module_level_mutables(ast.parse(path.read_text())))
    }
    assert offenders == {}, "carry state through ctx.carry/ctx.take or ctx.shared instead"


def test_no_middleware_puts_its_own_feed_into_the_sessions_audio_input() -> None:
    for path in sorted(MIDDLEWARE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", None) or getattr(b, "attr", None) for b in node.bases}
                assert "AudioInput" not in bases, f"{path.name}: {node.name} is an audio feed"
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    text = ast.unparse(target)
                    assert not text.endswith("input.audio"), f"{path.name}:{node.lineno}: {text}"


def test_the_scan_sees_a_registry_and_a_feed() -> None:
    registry = ast.parse("_LEFT: dict[int, object] = {}\n_FEEDS = weakref.WeakKeyDictionary()\n")
    assert _module_level_mutables(registry) == ["_LEFT (line 1)", "_FEEDS (line 2)"]
    assert _module_level_mutables(ast.parse('__all__ = ["x"]\nLIMIT = 3\n')) == []
