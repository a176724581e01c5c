"""``resilient-agent lab --agent myapp:MyAgent`` on an app's own agent class."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import Agent, llm
from livekit.agents.beta.tools import EndCallTool

from resilient_agent import ResilientAgent
from resilient_agent.lab.app_agent import AppClassError, catalog_base, scenario_mismatch
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.results import print_summary
from resilient_agent.lab.run import AgentUnderTest

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


def _readme_own_tools_sample() -> list[str]:
    """The output lines the README shows for the walkthrough's app ("..." elides some)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("The lab then races **your own tools**") :]
    found = re.search(r"```\n(.*?)```", section, re.S)
    assert found is not None
    return [line for line in found.group(1).splitlines() if line != "..."]


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
    # every catalog scenario runs on the app's class, end-call ones included: a scenario's tool
    # replaces the app's tool (or toolset) of the same name
    assert "SKIP" not in done.stdout
    # and the app's own tools are raced in each of their windows
    assert "tool book_table(time='example'): windows gap" in done.stdout
    assert "tool end_call(), ends the call: windows gap" in done.stdout
    # the README's sample of that output is what the command prints
    for line in _readme_own_tools_sample():
        assert line in done.stdout.splitlines(), line
    own = [line for line in verdicts if "app_tool/" in line]
    assert {line.split()[1] for line in own} >= {
        "app_tool/book_table/speech",
        "app_tool/end_call/goodbye",
        "app_tool/end_call/after_goodbye",
    }


class NeedsArguments(ResilientAgent):
    def __init__(self, database: object) -> None:
        super().__init__(instructions="x")


class TakesInstructions(ResilientAgent):
    def __init__(self, instructions: str = "mine") -> None:
        super().__init__(instructions=instructions)


class NoArguments(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="the app's own")


class TakesBoth(ResilientAgent):
    def __init__(self, instructions: str = "mine", tools: list[Any] | None = None) -> None:
        super().__init__(instructions=instructions, tools=tools or [])


class EndsCalls(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="the app's own", tools=[EndCallTool()])


def test_a_class_taking_instructions_and_tools_is_used_as_it_is() -> None:
    assert catalog_base(TakesBoth).cls is TakesBoth
    assert catalog_base(ResilientAgent).note is None


@pytest.mark.parametrize("cls", [TakesInstructions, NoArguments, EndsCalls])
def test_every_scenario_builds_on_a_class_that_cannot_take_its_tools(cls: type[Agent]) -> None:
    base = catalog_base(cls)
    assert base.note is not None and "takes no" in base.note
    # livekit's EndCallTool of the app goes where a scenario brings its own end_call
    assert [s.name for s in scenarios() if scenario_mismatch(s, base.cls)] == []


def test_a_scenario_tool_replaces_the_apps_toolset_of_that_name() -> None:
    base = catalog_base(EndsCalls).cls
    scenario = next(s for s in scenarios() if s.name == "end_call/question_during_sleep_protected")
    agent = scenario.agent(base)
    tools = llm.ToolContext(agent.tools)
    assert isinstance(agent, EndsCalls) and agent.instructions == "the app's own"
    # the scenario's own end_call method, not livekit's toolset
    assert tools.toolsets == [] and "end_call" in tools.function_tools


def test_a_skipped_scenario_keeps_its_row_in_the_summary() -> None:
    agent = AgentUnderTest("x:Y", NoArguments)
    out = io.StringIO()
    print_summary([], [agent], out, [("tool_gap/some_race", "x:Y")])
    row = next(line for line in out.getvalue().splitlines() if "tool_gap/some_race" in line)
    assert row.split()[-1] == "SKIP"
    assert "0 passed, 0 failed, 1 skipped" in out.getvalue()


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
