"""A phone number given over a protected line between two tasks.

The app says a protected line once ``GetEmailTask`` is done ("... Next I need the best phone
number to reach you."), then ``GetPhoneNumberTask`` starts, and the caller gives the number over
the line. Three ways an app writes it: a ``TaskGroup`` whose ``on_task_completed`` says the line;
a tool that awaits the two tasks in turn, the line between; an ``on_enter`` that does the same.
livekit withholds the words from the STT: on plain ``Agent`` they are lost. On
``ResilientAgent`` they are recovered, and must reach ``GetPhoneNumberTask`` as speech, so it
reads the number back and has it confirmed (for typed input it saves it unconfirmed).

Answered as the line ends, they went to the agent that said it instead, which has none of the
task's tools, and the task then started without them and asked again: the group's own activity
(now the answer waits while a group runs between tasks), or the tool's or ``on_enter``'s agent,
answered before that code's next step awaited the task (now the keeper gives the code that said
a protected line a step, ``APP_STEP_S``, before it answers).
"""

from __future__ import annotations

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog.agents import workflows as flows
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    run_scenario,
)
from resilient_agent.testing.scenario import AgentFactory

_NUMBER = "my number is five five five zero one two three four five six"
_READ_BACK = "I have five five five, zero one two, three four five six, is that right?"
_TOOLS = (
    "update_email_address",
    "confirm_email_address",
    "update_phone_number",
    "confirm_phone_number",
)
_RULES = (
    LLMRule(when_user_says="Conversation to summarize", text="The caller gave email and phone."),
    LLMRule(
        when_user_says="example",
        tool_calls=(ToolCallScript("update_email_address", {"email": "jane@example.com"}),),
    ),
    LLMRule(
        when_user_says="five five",
        tool_calls=(ToolCallScript("update_phone_number", {"phone_number": "5550123456"}),),
    ),
    LLMRule(when_instructed="Ask the user for their email", text="What is your email address?"),
    LLMRule(when_instructed="Ask the user for their phone", text="What is your phone number?"),
    LLMRule(after_tool="update_email_address", text="I have jane at example dot com, right?"),
    LLMRule(after_tool="update_phone_number", text=_READ_BACK),
    LLMRule(when_user_says="email is right", tool_calls=(ToolCallScript("confirm_email_address"),)),
    LLMRule(when_user_says="number is right", tool_calls=(ToolCallScript("confirm_phone_number"),)),
    LLMRule(when_user_says="details", tool_calls=(ToolCallScript("collect_details"),)),
    LLMRule(after_tool="collect_details", text="Thanks, your details are saved."),
)

# Each way: its agent, and when its line plays (the email task's turns come first; on_enter
# starts the email task at once, a tool once the caller asked for it).
_WAYS: dict[str, tuple[AgentFactory, float]] = {
    "group": (flows.email_then_phone_group_agent, 0.0),
    "tasks_in_tool": (flows.email_then_phone_tasks_agent, 0.0),
    "tasks_in_on_enter": (flows.email_then_phone_on_enter_agent, -3.0),
}


def _scenario(way: str) -> Scenario:
    # the line plays 13.9-19.0 s (a tool's); the number is said over it, 0.6 s in
    agent, shift = _WAYS[way]
    asked = (Utterance(1.0, 2.5, "please update my contact details", expect_reply=False),)
    tool = way != "tasks_in_on_enter"
    said = (
        (5.5, 7.7, "my email is jane at example dot com"),
        (11.6, 12.8, "yes the email is right"),
        (14.5, 17.0, _NUMBER),
        (28.0, 29.2, "yes the number is right"),
    )
    return Scenario(
        name=f"t/phone_over_line_between_tasks_{way}",
        family="t",
        description="",
        agent=agent,
        utterances=(
            *(asked if tool else ()),
            *(
                Utterance(
                    start + shift,
                    end + shift,
                    text,
                    expect_reply=text == _NUMBER,
                    reply_within=12.0 if text == _NUMBER else None,
                )
                for start, end, text in said
            ),
        ),
        llm=_RULES,
        tools_complete=(*_TOOLS, "collect_details") if tool else _TOOLS,
        duration=40.0,
    )


@pytest.mark.parametrize("way", list(_WAYS))
def test_the_number_is_lost_on_a_plain_agent(way: str) -> None:
    _, outcome = run_scenario(_scenario(way), Agent)
    assert any("word(s) never reached the LLM" in r for r in outcome.reasons), outcome.reasons


@pytest.mark.parametrize("way", list(_WAYS))
def test_the_number_reaches_the_phone_task_as_speech_and_is_read_back(way: str) -> None:
    world, outcome = run_scenario(_scenario(way), ResilientAgent)
    assert outcome.passed, outcome.reasons
    updates = [r for r in world.recorder.tool_runs if r.name == "update_phone_number"]
    assert len(updates) == 1
    said = [text for _, role, text in world.recorder.items if role == "assistant"]
    assert _READ_BACK in said
