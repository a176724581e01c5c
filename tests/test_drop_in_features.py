"""Drop-in across livekit 1.8 features (#32): each feature on, a race-free call, same trace.

Every test runs one race-free call with the feature switched on, on a plain ``Agent`` and on
``ResilientAgent``, checks that the feature actually engaged on ``Agent`` (so a test that never
exercised it fails) and that both traces are identical.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from livekit.agents import Agent
from livekit.agents.llm.async_toolset import AsyncToolset

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import agents
from resilient_agent.lab.catalog.agents import features
from resilient_agent.testing import LLMRule, NoiseWindow, Scenario, ToolCallScript, Utterance
from resilient_agent.testing.clock import SAME_INSTANT_S
from resilient_agent.testing.differential import CallTrace, DifferentialResult, run_differential
from resilient_agent.testing.scenario import AgentFactory

# calls whose livekit logs are compared: no earlier test's garbage logs into them
pytestmark = pytest.mark.usefixtures("earlier_tests_garbage_collected")


def _call(
    name: str,
    agent: AgentFactory,
    *,
    says: str = "is the terrace open tonight",
    tool: str | None = None,
    options: dict[str, Any] | None = None,
    noise: tuple[NoiseWindow, ...] = (),
    duration: float = 12.0,
    second: Utterance | None = None,
) -> DifferentialResult:
    rules: tuple[LLMRule, ...] = ()
    if tool is not None:
        rules = (
            LLMRule(when_user_says=says.split()[0], tool_calls=(ToolCallScript(tool, {}),)),
            LLMRule(text="All done.", after_tool=tool),
        )
    utterances = (Utterance(1.0, 2.5, says),) + ((second,) if second else ())
    scenario = Scenario(
        name=f"drop_in_feature/{name}",
        family="race_free",
        description=f"A race-free call with {name} on.",
        agent=agent,
        utterances=utterances,
        llm=rules,
        duration=duration,
        session_options=options or {},
        noise=noise,
        control=True,
    )
    return run_differential(scenario, Agent, ResilientAgent)


def _heard_texts(result: DifferentialResult) -> list[str]:
    return [words for _, role, words in result.expected["items"] if role == "assistant"]


def _event_kinds(result: DifferentialResult) -> list[str]:
    return [kind for _, kind, _ in result.expected["session_events"]]


@pytest.mark.parametrize("preemptive_tts", [False, True])
def test_preemptive_generation(preemptive_tts: bool) -> None:
    result = _call(
        "preemptive_generation",
        agents.plain_agent,
        options={"preemptive_generation": {"enabled": True, "preemptive_tts": preemptive_tts}},
    )
    # engaged: the LLM is asked before the endpointing delay (0.5 s after the last word) is over
    assert result.expected["llm_requests"][0][0] < 2.5 + 0.5
    assert result.differences == [], result.report()


def test_with_filler() -> None:
    result = _call(
        "with_filler",
        features.filler_runtime_agent(work_seconds=3.0),
        says="check the diary",
        tool="check_diary",
        duration=14.0,
    )
    assert any(features.FILLER_LINE in t for t in _heard_texts(result))
    assert result.differences == [], result.report()


def test_foreground() -> None:
    result = _call("foreground", features.foreground_agent, says="read it back", tool="read_back")
    assert any(features.FOREGROUND_LINE in t for t in _heard_texts(result))
    assert result.differences == [], result.report()


def test_update_control() -> None:
    result = _call(
        "run_context_update",
        features.update_agent(work_seconds=1.0),
        says="search the tables",
        tool="search_tables",
    )
    assert any(features.UPDATE_LINE in str(o) for o in result.expected["tool_outputs"])
    assert result.differences == [], result.report()


def test_a_progress_report_yields_to_the_caller_as_on_agent() -> None:
    """Once a tool handed control back with ``update()``, its report is Agent's to interrupt."""
    result = _call(
        "run_context_update_interrupted",
        features.update_agent(work_seconds=4.0),
        says="search the tables",
        tool="search_tables",
        second=Utterance(4.3, 5.3, "actually make it two people"),
        duration=14.0,
    )
    interrupted = [segment for segment in result.expected["heard"] if segment[3]]
    assert interrupted, "on Agent the caller cuts the report"
    assert result.differences == [], result.report()


def test_async_toolset() -> None:
    toolset = AsyncToolset(id="fares", tools=[features.search_fares])
    result = _call(
        "async_toolset",
        agents.plain_agent,
        says="search the fares",
        tool="search_fares",
        options={"tools": [toolset]},
    )
    assert result.expected["tool_runs"], "the toolset's tool ran"
    assert result.differences == [], result.report()


def test_user_away_timeout() -> None:
    result = _call("user_away_timeout", agents.plain_agent, options={"user_away_timeout": 3.0})
    assert "away" in [state for _, state in result.expected["user_state"]]
    assert result.differences == [], result.report()


def test_false_interruption_resume() -> None:
    long_reply = "so we would like a quiet corner table near the garden for dinner tonight"
    result = _call(
        "resume_false_interruption",
        agents.plain_agent,
        says=long_reply,
        options={
            "interruption": {"resume_false_interruption": True, "false_interruption_timeout": 1.0}
        },
        noise=(NoiseWindow(4.5, 5.3, rms=2000.0),),
    )
    assert "agent_false_interruption" in _event_kinds(result)
    assert result.differences == [], result.report()


_LONG_REPLY = "so we would like a quiet corner table near the garden for dinner tonight"
# a short "okay" over the answer: below min_words, and discarded by livekit when disabled
_OKAY = Utterance(4.6, 5.0, "okay", expect_reply=False)


def test_interruption_min_words() -> None:
    result = _call(
        "interruption_min_words",
        agents.plain_agent,
        says=_LONG_REPLY,
        options={"interruption": {"min_words": 3}},
        second=_OKAY,
        duration=14.0,
    )
    assert result.expected["heard"] and not result.expected["heard"][0][3], "answer not cut"
    assert result.differences == [], result.report()


@pytest.mark.parametrize(("min_duration", "paused"), [(0.3, True), (1.0, False)])
def test_interruption_min_duration(min_duration: float, paused: bool) -> None:
    """0.8 s of noise over the answer (no words: a transcript interrupts whatever its length)."""
    noise = NoiseWindow(4.5, 5.3, rms=2000.0)
    result = _call(
        "interruption_min_duration",
        agents.plain_agent,
        says=_LONG_REPLY,
        options={"interruption": {"min_duration": min_duration}},
        noise=(noise,),
        duration=14.0,
    )
    # engaged: the answer pauses once the noise has lasted min_duration, and never if it is longer
    # than the noise; either way it is heard whole
    started, ended, _, interrupted = result.expected["heard"][0]
    pauses = [at for at, state in result.expected["agent_state"] if started < at < ended]
    assert pauses[:1] == ([pytest.approx(noise.start + min_duration, abs=0.02)] if paused else [])
    assert not interrupted
    assert result.differences == [], result.report()


def test_interruption_disabled_keeps_the_words_said_over_the_answer() -> None:
    """The documented divergence: livekit discards them (the answer is protected), we answer."""
    result = _call(
        "interruption_enabled",
        agents.plain_agent,
        says=_LONG_REPLY,
        options={"interruption": {"enabled": False}},
        second=_OKAY,
        duration=14.0,
    )
    assert result.expected["heard"] and not result.expected["heard"][0][3], "answer not cut"
    # the answer itself is Agent's answer, heard whole at the same times
    assert result.actual["heard"][0] == result.expected["heard"][0]
    assert result.actual["speeches"][0] == result.expected["speeches"][0]

    def users(trace: CallTrace) -> list[str]:
        return [words for _, role, words in trace["items"] if role == "user"]

    assert "okay" not in users(result.expected)
    assert "okay" in users(result.actual)


def _state_times(trace: CallTrace, state: str) -> list[float]:
    return [at for at, new_state in trace["agent_state"] if new_state == state]


