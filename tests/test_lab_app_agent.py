"""``resilient-agent lab --agent myapp:MyAgent`` on an app's own agent class."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.cli import main
from resilient_agent.lab.app_agent import AppClassError, catalog_base, scenario_mismatch
from resilient_agent.lab.catalog import scenarios

ROOT = Path(__file__).resolve().parents[1]
# the README's walkthrough, run as written from the directory holding myapp.py
COMMAND = "resilient-agent lab --agent myapp:MyAgent"


def _readme_myapp() -> str:
    """The README's ``myapp.py``: the walkthrough is tested as written."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Your own agent in the lab") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


def test_lab_runs_an_apps_own_agent_from_its_directory(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(_readme_myapp())
    program, *arguments = shlex.split(COMMAND)
    done = subprocess.run(
        [str(Path(sys.executable).parent / program), *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert done.returncode == 0, output
    assert "MyAgent() takes no instructions" in done.stdout
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) >= 25
    # the scenarios bringing their own end_call tool say why they cannot run next to the app's
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIP")]
    # (livekit's EndCallTool scenarios pass it in tools=..., which MyAgent() cannot take)
    reasons = ("duplicate function name: end_call", "passed ['tools'] that MyAgent() cannot take")
    assert skips and all(any(r in line for r in reasons) for line in skips)
    assert f"{len(skips)} scenario(s) skipped" in done.stdout


class NeedsArguments(ResilientAgent):
    def __init__(self, database: object) -> None:
        super().__init__(instructions="x")


class TakesInstructions(ResilientAgent):
    def __init__(self, instructions: str = "mine") -> None:
        super().__init__(instructions=instructions)


class NoArguments(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="the app's own")


def test_a_class_taking_instructions_is_used_as_it_is() -> None:
    assert catalog_base(TakesInstructions).cls is TakesInstructions
    assert catalog_base(ResilientAgent).note is None


def test_a_no_argument_class_gets_the_scenario_code_on_top_of_its_own() -> None:
    base = catalog_base(NoArguments)
    assert base.cls is not NoArguments and issubclass(base.cls, NoArguments)
    assert base.note is not None and "NoArguments() takes no instructions" in base.note
    agent = next(s for s in scenarios() if s.name == "tool_gap/gap_protected_say").agent(base.cls)
    assert isinstance(agent, NoArguments)
    assert agent.instructions == "the app's own"
    assert "book_table" in {getattr(t, "id", None) for t in agent.tools}


def test_a_class_needing_arguments_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(AppClassError, match="needs database"):
        catalog_base(NeedsArguments)
    assert main(["lab", "--agent", f"{__name__}:NeedsArguments"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "NeedsArguments() needs database" in err[0]


def test_scenario_mismatch_is_none_for_the_defaults() -> None:
    assert all(scenario_mismatch(s, ResilientAgent) is None for s in scenarios())
