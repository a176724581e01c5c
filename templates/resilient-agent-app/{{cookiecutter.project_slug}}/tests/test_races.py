"""The races on the Assistant's own tools, as ``resilient-agent lab --agent agent:Assistant``.

For every tool of the Assistant (``lookup_weather``, ``end_call``), the lab first runs a quiet
call to find the tool's windows: the gap between the LLM's call and the tool running, its speech,
its work, the reply or the goodbye after it. Then the caller asks a question in each window, and
each call is judged as a caller would: the question reaches the LLM and is answered, nothing is
played over them, the call is not hung up on them. A tool that calls a real service gets a mock
here (``ToolMocks(mocks={"tool_name": lambda **arguments: "result"})``, as livekit's
``mock_tools`` takes them).
"""

from __future__ import annotations

import pytest
from resilient_agent.lab import race_own_tools
from resilient_agent.lab.run import LabResult

from agent import Assistant


@pytest.fixture(scope="module")
def races() -> list[LabResult]:
    return race_own_tools(Assistant)


def test_every_tool_is_raced(races: list[LabResult]) -> None:
    raced = {r.scenario.name.split("/")[1] for r in races}
    assert raced == {"lookup_weather", "end_call"}
    # the tool itself ran in each of its calls
    assert all(r.scenario.name.split("/")[1] in r.as_json()["tools_run"] for r in races)


def test_every_window_of_every_tool_holds(races: list[LabResult]) -> None:
    broken = {r.scenario.name: r.outcome.reasons for r in races if not r.outcome.passed}
    assert not broken, broken
