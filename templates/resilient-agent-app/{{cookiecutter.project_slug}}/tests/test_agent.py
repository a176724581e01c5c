"""Offline tests of the Assistant: no API key, no LiveKit server, a few seconds in all.

Lab calls (``run_scenario``) drive a real ``AgentSession`` with scripted audio, VAD, STT, LLM and
TTS on a virtual clock, so timing races (talking over a reply, over the farewell) replay exactly.
Each call is judged by what the caller experienced (``outcome.reasons`` says what went wrong):
every utterance answered audibly, no lost words, the call ended only after a farewell heard to
the end. The text test uses LiveKit's own ``session.run()`` assertions.
"""

from __future__ import annotations

from livekit.agents import AgentSession
from resilient_agent.testing import (
    CallOutcome,
    CallWorld,
    LLMRule,
    Scenario,
    ScriptedLLM,
    ToolCallScript,
    Utterance,
    heard_sentences,
    run_scenario,
)

from agent import FAREWELL, Assistant

WEATHER = LLMRule(
    when_user_says="weather",
    tool_calls=(ToolCallScript("lookup_weather", {"location": "Paris"}),),
)
WEATHER_REPLY = LLMRule(after_tool="lookup_weather", text="It is sunny in Paris today.")
GOODBYE = Utterance(1.0, 2.2, "okay goodbye", expect_reply=False)
END_CALL = LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),))


def call(
    *utterances: Utterance, llm: tuple[LLMRule, ...], duration: float = 16.0
) -> tuple[CallWorld, CallOutcome]:
    """Run one scripted call against the app's own Assistant."""
    scenario = Scenario(
        name="app/call",
        family="app",
        description="A scripted call to the Assistant.",
        # the lab hands factories a base class to build on; the app has its own class
        agent=lambda _base: Assistant(),
        utterances=utterances,
        llm=llm,
        # the call may end only once this was heard to the end, with the caller silent
        farewell=FAREWELL,
        duration=duration,
    )
    return run_scenario(scenario, Assistant)


def hang_up_decisions(outcome: CallOutcome) -> list[str]:
    """What resilient-agent decided on each hang-up request: ``hung_up`` or ``kept_call``."""
    return [e["action"] for e in outcome.race_events if e["kind"] == "shutdown_request"]


def test_a_weather_question_is_answered_from_the_tool() -> None:
    ask = Utterance(1.0, 2.6, "what is the weather in paris")
    world, outcome = call(ask, llm=(WEATHER, WEATHER_REPLY))

    assert outcome.passed, outcome.reasons
    outputs = [i.output for i in world.session.history.items if i.type == "function_call_output"]
    assert outputs == ["Sunny and 21 degrees Celsius in Paris."]
    assert any(s.text == WEATHER_REPLY.text and s.complete for s in heard_sentences(world))


def test_the_caller_talks_over_a_reply_and_is_answered() -> None:
    hours = (
        "We are open from nine to six on weekdays, from ten to four on Saturdays, "
        "and we are closed on Sundays and public holidays."
    )
    # the caller cuts this answer off themselves, so it need not be heard to the end
    ask = Utterance(1.0, 2.4, "when are you open", expect_reply=False)
    correction = Utterance(5.0, 6.6, "sorry I meant the pharmacy")
    world, outcome = call(
        ask,
        correction,
        llm=(
            LLMRule(when_user_says="open", text=hours),
            LLMRule(when_user_says="pharmacy", text="The pharmacy opens at eight."),
        ),
    )

    assert outcome.passed, outcome.reasons
    assert any(s.interrupted for s in world.recorder.speeches.values())
    heard = {s.text: s.complete for s in heard_sentences(world)}
    assert heard["The pharmacy opens at eight."]


def test_a_caller_who_talks_over_the_farewell_keeps_the_call() -> None:
    question = Utterance(4.0, 5.6, "wait one more question please")
    world, outcome = call(
        GOODBYE,
        question,
        llm=(END_CALL, LLMRule(when_user_says="question", text="Of course, go ahead.")),
    )

    assert outcome.passed, outcome.reasons
    assert not outcome.hung_up
    assert world.job.room_deletions == []
    assert hang_up_decisions(outcome) == ["kept_call"]


def test_a_farewell_heard_to_the_end_ends_the_call() -> None:
    world, outcome = call(GOODBYE, llm=(END_CALL,))

    assert outcome.passed, outcome.reasons
    assert outcome.hung_up and outcome.farewell_heard
    assert hang_up_decisions(outcome) == ["hung_up"]
    # delete_room=True: deleting the room is what hangs up a phone (SIP) caller
    assert len(world.job.room_deletions) == 1


async def test_a_text_turn_calls_the_weather_tool() -> None:
    llm = ScriptedLLM(
        [
            LLMRule(when_user_says="weather", tool_calls=WEATHER.tool_calls, ttft=0, duration=0),
            LLMRule(after_tool="lookup_weather", text=WEATHER_REPLY.text, ttft=0, duration=0),
        ]
    )
    async with llm, AgentSession(llm=llm) as session:
        await session.start(Assistant())
        result = await session.run(user_input="What's the weather in Paris?")

        result.expect.next_event().is_function_call(
            name="lookup_weather", arguments={"location": "Paris"}
        )
        result.expect.next_event().is_function_call_output(
            output="Sunny and 21 degrees Celsius in Paris."
        )
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()
