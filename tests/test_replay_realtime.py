"""A realtime model's call (OpenAI Realtime, Gemini Live) replayed from livekit's report."""

from __future__ import annotations

from pathlib import Path

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay import load_plan
from resilient_agent.lab.replay.round_trip import left_out, round_trip
from resilient_agent.testing import run_scenario
from resilient_agent.testing.session_report import session_report


def _scenario(name: str):  # type: ignore[no-untyped-def]
    return next(s for s in CATALOG if s.name == name)


@pytest.mark.parametrize(
    "name",
    [
        # the model's preamble calls a tool that protects it; the caller changes the booking
        # over it: lost on Agent, held from the model and sent after on ResilientAgent
        "realtime/openai/words_over_protected_tool",
        # the same over a transfer: the held words go to the manager's model as it enters,
        # and Gemini reports their turn only once its answer played out
        "realtime/gemini/words_over_protected_transfer",
    ],
)
@pytest.mark.parametrize("agent_class", [Agent, ResilientAgent])
def test_a_realtime_call_round_trips_with_its_recording(
    tmp_path: Path, name: str, agent_class: type[Agent]
) -> None:
    scenario = _scenario(name)
    assert left_out(scenario) is None
    trip = round_trip(scenario, agent_class, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


@pytest.mark.parametrize(
    ("name", "flavour"),
    [
        ("control/realtime_openai_booking", "openai"),
        ("control/realtime_gemini_booking", "gemini"),
    ],
)
def test_the_models_messages_are_its_answers_timed_from_their_requests(
    name: str, flavour: str
) -> None:
    world, _ = run_scenario(_scenario(name), Agent)
    plan = load_plan(session_report(world))
    assert plan.realtime == flavour
    assert plan.app_says == ()  # the model said them, not the app
    ask, reply = plan.answers
    # the caller stopped at 2.8 s; the server ended the turn 0.5 s later and answered 0.3 s on,
    # its tool call with the preamble
    assert (ask.after_user, ask.at, ask.ttft) == ("please book a table for eight", 3.3, 0.3)
    assert [c.name for c in ask.tool_calls] == ["book_table"]
    assert ask.text == "Let me book that table for you, one moment please."
    assert (reply.after_tool, reply.text, reply.ttft) == (
        "book_table",
        "Your table is booked.",
        0.3,
    )
    assert plan.turns[0].said == (1.0, 2.8)
    assert any(a.startswith("a realtime model") for a in plan.assumptions)


def test_a_realtime_call_round_trips_from_its_transcripts_alone() -> None:
    trip = round_trip(_scenario("control/realtime_openai_booking"), Agent)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_words_held_from_the_model_are_said_in_the_line_before_without_a_recording() -> None:
    # ResilientAgent held the words said over the protected greeting and sent them after it:
    # the model heard them all at 5.5 s; the replay says them before and protects the greeting
    trip = round_trip(_scenario("realtime/gemini/words_over_protected_greeting"), ResilientAgent)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict
