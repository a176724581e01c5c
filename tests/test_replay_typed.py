"""Typed chat messages in a replayed call: read from livekit's report, typed again at their time."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent._engine.pending_words import TYPED_EXTRA, Fragment, typed_extra
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.catalog import agents as catalog_agents
from resilient_agent.lab.replay import load_plan, run_replay
from resilient_agent.lab.replay.emit import redacted, trimmed_report
from resilient_agent.lab.replay.fidelity import divergences
from resilient_agent.lab.replay.recording import read_recording
from resilient_agent.lab.replay.round_trip import left_out, round_trip
from resilient_agent.lab.replay.typed import TypedMessage, untyped_words
from resilient_agent.lab.replay.typed_claims import with_recorded_claims
from resilient_agent.testing import Scenario, Typed, Utterance, run_scenario
from resilient_agent.testing.session_report import session_report

_NOTICE = "This call is recorded for quality and training purposes, thank you for waiting."
_QUESTION = "do you have a table for two tonight"


def _catalog(name: str) -> Scenario:
    return next(s for s in CATALOG if s.name == name)


@pytest.fixture(scope="module")
def answered_report() -> dict[str, Any]:
    """A plain Agent's call: a message typed over an interruptible greeting, answered at once."""
    scenario = Scenario(
        name="replay/typed_over_interruptible_greeting",
        family="replay",
        description="The caller types while an interruptible greeting plays, then speaks.",
        agent=catalog_agents.greeting_agent(protected=False, text=_NOTICE),
        utterances=(Utterance(6.5, 7.5, "and a high chair"),),
        typed=(Typed(2.0, _QUESTION),),
        duration=14.0,
    )
    world, outcome = run_scenario(scenario, Agent)
    assert outcome.passed  # the message interrupted the greeting and was answered
    return session_report(world)


def test_a_typed_message_is_read_apart_from_the_callers_turns(
    answered_report: dict[str, Any],
) -> None:
    plan = load_plan(answered_report)
    assert plan.typed == (TypedMessage(2.0, _QUESTION, answered_at_once=True),)
    assert [t.heard for t in plan.turns] == [("and", "a", "high", "chair")]
    # the emitted test's trimmed report keeps what tells a typed message from a spoken one
    assert load_plan(trimmed_report(answered_report)).typed == plan.typed


def test_the_replay_types_the_message_at_its_time(answered_report: dict[str, Any]) -> None:
    plan = load_plan(answered_report)
    replay = run_replay(plan, Agent)
    assert replay.world.scenario.typed == (Typed(2.0, _QUESTION, expect_reply=False),)
    assert replay.replayed.typed == plan.typed
    assert replay.divergences == ()
    assert replay.outcome.lost_words == 0  # the typed words reached the LLM


def test_a_message_the_replay_did_not_type_diverges(answered_report: dict[str, Any]) -> None:
    plan = load_plan(answered_report)
    lost = dataclasses.replace(plan, typed=(TypedMessage(2.0, None),))
    found = divergences(plan, dataclasses.replace(plan, typed=()))
    assert [(d.kind, d.what) for d in found] == [
        ("typed", "typed message 1: not typed in the replay")
    ]
    assert [d.what for d in divergences(lost, plan)] == [
        "typed message 1 reached the chat, unlike recorded"
    ]


def test_a_message_livekit_refused_under_a_protected_line_is_lost_again() -> None:
    # RoomIO's text input interrupts first: livekit refuses under the protected announcement
    # and the message never reaches the chat; only its claim on the turn is in the report
    scenario = _catalog("lost_words/typed_over_protected_say")
    world, _ = run_scenario(scenario, Agent)
    plan = load_plan(session_report(world))
    assert plan.typed == (TypedMessage(3.0, None),)
    assert plan.turns == ()
    assert [s.protected for s in plan.app_says] == [True]
    replay = run_replay(plan, Agent)
    assert replay.divergences == ()
    assert replay.outcome.lost_words == 1  # the placeholder word, lost as the message was


def test_typed_calls_are_in_the_round_trip() -> None:
    assert left_out(_catalog("lost_words/typed_over_protected_say")) is None