@pytest.mark.parametrize("sound", ["thinking", "ambient"])
def test_background_audio_player(sound: Literal["thinking", "ambient"]) -> None:
    """The player publishes its track on an offline room and plays along the session's states.

    How much of the sound the mixer takes depends on the real-time pacing of livekit's native
    audio source (virtual time does not reach it): only when it starts and stops is compared.
    """
    calls: list[features.BackgroundAudioCall] = []
    result = _call("background_audio", features.background_audio_agent(calls, sound=sound))
    assert len(calls) == 2, "one player per base"
    (thinking_at,) = _state_times(result.expected, "thinking")
    speaking_at = _state_times(result.expected, "speaking")[0]
    for call, trace in zip(calls, (result.expected, result.actual), strict=True):
        participant = call.room.local_participant
        assert [track.name for track, _ in participant.published] == ["background_audio"]
        assert call.player.publication is not None
        assert participant.unpublished == [call.player.publication.sid], "closed on exit"
        pulled = call.sound.pulled_at
        assert pulled, f"the {sound} sound played"
        if sound == "thinking":
            # engaged: the mixer's next round (10 ms) after the agent started thinking, and
            # nothing once it speaks
            assert thinking_at <= pulled[0] <= thinking_at + 0.011
            assert pulled[-1] <= speaking_at + SAME_INSTANT_S
            assert _state_times(trace, "thinking") == pytest.approx([thinking_at], abs=1e-3)
        else:
            # from the start of the call, before the caller says anything
            assert pulled[0] <= 0.011
    assert result.differences == [], result.report()


def test_interrupt_force() -> None:
    result = _call(
        "interrupt_force", features.forced_interrupt_agent(after_s=1.0), says="hello there"
    )
    assert result.expected["heard"][0][3], "the uninterruptible greeting was cut"
    assert result.differences == [], result.report()


def test_say_without_chat_ctx() -> None:
    result = _call("say_add_to_chat_ctx_false", features.quiet_welcome_agent, says="hello there")
    assert result.expected["heard"], "the welcome played"
    assert features.QUIET_WELCOME not in _heard_texts(result)
    assert result.differences == [], result.report()


def test_update_instructions_tools_chat_ctx() -> None:
    result = _call("update_context", features.context_updating_agent)
    assert result.expected["llm_requests"], "the LLM answered with the updated context"
    assert result.differences == [], result.report()


@pytest.mark.parametrize("hand_off", [False, True], ids=["own_agent", "handed_off"])
def test_node_overrides(hand_off: bool) -> None:
    calls: list[str] = []
    result = _call(
        "node_overrides",
        features.node_override_agent(calls, hand_off=hand_off),
        says="transfer me please" if hand_off else "is the terrace open tonight",
        tool="transfer_to_specialist" if hand_off else None,
        second=Utterance(8.0, 9.0, "terrace tonight") if hand_off else None,
        duration=14.0,
    )
    assert {"stt_node", "llm_node", "tts_node", "transcription_node"} <= set(calls)
    assert result.differences == [], result.report()


def test_adaptive_interruption_falls_back_offline() -> None:
    result = _call(
        "adaptive_fallback", agents.plain_agent, options={"interruption": {"mode": "adaptive"}}
    )
    assert result.expected["heard"], "the call runs on the fallback"
    assert result.differences == [], result.report()


_STORY = (
    "Once upon a time there was a small shop at the end of a long street, and every morning "
    "its owner opened the shutters at nine."
)


@pytest.mark.parametrize("kind", ["realtime_openai", "realtime_gemini"])
def test_realtime_model(kind: str) -> None:
    # a realtime model's own turn-taking, race-free: a tool call with its reply, and the server's
    # deliberate barge-in when the caller speaks over an unprotected answer
    scenario = Scenario(
        name=f"drop_in_feature/{kind}",
        family="race_free",
        description="A race-free call on a realtime model, with a barge-in.",
        agent=agents.booking_agent("plain", work_seconds=1.0),
        utterances=(
            Utterance(1.0, 2.8, "please book a table for eight"),
            Utterance(8.0, 9.0, "tell me a story", expect_reply=False),
            Utterance(11.5, 12.5, "stop please"),
        ),
        llm=(
            LLMRule(
                text="Let me book that.",
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
            LLMRule(text=_STORY, when_user_says="story", duration=8.0),
            LLMRule(text="Of course, stopping.", when_user_says="stop"),
        ),
        duration=18.0,
        control=True,
        model=kind,  # type: ignore[arg-type]
    )
    result = run_differential(scenario, Agent, ResilientAgent)
    heard = _heard_texts(result)
    # engaged: the tool's reply was spoken and the story cut short by the caller
    assert "Your table is booked." in heard and "Of course, stopping." in heard
    assert any(interrupted for *_, interrupted in result.expected["heard"])
    assert result.differences == [], result.report()
