"""The docs' examples and commands work as written.

``docs/testing.md``'s complete example is written out as the two files it names and its tests are
run with the command it gives. Every fenced shell command in the README, the docs and the
template's READMEs is run by a test or by ``.ci/`` exactly as written, or is named here with why
CI cannot run it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def fenced(path: Path, *languages: str) -> list[str]:
    """The fenced blocks of ``path`` in one of ``languages``."""
    text = path.read_text(encoding="utf-8")
    return [body for lang, body in _FENCE.findall(text) if lang in languages]


def test_the_testing_guide_example_runs_as_written(tmp_path: Path) -> None:
    app, tests = fenced(ROOT / "docs" / "testing.md", "python")[:2]
    (tmp_path / "myagent.py").write_text(app, encoding="utf-8")
    (tmp_path / "test_myagent.py").write_text(tests, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_the_middleware_guide_keeps_the_defaults_when_adding_one() -> None:
    blocks = fenced(ROOT / "docs" / "middleware.md", "python")
    (writing,) = [b for b in blocks if "class NoToolsWhileCallerSpeaks" in b]
    (around_defaults,) = [b for b in blocks if "without_watchdog" in b]
    names: dict[str, object] = {}
    exec(writing, names)
    exec(around_defaults, names)

    def classes(chain: object) -> list[str]:
        return [type(m).__name__ for m in chain]  # type: ignore[attr-defined]

    first_party = ["ToolGuard", "TurnKeeper", "WaitForCaller", "ConditionalHangup", "Watchdog"]
    assert set(first_party) <= set(classes(names["agent"].middleware))  # type: ignore[attr-defined]
    assert "NoToolsWhileCallerSpeaks" in classes(names["add"])
    assert "Watchdog" not in classes(names["without_watchdog"])
    assert classes(names["configured"]) == first_party
    reordered = classes(names["reordered"])
    assert reordered.index("NoToolsWhileCallerSpeaks") == reordered.index("TurnKeeper") - 1
