"""A realtime reply, or livekit EndCallTool's goodbye, that never comes; a slow reply is not."""

from __future__ import annotations

from typing import Any

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog.realtime import (
    livekit_goodbye_never_comes,
    realtime_controls,
    reply_cut_by_server_error,
    reply_never_comes,
)
from resilient_agent.testing import heard_sentences, run_scenario
from resilient_agent.testing.contracts import hung_up
from resilient_agent.testing.realtime import ScriptedRealtimeModel

ANSWER = "Your parcel is at the depot."


def _model(world: Any) -> ScriptedRealtimeModel:
    assert isinstance(world.llm, ScriptedRealtimeModel)
    return world.llm


def _races(world: Any) -> list[tuple[str, str | None]]:
    return [(r["kind"], r["action"]) for r in world.race_events]


def test_openai_a_hung_reply_leaves_the_caller_in_silence_on_agent_and_is_asked_again() -> None:
    scenario = reply_never_comes("openai")
    world, on_agent = run_scenario(scenario, Agent)
    assert not on_agent.passed
    assert not any(s.text == ANSWER for s in heard_sentences(world))

    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert _races(world) == [
        ("realtime_reply_missing", None),
        ("realtime_reply_missing", "asked_again"),
    ]
    hung, answer = _model(world).responses
    # the hung response was cancelled at the server (response.cancel), then asked for again
    assert hung.cancelled and hung.first_audio_at is None
    assert answer.user_initiated and answer.text == ANSWER
    (asked,) = [r for r in world.race_events if r["action"] == "asked_again"]
    # 5 s of a quiet line after the caller's voice (which ends at 3.0 s, heard until ~3.5 s)
    assert 5.0 <= asked["waited_s"] <= 5.6


def test_gemini_a_hung_reply_is_asked_again_into_its_open_generation_and_heard_once() -> None:
    # Gemini ignores interrupt() under server VAD; the request asked of the model's session is
    # answered into the generation still open (as livekit-plugins-google routes it), so the
    # hung reply's own handle plays the answer, without livekit's 5 s interruption timeout
    world, outcome = run_scenario(reply_never_comes("gemini"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    answers = [s for s in heard_sentences(world) if s.text == ANSWER]
    assert len(answers) == 1 and answers[0].complete
    assert _races(world) == [
        ("realtime_reply_missing", None),
        ("realtime_reply_missing", "asked_again"),
    ]
    assert world.logs.count("speech not done in time after interruption") == 0
    hung, answer = _model(world).responses
    assert hung.cancelled and hung.first_audio_at is None
    # the same message (the plugin's open generation), the server's new reply
    assert answer.message_id == hung.message_id and answer.text == ANSWER
    # 5 s of a quiet line after the caller's voice, then the answer's latency (OpenAI: 5.80 s)
    assert outcome.reply_latency_s == pytest.approx(5.68, abs=0.05)


@pytest.mark.parametrize("flavour", ["openai", "gemini"])
def test_a_slow_but_live_model_raises_no_alarm(flavour: str) -> None:
    (scenario,) = [
        s for s in realtime_controls() if s.name == f"control/realtime_{flavour}_slow_reply"
    ]
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert _races(world) == []
    assert len(_model(world).responses) == 1


def test_openai_livekits_end_call_tool_hangs_up_when_its_goodbye_never_comes() -> None:
    scenario = livekit_goodbye_never_comes("openai")
    world, on_agent = run_scenario(scenario, Agent)
    assert not on_agent.passed  # the goodbye's handle never finishes: the call stays up
    assert not hung_up(world)

    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert _races(world) == [
        ("realtime_goodbye_missing", None),
        ("realtime_goodbye_missing", "hung_up"),
        ("shutdown_request", "hung_up"),
    ]
    assert world.job.hung_up_at is not None and world.job.room_deletions
    # the caller's goodbye ends at 2.2 s; 5 s of a quiet line, then livekit's tool hangs up
    assert world.job.hung_up_at - 2.2 < 6.5
    # the goodbye was not asked for again: the caller wanted to leave (the tool call, and
    # livekit's tool reply that hung)
    assert len(_model(world).responses) == 2


def test_gemini_livekits_end_call_tool_hangs_up_after_livekits_timeout() -> None:
    world, _ = run_scenario(livekit_goodbye_never_comes("gemini"), ResilientAgent)
    assert ("realtime_goodbye_missing", "hung_up") in _races(world)
    assert world.job.hung_up_at is not None
    # livekit's interruption timeout (5 s) before the goodbye's handle is done on Gemini
    assert world.job.hung_up_at - 2.2 < 11.5


def test_gemini_a_reply_cut_by_a_server_error_is_asked_again_at_once() -> None:
    # the scripted model fails halfway through the answer as livekit-plugins-google reports a
    # 1011 close: the generation ends there, then a recoverable error
    scenario = reply_cut_by_server_error()
    world, on_agent = run_scenario(scenario, Agent)
    assert not on_agent.passed
    assert [round(s.heard, 2) for s in heard_sentences(world)] == [1.9]

    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert _races(world) == [("realtime_reply_cut", None), ("realtime_reply_cut", "asked_again")]
    cut, again = _model(world).responses
    assert again.user_initiated and again.text == cut.text
    # asked for as the cut reply stopped playing (5.7 s), not after no_reply_s
    assert [round(r.at, 2) for r in _model(world).requests] == [3.5, 5.7]
    assert outcome.reply_latency_s == pytest.approx(3.0)
