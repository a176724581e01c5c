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
from typing import Any

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


def test_the_testing_guide_mock_example_runs_as_written(tmp_path: Path) -> None:
    (example,) = [b for b in fenced(ROOT / "docs" / "testing.md", "python") if "tool_mocks=" in b]
    (tmp_path / "test_orders.py").write_text(example, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_middleware_guide_keeps_the_defaults_when_adding_one() -> None:
    blocks = fenced(ROOT / "docs" / "middleware.md", "python")
    (writing,) = [b for b in blocks if "class NoToolsWhileCallerSpeaks" in b]
    (around_defaults,) = [b for b in blocks if "without_watchdog" in b]
    names: dict[str, object] = {}
    exec(writing, names)
    exec(around_defaults, names)

    def classes(chain: object) -> list[str]:
        return [type(m).__name__ for m in chain]  # type: ignore[attr-defined]

    first_party = [
        "ToolGuard",
        "TurnKeeper",
        "WaitForCaller",
        "RealtimeInputHold",
        "SilentTurnGuard",
        "ConditionalHangup",
        "SttRecovery",
        "LlmFallback",
        "Watchdog",
        "ContextIntegrity",
    ]
    assert set(first_party) <= set(classes(names["agent"].middleware))  # type: ignore[attr-defined]
    assert "NoToolsWhileCallerSpeaks" in classes(names["add"])
    assert "Watchdog" not in classes(names["without_watchdog"])
    assert classes(names["configured"]) == first_party
    reordered = classes(names["reordered"])
    assert reordered.index("NoToolsWhileCallerSpeaks") == reordered.index("TurnKeeper") - 1


# Documented commands CI cannot run, and why. Every other fenced shell command must be run by
# .ci/ or a test exactly as written.
NOT_RUN_IN_CI = {
    "python src/agent.py console": "talks to a person: needs API keys and an audio device",
    "uv lock": "uv is not installed in CI; `python -m pip install -e '.[dev]'` is run instead",
    "docker build -t {{ cookiecutter.project_slug }} .": "needs a Docker daemon",
    "lk agent deploy": "needs the LiveKit CLI and a LiveKit Cloud project",
    "pip install 'resilient-agent[speech]'": "needs resilient-agent on a package index; CI "
    "installs the same extra from the checkout (-e '.[dev,speech]')",
    "scripts/test-livekit-version.sh 1.9.0": "a venv per livekit-agents release, minutes each: "
    "run by hand, not by .ci/run",
    "scripts/test-livekit-version.sh newest -x -q": "a venv per livekit-agents release, minutes "
    "each: run by hand, not by .ci/run",
    "PYTHON=/root/.pyenv/versions/3.13.0/bin/python scripts/test-livekit-version.sh 1.8.0": (
        "a Python installed at that path, and a venv per release: run by hand"
    ),
}
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "templates" / "resilient-agent-app" / "README.md",
    ROOT / "templates" / "resilient-agent-app" / "{{cookiecutter.project_slug}}" / "README.md",
    ROOT / "examples" / "resilient-agent-example-plugin" / "README.md",
]


def documented_commands() -> dict[str, str]:
    """Each fenced shell command (comments dropped) and the document it comes from."""
    commands = {}
    for path in DOCUMENTS:
        for block in fenced(path, "bash", "sh", "shell", "console"):
            for line in block.splitlines():
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command and not command.startswith("#"):
                    commands[command] = str(path.relative_to(ROOT))
    return commands


def commands_run() -> set[str]:
    """Every line .ci/ runs (without a subshell's parentheses) and every string tests run."""
    lines = set()
    for script in (ROOT / ".ci").iterdir():
        for line in script.read_text(encoding="utf-8").splitlines():
            lines.add(re.sub(r"\s+#.*$", "", line).strip().strip("()").strip())
    for test in (ROOT / "tests").glob("test_*.py"):
        lines |= set(re.findall(r'"([^"\n]+)"', test.read_text(encoding="utf-8")))
    return lines


def test_every_documented_command_is_run_as_written() -> None:
    commands = documented_commands()
    run = commands_run()
    missing = {
        command: where
        for command, where in commands.items()
        if command not in run and command not in NOT_RUN_IN_CI
    }
    assert not missing, (
        f"documented commands that nothing runs as written: {missing}; run each in .ci/run, "
        ".ci/template or a test exactly as written, or name it in NOT_RUN_IN_CI with why"
    )
    # no stale exceptions
    assert set(NOT_RUN_IN_CI) <= set(commands)


