"""A phone number given over a protected line between two tasks of livekit's ``TaskGroup``.

The app's ``TaskGroup`` says a protected line in ``on_task_completed`` once ``GetEmailTask`` is
done ("... Next I need the best phone number to reach you."), and the caller gives the number
over it. livekit withholds those words from the STT: on plain ``Agent`` they are lost. On
``ResilientAgent`` they are recovered, and must reach ``GetPhoneNumberTask`` as speech, so it
reads the number back and has it confirmed (for typed input it saves it unconfirmed). Answered
as the line ends, they went to the group's own activity instead, which has none of the task's
tools, and the task then started without them and asked again.
"""

from __future__ import annotations

from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog.agents import workflows as flows
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

_NUMBER = "my number is five five five zero one two three four five six"
_READ_BACK = "I have five five five, zero one two, three four five six, is that right?"
_TOOLS = (
    "update_email_address",
    "confirm_email_address",
    "update_phone_number",
    "confirm_phone_number",
    "collect_details",
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


def _scenario(number_at: float) -> Scenario:
    # the line plays 13.9-19.0 s; the number is read back once the task's question played
    return Scenario(
        name="t/phone_over_line_between_group_tasks",
        family="t",
        description="",
        agent=flows.email_then_phone_group_agent,
        utterances=(
            Utterance(1.0, 2.5, "please update my contact details", expect_reply=False),
            Utterance(5.5, 7.7, "my email is jane at example dot com", expect_reply=False),
            Utterance(11.6, 12.8, "yes the email is right", expect_reply=False),
            Utterance(number_at, number_at + 2.5, _NUMBER, reply_within=12.0),
            Utterance(28.0, 29.2, "yes the number is right", expect_reply=False),
        ),
        llm=_RULES,
        tools_complete=_TOOLS,
        duration=40.0,
    )


def test_the_number_is_lost_on_a_plain_agent() -> None:
    _, outcome = run_scenario(_scenario(14.5), Agent)
    assert "utterance 4 (14.5-17.0s): 10 word(s) never reached the LLM" in outcome.reasons


def test_the_number_reaches_the_phone_task_as_speech_and_is_read_back() -> None:
    world, outcome = run_scenario(_scenario(14.5), ResilientAgent)
    assert outcome.passed, outcome.reasons
    updates = [r for r in world.recorder.tool_runs if r.name == "update_phone_number"]
    assert len(updates) == 1
    said = [text for _, role, text in world.recorder.items if role == "assistant"]
    assert _READ_BACK in said
