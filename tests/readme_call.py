"""The README's agent in a call the catalog does not have, and livekit's own report of it.

Shared by the replay's test files that read a report livekit's ``SessionReport`` code made of a
session the catalog did not script (tests/test_replay.py, tests/test_replay_vad_evidence.py).
"""

from __future__ import annotations

import json
from typing import Any

from livekit.agents import Agent, RunContext, function_tool

from resilient_agent import end_call_tool
from resilient_agent._livekit.compat import livekit_session_report
from resilient_agent.testing import (
    CallOutcome,
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    run_scenario,
)

__all__ = ["HOLD", "README_CALL", "livekit_report_of_the_readme_call", "readme_agent"]

# The README's MyAgent, as an app that has not adopted ResilientAgent yet builds it on Agent.
HOLD = "One moment while I book that."


def readme_agent(base: type[Agent]) -> Agent:
    """The README's ``MyAgent`` on ``base``: a tool that says its hold message protected."""

    class MyAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(
                instructions="You are a friendly restaurant host.",
                tools=[end_call_tool(farewell="Thanks for calling, goodbye!")],
            )

        @function_tool
        async def book_table(self, ctx: RunContext, time: str) -> str:
            """Book a table.

            Args:
                time: When the table is wanted.
            """
            await ctx.session.say(HOLD, allow_interruptions=False)
            return f"Booked for {time}."

    return MyAgent()


README_CALL = Scenario(
    name="readme/my_agent",
    family="readme",
    description="The README's MyAgent books a table; the caller corrects it over the hold.",
    agent=readme_agent,
    utterances=(
        Utterance(1.0, 2.8, "please book a table for eight", reply_within=8.0),
        Utterance(4.1, 5.4, "actually make it nine", reply_within=6.0),
    ),
    llm=(
        LLMRule(when_user_says="book", tool_calls=(ToolCallScript("book_table", {"time": "8"}),)),
        LLMRule(after_tool="book_table", text="Your table is booked."),
    ),
    duration=14.0,
)


def livekit_report_of_the_readme_call(
    agent_class: type[Agent] = Agent,
) -> tuple[dict[str, Any], CallOutcome]:
    """livekit's own ``SessionReport`` of :data:`README_CALL` on ``agent_class``, as JSON data."""
    world, outcome = run_scenario(README_CALL, agent_class)
    report = livekit_session_report(world.session, job_id="job", room_id="RM_1", room="room")
    assert report is not None, "livekit moved JobContext.make_session_report"
    return json.loads(json.dumps(report.to_dict(), default=str)), outcome
