"""The declared livekit-agents range is one range everywhere, and what happens outside it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from resilient_agent.middleware.watchdog import Watchdog
from structlog.testing import capture_logs

from resilient_agent import ConversationState, MiddlewareContext
from resilient_agent._livekit import versions
from resilient_agent._livekit.versions import (
    TESTED_LIVEKIT_RANGE,
    has_capability,
    livekit_in_tested_range,
    warn_if_untested_livekit,
)

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "resilient-agent-app" / "{{cookiecutter.project_slug}}"
# a livekit distribution with a version range: "livekit-agents>=1.8.0,<1.9"
_RANGE = re.compile(r"(livekit-(?:agents|plugins-[a-z0-9-]+))\s*(>=\s*[0-9.]+\s*,\s*<\s*[0-9.]+)")

# every place that tells a user which livekit-agents to install
STATEMENTS = {
    "pyproject.toml": ROOT / "pyproject.toml",
    "README.md": ROOT / "README.md",
    "docs/versions.md": ROOT / "docs" / "versions.md",
    "template pyproject.toml": TEMPLATE / "pyproject.toml",
    "template AGENTS.md": TEMPLATE / "AGENTS.md",
}


def _project_dependency(path: Path, name: str) -> str:
    # a dependency line of [project]: "livekit-agents>=1.8.0,<1.9", (no tomllib on Python 3.10)
    specs = re.findall(rf'^\s*"{re.escape(name)}([^"]*)",?\s*$', path.read_text(), re.MULTILINE)
    assert len(specs) == 1, f"{path}: expected one {name} dependency, found {specs}"
    return str(specs[0]).replace(" ", "")


def test_pyproject_declares_the_tested_range() -> None:
    declared = _project_dependency(ROOT / "pyproject.toml", "livekit-agents")
    assert declared == TESTED_LIVEKIT_RANGE, (
        f"pyproject.toml declares livekit-agents{declared} but resilient_agent._livekit.versions "
        f"says {TESTED_LIVEKIT_RANGE}: change both together (and docs/versions.md)"
    )


def test_template_pins_the_tested_range_for_livekit_and_its_plugins() -> None:
    path = TEMPLATE / "pyproject.toml"
    assert _project_dependency(path, "livekit-agents") == TESTED_LIVEKIT_RANGE
    for name, spec in _RANGE.findall(path.read_text()):
        assert spec.replace(" ", "") == TESTED_LIVEKIT_RANGE, f"template pins {name}{spec}"


@pytest.mark.parametrize("where", sorted(STATEMENTS))
def test_every_statement_names_the_tested_range_and_no_other(where: str) -> None:
    text = STATEMENTS[where].read_text()
    assert TESTED_LIVEKIT_RANGE in text.replace(" ", ""), (
        f"{where} does not state the tested range livekit-agents{TESTED_LIVEKIT_RANGE}"
    )
    for name, spec in _RANGE.findall(text):
        assert spec.replace(" ", "") == TESTED_LIVEKIT_RANGE, (
            f"{where} states {name}{spec}, the tested range is {TESTED_LIVEKIT_RANGE}"
        )


def test_no_doc_states_another_livekit_range() -> None:
    docs = [*sorted((ROOT / "docs").glob("*.md")), *sorted(TEMPLATE.rglob("*.md"))]
    for path in docs:
        for name, spec in _RANGE.findall(path.read_text()):
            assert spec.replace(" ", "") == TESTED_LIVEKIT_RANGE, f"{path}: {name}{spec}"


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("1.7.1", False),
        ("1.8.0", True),
        ("1.8.9", True),
        ("1.8.10rc1", True),
        ("1.9.0", False),
        ("1.3.10", False),
        ("2.0", False),
    ],
)
def test_tested_range_bounds(version: str, inside: bool) -> None:
    assert livekit_in_tested_range(version) is inside


def test_untested_livekit_is_warned_once_with_version_and_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(versions, "_version_checked", False)
    monkeypatch.setattr(versions, "installed_livekit_version", lambda: "1.7.1")
    with capture_logs() as logs:
        assert warn_if_untested_livekit()
        assert not warn_if_untested_livekit()
    warnings = [r for r in logs if r["event"] == "livekit_version_untested"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["installed"] == "1.7.1"
    assert warnings[0]["tested"] == TESTED_LIVEKIT_RANGE


def test_tested_livekit_is_not_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "_version_checked", False)
    monkeypatch.setattr(versions, "installed_livekit_version", lambda: "1.8.3")
    with capture_logs() as logs:
        assert not warn_if_untested_livekit()
    assert not [r for r in logs if r["event"] == "livekit_version_untested"]


def test_the_installed_version_is_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # reading it parses the package's metadata: no agent after the first pays for it again
    reads: list[str] = []

    def read() -> str:
        reads.append("livekit-agents")
        return "1.8.3"

    monkeypatch.setattr(versions, "_version_checked", False)
    monkeypatch.setattr(versions, "installed_livekit_version", read)
    for _ in range(3):
        assert not warn_if_untested_livekit()
    assert reads == ["livekit-agents"]


def test_missing_capability_is_reported_once_by_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "_missing_reported", set())

    class OldOutput:
        pass

    with capture_logs() as logs:
        for _ in range(3):
            assert not has_capability(
                OldOutput(), "captured_playout_segments", feature="X ledger", livekit_change="1.7"
            )
        assert has_capability(OldOutput(), "__init__", feature="Y", livekit_change="1.7")
    reports = [r for r in logs if r["event"] == "livekit_capability_missing"]
    assert len(reports) == 1
    assert reports[0]["feature"] == "X ledger"
    assert reports[0]["missing"] == "OldOutput.captured_playout_segments"


def test_output_without_segment_count_turns_off_the_ledger_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # livekit-agents 1.6 had no AudioOutput.captured_playout_segments: Watchdog.setup raised
    # AttributeError inside on_enter and no middleware ran. Now only the ledger is off.
    class OldOutput:  # an audio output as livekit 1.6 had it, without the segment count
        label = "old"

    monkeypatch.setattr(versions, "_missing_reported", set())
    session = SimpleNamespace(output=SimpleNamespace(audio=OldOutput()))
    ctx = MiddlewareContext(session=session, agent=None, state=ConversationState(), emit=print)  # type: ignore[arg-type]

    async def enter_twice() -> list[Watchdog]:
        watchdogs = [Watchdog(), Watchdog()]
        for watchdog in watchdogs:
            await watchdog.setup(ctx)
        for watchdog in watchdogs:
            await watchdog.aclose(ctx, "session_end")
        return watchdogs

    with capture_logs() as logs:
        asyncio.run(enter_twice())
    reports = [r for r in logs if r["event"] == "livekit_capability_missing"]
    assert [r["feature"] for r in reports] == ["Watchdog playout ledger"]
    assert reports[0]["missing"] == "OldOutput.captured_playout_segments"


def test_too_old_livekit_fails_the_import_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # livekit-agents 1.5.17 has no llm.ToolFlag, 1.3.10 no llm.Tool either
    from livekit.agents import llm

    monkeypatch.delattr(llm, "ToolFlag")
    monkeypatch.setattr(versions, "installed_livekit_version", lambda: "1.5.17")
    with pytest.raises(ImportError) as raised:
        versions.require_importable_livekit()
    message = str(raised.value)
    assert TESTED_LIVEKIT_RANGE in message and "1.5.17" in message and "llm.ToolFlag" in message


def _commands(path: Path) -> list[str]:
    return [
        line.strip() for line in path.read_text().splitlines() if not line.strip().startswith("#")
    ]


def test_ci_runs_the_version_matrix_on_every_combination_the_range_promises() -> None:
    # the floor pinned exactly on 3.11, the newest release of the range on 3.10 and 3.13; the
    # main job (.ci/run itself) is the newest release on 3.11. It runs the matrix in two halves
    # (the first beside its own steps, the rest after them), which together are every suite
    run = "\n".join(_commands(ROOT / ".ci" / "run"))
    assert "bash .ci/matrix first" in run and "bash .ci/matrix rest" in run
    matrix = _commands(ROOT / ".ci" / "matrix")
    halves = re.findall(r'if \[ "\$part" != (\w+) \]; then\n(.*?)\nfi', "\n".join(matrix), re.S)
    assert [name for name, _ in halves] == ["rest", "first"]
    assert all(body.strip().startswith("suite ") for _, body in halves)
    suites = [line.split()[1:] for line in matrix if line.startswith("suite ")]
    assert suites == [
        ['"$py311"', '"$floor"'],
        ['"$py310"', "newest"],
        ['"$py313"', "newest"],
    ]
    # every test runs in every combination: a failure is fixed, not deselected
    assert not [line for line in matrix if "--deselect" in line or " -k " in line]