@pytest.mark.parametrize(
    ("name", "agent_class"),
    [
        # ResilientAgent answers the message typed over the protected announcement after it
        ("lost_words/typed_over_protected_say", ResilientAgent),
        # the reply to the typed message waited behind the transfer's protected message while
        # the tool's output came in: it answers the message, not the output
        ("vad/dead_in_handoff_drain", ResilientAgent),
        # the reply to the typed message never played: the caller spoke over it
        ("lost_words/typed_reply_talked_over_in_handoff", Agent),
    ],
)
def test_the_typed_call_round_trips(name: str, agent_class: type[Agent]) -> None:
    trip = round_trip(_catalog(name), agent_class)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_turn_a_handoff_ended_as_its_final_came_is_said_before_it(tmp_path: Path) -> None:
    # the caller talks over the reply to the typed message as livekit drains the front desk:
    # the manager takes the call with their final transcript, 0.2 s after their last word
    scenario = _catalog("lost_words/reply_talked_over_during_handoff")
    trip = round_trip(scenario, ResilientAgent, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


_SPEAKS_IN_HANDOFF = "lost_words/typed_while_caller_speaks_in_handoff"
_TYPED_THERE = "is there parking nearby"
_SAID_ON = "my order number is twelve for two people tonight"


@pytest.fixture(scope="module")
def speaks_in_handoff(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[dict[str, Any], Path]]:
    """The call recorded on each agent: its report and its audio."""
    recorded: dict[str, tuple[dict[str, Any], Path]] = {}
    folder = tmp_path_factory.mktemp("speaks_in_handoff")
    for cls in (Agent, ResilientAgent):
        audio = folder / f"{cls.__name__}.ogg"
        world, _ = run_scenario(_catalog(_SPEAKS_IN_HANDOFF), cls, record_audio=audio)
        recorded[cls.__name__] = (session_report(world), audio)
    return recorded


def _user_messages(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        event["item"]
        for event in report["events"]
        if event["type"] == "conversation_item_added" and event["item"].get("role") == "user"
    ]


def test_resilient_agent_names_the_typed_words_of_a_message_it_merges(
    speaks_in_handoff: dict[str, tuple[dict[str, Any], Path]],
) -> None:
    # the message typed over the transfer's message is held and committed with the caller's
    # withheld words in one user message: its extra says which words were typed
    report, _ = speaks_in_handoff["ResilientAgent"]
    merged = _user_messages(report)[-1]
    assert merged["content"] == [f"{_TYPED_THERE} {_SAID_ON}"]
    assert merged["extra"] == {TYPED_EXTRA: [_TYPED_THERE]}
    # livekit never sends extra to the LLM; a plain Agent's messages carry none
    plain, _ = speaks_in_handoff["Agent"]
    assert all(not m.get("extra") for m in _user_messages(plain))
    plan = load_plan(report)
    assert plan.typed == (TypedMessage(6.3, _TYPED_THERE),)
    assert " ".join(plan.turns[1].heard) == _SAID_ON  # the caller's words, withheld
    # the emitted test's trimmed report keeps the mark, and redacts it as the words it names
    assert load_plan(trimmed_report(report)).typed == plan.typed
    redacted_plan = load_plan(redacted(trimmed_report(report)))
    typed = redacted_plan.typed[0].text
    assert typed is not None and redacted_plan.user_messages[-1].startswith(typed + " ")


def test_a_claim_livekit_refused_as_the_caller_spoke_on_is_read_from_the_recording(
    speaks_in_handoff: dict[str, tuple[dict[str, Any], Path]],
) -> None:
    # on a plain Agent livekit refused the message (the transfer's message is protected) and
    # its claim ended the caller's turn in a 0.35 s pause: the report has only that turn end
    report, audio = speaks_in_handoff["Agent"]
    plan = load_plan(report)
    assert plan.typed == ()
    assert [t.end for t in plan.turns] == [2.5, 6.3]
    recording = read_recording(audio, report, plan)
    read = with_recorded_claims(plan, recording)
    assert read.typed == (TypedMessage(6.3, None),)
    assert [w[:2] for w in read.turns[1].windows] == [(4.0, 6.0), (6.35, 7.6)]
    assert any("livekit refused" in a for a in read.assumptions)
    assert with_recorded_claims(read, recording) == read


@pytest.mark.parametrize("agent_class", [Agent, ResilientAgent])
def test_a_message_typed_as_the_caller_speaks_in_a_handoff_round_trips(
    agent_class: type[Agent], tmp_path: Path
) -> None:
    trip = round_trip(_catalog(_SPEAKS_IN_HANDOFF), agent_class, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_turn_silero_ended_while_the_line_stays_loud_is_no_typed_claim(tmp_path: Path) -> None:
    # Silero ends a turn where the recording's level still reads as speech (its own decision,
    # not the lab's energy threshold): no message was typed there, and none may be typed again
    trip = round_trip(_catalog("lost_words/over_protected_say_real_vad"), ResilientAgent, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_only_a_message_of_typed_and_spoken_words_names_its_typed_ones() -> None:
    typed = Fragment(_TYPED_THERE, 6.3, modality="text")
    said = Fragment(_SAID_ON, 9.7, recovered=True)
    assert typed_extra([typed, said]) == {TYPED_EXTRA: [_TYPED_THERE]}
    # merged into a turn livekit committed from the caller's speech
    assert typed_extra([typed], spoken_turn=True) == {TYPED_EXTRA: [_TYPED_THERE]}
    # all typed or all spoken: the message's modality says which
    assert typed_extra([typed]) == {}
    assert typed_extra([said], spoken_turn=True) == {}
    # the replay types the named words and gives the caller the rest
    assert untyped_words(f"{_TYPED_THERE} {_SAID_ON}", [_TYPED_THERE]) == _SAID_ON.split()
