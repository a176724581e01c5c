"""What a realtime call's report shows by its absences, replayed.

A reply cut by its server's error (the error's time and the part that played), a goodbye that
never came (a tool's output asked for it and the agent thought until the close), a line Gemini
cut as the caller began, with none of their words transcribed before the close.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.catalog.realtime import reply_cut_by_server_error
from resilient_agent.lab.replay import load_plan, run_replay
from resilient_agent.lab.replay.emit import redacted, trimmed_report
from resilient_agent.lab.replay.realtime_evidence import asked_again
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.testing import Scenario, run_scenario
from resilient_agent.testing.session_report import session_report

_CUT = "realtime/gemini/reply_cut_by_server_error"
_HUNG_GOODBYE = "realtime/openai/livekit_goodbye_never_comes"
_BARGE_IN = "realtime/gemini/question_over_livekit_goodbye"
_NEVER_COMES = "realtime/openai/reply_never_comes"


def _scenario(name: str) -> Scenario:
    return next(s for s in CATALOG if s.name == name)


@pytest.mark.parametrize(
    ("name", "agent_class"),
    [
        # the server's 1011 halfway through the answer: half of it played, then nothing on
        # Agent; ResilientAgent asked for it again once the cut line (1.9 s, the lab voice's
        # length for its words 1.6 s) played out
        (_CUT, Agent),
        (_CUT, ResilientAgent),
        # the goodbye livekit's EndCallTool asked for never came: ResilientAgent gave up on it
        # after 5 s and hung up
        (_HUNG_GOODBYE, ResilientAgent),
        # Gemini cut its goodbye as the caller began a question; the session closed then
        (_BARGE_IN, Agent),
        # the model's reply hung: ResilientAgent's Watchdog gave up after 5 s and asked again
        (_NEVER_COMES, ResilientAgent),
    ],
)
@pytest.mark.parametrize("recorded", [True, False], ids=["recording", "transcripts"])
def test_the_call_round_trips(
    tmp_path: Path, name: str, agent_class: type[Agent], recorded: bool
) -> None:
    trip = round_trip(_scenario(name), agent_class, tmp_path if recorded else None)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_reply_cut_by_the_servers_error_is_read_from_the_error_and_what_played() -> None:
    world, _ = run_scenario(_scenario(_CUT), ResilientAgent)
    plan = load_plan(session_report(world))
    cut, again = plan.answers
    # the part that played is all the model sent: its stream ran until the error
    assert cut.cut_by_error and not again.cut_by_error
    assert (cut.text, cut.at + cut.duration) == ("Your parcel is at the", pytest.approx(3.9))
    # it played from 3.8 s to 5.7 s: the replay's line lasts as long
    assert cut.played == pytest.approx(1.9)
    assert any(
        a.startswith("at 3.80 s: the model's line 'Your parcel is at the', cut by its server's")
        and "played 1.90 s" in a
        for a in plan.assumptions
    )
    # asked again with nothing from the caller since: its context ends in the cut line
    assert (again.after_user, again.after_line) == (None, "Your parcel is at the")
    assert any(
        a.startswith("at 3.90 s: the model's server failed") and "'Your parcel is at the'" in a
        for a in plan.assumptions
    )


def test_a_goodbye_that_never_came_is_a_hung_reply_to_livekits_end_call_tool() -> None:
    world, _ = run_scenario(_scenario(_HUNG_GOODBYE), Agent)
    plan = load_plan(session_report(world))
    (run,) = plan.tool_runs
    assert run.name == "end_call" and run.livekit_end_call
    (answer,) = [a for a in plan.answers if a.after_tool == "end_call"]
    assert answer.hung and answer.text == ""
    assert any("never came" in a for a in plan.assumptions)
    assert any("livekit's EndCallTool" in a for a in plan.assumptions)


def test_a_reply_asked_for_again_after_nothing_happened_hung_until_then() -> None:
    world, _ = run_scenario(_scenario(_NEVER_COMES), ResilientAgent)
    plan = load_plan(session_report(world))
    # the reply livekit created at the caller's turn end (3.5 s) never came; the Watchdog asked
    # again at 8.5 s and the model answered that one
    (answer,) = plan.answers
    assert (answer.at, answer.hangs_until, answer.hung) == (8.5, 8.5, False)
    assert any(
        a.startswith("at 3.50 s: the reply livekit created (speech_created) never came")
        and "until 8.50 s" in a
        for a in plan.assumptions
    )


def test_a_reply_asked_for_with_nothing_created_before_is_not_a_hang() -> None:
    world, _ = run_scenario(_scenario(_NEVER_COMES), ResilientAgent)
    report = session_report(world)
    events = report["events"]
    t0 = events[0]["created_at"]
    # the app's own reply after a quiet stretch, with no reply created before it: no hang
    no_first = [
        e for e in events if not (e["type"] == "speech_created" and e["user_initiated"] is False)
    ]
    # something happened between the two replies (the caller began to speak): no hang either
    between = [
        *events,
        {
            "type": "user_state_changed",
            "created_at": t0 + 6.0,
            "new_state": "speaking",
            "old_state": "listening",
        },
    ]
    between.sort(key=lambda e: e["created_at"])
    assert asked_again(events) == [(3.5, 8.5)]
    assert asked_again(no_first) == []
    assert asked_again(between) == []
    # and on the plain Agent's call the reply hung to the close, asked for once: no answer
    world, _ = run_scenario(_scenario(_NEVER_COMES), Agent)
    plan = load_plan(session_report(world))
    assert plan.answers == () and not any("never came" in a for a in plan.assumptions)


def _with_line(report: dict[str, Any], text: str) -> dict[str, Any]:
    """``report`` with its first assistant message saying ``text``."""
    events = copy.deepcopy(report["events"])
    item = next(
        e["item"]
        for e in events
        if e["type"] == "conversation_item_added" and e["item"].get("role") == "assistant"
    )
    item["content"] = [text]
    return {**report, "events": events}


def test_a_whole_sentence_the_error_came_during_with_nothing_asked_again_was_whole() -> None:
    world, _ = run_scenario(_scenario(_CUT), Agent)
    report = _with_line(session_report(world), "Your parcel is at the depot.")
    plan = load_plan(report)
    (answer, *_) = plan.answers
    # the server failed at 3.9 s, once the reply had come whole: not cut, the error kept
    assert not answer.cut_by_error and answer.fails_after == pytest.approx(3.9 - answer.at)
    assert any(
        a.startswith("at 3.90 s: the model's server failed") and "the reply had come whole" in a
        for a in plan.assumptions
    )


def test_a_line_the_error_came_during_was_cut_mid_sentence_or_when_asked_again() -> None:
    # mid-sentence: cut (the catalog's call); a whole sentence ResilientAgent asked for
    # again as it ended: cut too (its audio ran out at the error)
    world, _ = run_scenario(_scenario(_CUT), ResilientAgent)
    for report in (
        session_report(world),
        _with_line(session_report(world), "Your parcel is at the depot."),
    ):
        plan = load_plan(report)
        assert plan.answers[0].cut_by_error and plan.answers[0].fails_after is None
        assert not any("the reply had come whole" in a for a in plan.assumptions)


def test_a_whole_reply_its_server_failed_as_it_played_round_trips_on_resilient_agent() -> None:
    # the stack's plugin (livekit-plugins-google) may not import on livekit-agents' floor
    pytest.importorskip("livekit.plugins.google", exc_type=ImportError)
    # Gemini Live's emulator fails after the reply is whole: ResilientAgent did not ask again,
    # nor does its replay (which read the reply as cut and asked again before)
    scenario = reply_cut_by_server_error(after_reply=True)
    world, _ = run_scenario(scenario, ResilientAgent, stack="gemini-live")
    plan = load_plan(session_report(world), hang_up_pad=0.3)
    replay = run_replay(plan, ResilientAgent, name=scenario.name)
    assert not replay.divergences, [str(d) for d in replay.divergences]


def test_redaction_keeps_livekits_end_call_instructions_and_so_the_hung_goodbye() -> None:
    world, _ = run_scenario(_scenario(_HUNG_GOODBYE), Agent)
    report = redacted(trimmed_report(session_report(world)))
    plan = load_plan(report)
    # livekit's own instructions are none of the call's words: kept, and with them the tool
    (run,) = plan.tool_runs
    assert run.livekit_end_call
    (answer,) = [a for a in plan.answers if a.after_tool == "end_call"]
    assert answer.hung
    # what the caller said is still redacted
    (said,) = [m["content"] for m in report["chat_history"]["items"] if m["role"] == "user"]
    assert said == ["w1 w2"]


def test_redaction_still_redacts_an_end_call_tool_of_the_apps_own() -> None:
    output = {"name": "end_call", "output": "the caller asked to hang up, say goodbye"}
    assert redacted(output) == {"name": "end_call", "output": "w1 w2 w3 w4 w5 w6 w7 w8"}


def test_a_line_gemini_cut_as_the_call_closed_was_cut_by_the_caller() -> None:
    world, _ = run_scenario(_scenario(_BARGE_IN), Agent)
    plan = load_plan(session_report(world))
    # the goodbye stopped at 4.61 s and the session closed then, no word of the caller's
    # transcribed: they began a frame before
    assert plan.barge_ins == (4.6,)
    assert any(a.startswith("at 4.60 s: the caller began to speak") for a in plan.assumptions)


@pytest.mark.parametrize("name", [_CUT, _HUNG_GOODBYE, _BARGE_IN, _NEVER_COMES])
def test_an_emitted_test_keeps_what_a_realtime_replay_reads(name: str) -> None:
    # --emit-test inlines the report trimmed to what the replay reads: a realtime call's item
    # ids, response ids and model errors with it
    world, _ = run_scenario(_scenario(name), Agent)
    report = session_report(world)
    assert load_plan(trimmed_report(report, recording=True)) == load_plan(report)