def _readme_part(start: str, end: re.Pattern[str]) -> str:
    """The README's text from the line starting with ``start`` to the next line matching ``end``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = text.index(f"\n{start}") + 1
    stop = end.search(text, first + len(start))
    return text[first : stop.start() if stop else len(text)]


_HEADING = re.compile(r"^#{1,3} ", re.M)
_BLANK_LINE = re.compile(r"^$", re.M)

_FAMILY_CELL = re.compile(r"^`(\w+)`( \(controls\))?$")
_COUNT_CELL = re.compile(r"^(\d+) of (\d+) (fail|pass)\b")


def test_the_readme_family_table_counts_the_catalog() -> None:
    """The README's "What it shows today" table has one row per family of the catalog.

    A row ``tool_gap`` counts that family's races, ``workflows (controls)`` a family's controls,
    and ``control`` the controls family. Each row's counts must equal the catalog's, so adding,
    removing or moving a scenario fails here until the README is updated. The verdicts the counts
    claim are enforced by tests/test_lab.py: every race (``test_every_race_is_specified``: the
    races are exactly ``EXPECTED_BREAKS``) fails on plain ``Agent``
    (``test_race_reproduces_on_plain_agent``) and passes on ``ResilientAgent``
    (``test_resilient_agent_passes_the_race_with_the_app_code_unchanged``, with
    ``NOT_YET_HANDLED`` empty), and every control passes on plain ``Agent``
    (``test_control_passes_on_plain_agent``) and identically on ``ResilientAgent``
    (tests/test_resilient_agent.py, ``test_controls_behave_identically_on_resilient_agent``).
    """
    from collections import Counter

    from resilient_agent.lab.catalog import scenarios

    catalog = Counter((s.family, s.control) for s in scenarios())
    rows: dict[tuple[str, bool], tuple[str, str]] = {}
    for line in _readme_part("### What it shows today", _HEADING).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = _FAMILY_CELL.match(cells[0])
        if not match:
            continue
        family, controls = match.group(1), bool(match.group(2)) or match.group(1) == "control"
        assert (family, controls) not in rows, f"two rows for {cells[0]}"
        rows[(family, controls)] = (cells[2], cells[3])
    assert set(rows) == set(catalog), (
        f"README rows {sorted(rows)} vs the catalog's families {sorted(catalog)}"
    )
    for key, (plain, resilient) in rows.items():
        count = catalog[key]
        plain_verdict = "pass" if key[1] else "fail"
        for cell, verdict in ((plain, plain_verdict), (resilient, "pass")):
            match = _COUNT_CELL.match(cell)
            assert match, f"{key}: {cell!r} does not start with 'N of N {verdict}'"
            assert match.groups() == (str(count), str(count), verdict), (
                f"{key}: the README says {cell!r}, the catalog has {count} ({verdict} expected)"
            )
    lab_tests = (ROOT / "tests" / "test_lab.py").read_text(encoding="utf-8")
    assert "NOT_YET_HANDLED: set[str] = set()" in lab_tests, (
        "a race ResilientAgent does not handle yet: the README's 'N of N pass' is no longer true"
    )


def test_the_readme_call_count_is_the_catalogs() -> None:
    """The race lab's paragraph states the lab's scenario and call counts: each scenario is run
    on plain ``Agent`` and on ``ResilientAgent``, so the lab prints 2 x scenarios calls."""
    from resilient_agent.lab.catalog import scenarios

    paragraph = _readme_part("`resilient-agent lab` (also", _BLANK_LINE)
    assert set(re.findall(r"(\d+) scenarios", paragraph)) == {str(len(scenarios()))}
    assert set(re.findall(r"(\d+) calls", paragraph)) == {str(2 * len(scenarios()))}


def test_the_middleware_guide_offers_a_service_through_the_context() -> None:
    import asyncio

    from resilient_agent import ConversationState, MiddlewareContext

    (block,) = [
        b for b in fenced(ROOT / "docs" / "middleware.md", "python") if "class NoteKeeper" in b
    ]
    names: dict[str, Any] = {}
    exec(block, names)
    ctx = MiddlewareContext(
        session=None,  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=lambda _event: None,
    )
    keeper, taker = names["NoteKeeper"](), names["NoteTaker"]()

    async def session() -> None:
        await taker.on_session_start(ctx)  # nobody offers it yet: nothing happens
        await keeper.setup(ctx)
        await taker.on_session_start(ctx)

    asyncio.run(session())
    assert keeper.notes == ["call started"]
    assert ctx.service(names["CallerNotes"]) is keeper
    ctx.release(keeper)  # what the chain does when the keeper closes
    assert ctx.service(names["CallerNotes"]) is None
