"""What the lab tells a newcomer about their app's configuration, before and after the run.

Before the run: the app's own tools that will run for real in the lab's calls (not mocked by a
``--mock`` file), side effects included, since the lab cannot know which tools have them. After
it, per agent: each tool name in a middleware option that is not one of the agent's tools, with
the library's own "did you mean" (:func:`resilient_agent._engine.tool_names.unknown_tools`, the
check a session makes when it starts), and each tool that ran for real and ended in an error, with
the line that mocks it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from livekit.agents import Agent

from .. import Middleware
from .._engine.tool_names import known_tool_names, unknown_tools
from .app_tools import ToolMocks, function_tools, tool_schema
from .catalog.own_tools import ToolWindows

__all__ = ["app_tool_names", "configuration_notes", "mock_line", "runs_for_real_line"]

# tools of these packages (livekit's EndCallTool, the library's end_call_tool) act on the
# lab's own stand-ins for the room and the job: nothing leaves the process
_LIBRARY_PACKAGES = ("livekit.", "resilient_agent.", "resilient_agent")


def app_tool_names(agent: Agent) -> list[str]:
    """The agent's function tools the app wrote itself (not livekit's or this library's)."""
    return [
        name
        for name, tool in function_tools(agent).items()
        if not str(getattr(tool, "__module__", "")).startswith(_LIBRARY_PACKAGES)
    ]


def runs_for_real_line(agent: Agent, mocks: ToolMocks, label: str) -> str | None:
    """One line naming the app's tools no mock replaces, or None when every one is mocked."""
    real = [name for name in app_tool_names(agent) if name not in mocks.mocks]
    if not real:
        return None
    return (
        f"{label}: {', '.join(real)} {'runs' if len(real) == 1 else 'run'} for real in the "
        "lab's calls, side effects included (not in --mock's MOCKS): mock each one that pays, "
        "books, sends or calls out"
    )


def mock_line(agent: Agent, tool: str) -> str:
    """The ``MOCKS`` entry that mocks ``tool``, its parameters named after the tool's arguments."""
    schema = tool_schema(function_tools(agent)[tool])
    parameters = ", ".join(schema.get("properties", {})) or "**arguments"
    return f"MOCKS = {{{tool!r}: lambda {parameters}: 'the result'}}"


def configuration_notes(agent: Agent, label: str, windows: Sequence[ToolWindows] = ()) -> list[str]:
    """Per agent: unknown tool names in its middleware's options, and unmocked tools that failed.

    Args:
        agent: The app's agent, built as the lab builds it.
        label: How the lab's output names the agent.
        windows: Its tools' probes, from which the tools that ran and ended in an error are read.
    """
    notes = []
    chain: Iterable[Any] = agent.middleware if hasattr(agent, "middleware") else ()
    middleware = [m for m in chain if isinstance(m, Middleware)]
    known = known_tool_names(agent.tools)
    for event in unknown_tools(middleware, known, lambda *_: None):
        hint = f": did you mean {event.did_you_mean!r}?" if event.did_you_mean else ""
        notes.append(
            f"{label}: {event.middleware}({event.option}=...) names {event.tool!r}, which is not "
            f"one of its tools{hint}"
        )
    for window in windows:
        if window.tool.mocked or window.status != "error":
            continue
        notes.append(
            f"{label}: {window.tool.name} ran for real and ended in an error; if it has side "
            f"effects, add to your --mock file: {mock_line(agent, window.tool.name)}"
        )
    return notes
