"""Watchdog: every VAD fault is recovered with evidence; long speech and long tools are not."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from livekit.agents import Agent
from resilient_agent.middleware.stall_evidence import CAUSE_PLAYOUT
from resilient_agent.middleware.watchdog import Watchdog

from resilient_agent import MiddlewareError, ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import CallOutcome, Scenario, run_scenario


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


FAULTS = [
    "vad/stuck_plain_agent",
    "vad/dead_plain_agent",
    "vad/no_end_of_speech_plain_agent",
    "tool_gap/vad_stuck",
    "tool_gap/vad_dead",
    "tool_gap/vad_no_end_of_speech",
]


def _stuck_turn_events(outcome: CallOutcome) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``user_turn_stuck`` findings and the steps taken on them."""
    found = [e for e in outcome.race_events if e["kind"] == "user_turn_stuck"]
    return (
        [e for e in found if e["event"] == "race_detected"],
        [e for e in found if e["event"] == "race_handled"],
    )


@pytest.mark.parametrize("name", FAULTS)
def test_a_stuck_user_turn_is_ended_and_answered(name: str) -> None:
    _, plain = run_scenario(catalog(name), Agent)
    assert plain.end_user_state == "speaking"
    _world, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.end_user_state == "listening" and outcome.unfinished_handles == 0
    (detected,), handled = _stuck_turn_events(outcome)
    assert [e["action"] for e in handled] == ["restarted_vad"]
    assert handled[0]["recovered"] is True
    # evidence: the line has been quiet since the caller stopped (the meter looks every 50 ms)
    # for the VAD's silence window (0.55 s) plus the 0.25 s margin with the final transcript in,
    # or for quiet_s (1.2 s) when the words were withheld from the STT (over a hold message)
    faulted = catalog(name).utterances[catalog(name).vad_fault.utterance]
    needed = 0.8 if name.startswith("vad/") else 1.2
    assert faulted.end + needed <= detected["at_s"] <= faulted.end + needed + 0.06
    if name.startswith("vad/"):
        # answered within 2 s of the caller's last word (1.2 s without the fault)
        (latency,) = outcome.reply_latencies_s
        assert latency is not None and latency <= 2.0


@pytest.mark.parametrize("name", ["control/long_monologue", "control/long_tool_with_filler"])
def test_no_false_alarm_on_long_speech_or_long_tools(name: str) -> None:
    _, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not [e for e in outcome.race_events if e["kind"] == "user_turn_stuck"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"quiet_s": 0.1}, "quiet_s=0.1 is out of range"),
        ({"max_recoveries": 0}, "max_recoveries=0 is out of range"),
        (
            {"quiet_s": 1.0, "check_every_s": 1.0},
            "check_every_s=1.0 is not below the shortest threshold (1.0)",
        ),
        ({"interrupted_done_s": 5.0}, "interrupted_done_s=5.0 is out of range"),
        ({"thinking_s": 0.5}, "thinking_s=0.5 is out of range"),
        ({"speech_wait_s": 0.1}, "speech_wait_s=0.1 is out of range"),
    ],
)
def test_options_are_validated(options: dict[str, float], message: str) -> None:
    with pytest.raises(MiddlewareError, match=re.escape(message)):
        Watchdog(**options)  # type: ignore[arg-type]


def _events(outcome: CallOutcome, kind: str) -> list[dict[str, Any]]:
    return [e for e in outcome.race_events if e["kind"] == kind]


def test_a_hanging_llm_request_is_asked_for_again() -> None:
    scenario = catalog("stall/llm_hangs")
    _, plain = run_scenario(scenario, Agent)
    assert "utterance 1 (1.0-2.5s): never answered audibly to the end" in plain.reasons
    assert plain.unfinished_handles == 1
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    detected, handled = _events(outcome, "thinking_without_speech")
    assert detected["event"] == "race_detected" and handled["action"] == "asked_for_the_reply_again"
    assert detected["for_s"] == 6.0
    # one retry: the hung request and the one that answered, no retry storm
    asked = [r for r in world.llm.requests if r.last_user_text == "do you have parking"]
    assert [r.hung for r in asked] == [True, False]


def test_a_lost_playout_report_is_given_for_the_sink() -> None:
    scenario = catalog("stall/lost_playout_report")
    _, plain = run_scenario(scenario, Agent)
    assert plain.interruption_timeouts >= 1
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.interruption_timeouts == 0
    detected, handled = _events(outcome, "interrupted_speech_not_done")
    assert detected["cause"] == CAUSE_PLAYOUT
    assert handled["action"] == "reported_playout_for_output" and handled["recovered"] is True
    # the caller's interruption is answered once, by livekit's own turn
    assert not _events(outcome, "dropped_user_turn")


def test_a_reply_held_by_noise_is_played_protected() -> None:
    scenario = catalog("stall/reply_waits_for_noise")
    _, plain = run_scenario(scenario, Agent)
    assert any("answered after" in r for r in plain.reasons)
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    actions = [e["action"] for e in _events(outcome, "speech_waits_for_silence")]
    assert actions == [None, "protected_waiting_speech", "restarted_vad"]
    # the noise (loud, no words) must not read as a stuck turn: the line is not quiet
    assert not _events(outcome, "user_turn_stuck")


@pytest.mark.parametrize(
    "name",
    [
        "control/long_monologue",
        "control/long_tool_with_filler",
        "tool_gap/business_logic_long",
        "control/interrupt_tool_reply_generation",
    ],
)
def test_no_stall_is_reported_where_the_call_makes_progress(name: str) -> None:
    _, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.passed, outcome.reasons
    kinds = {"speech_waits_for_silence", "thinking_without_speech", "interrupted_speech_not_done"}
    assert not [e for e in outcome.race_events if e["kind"] in kinds]


def test_a_stall_that_never_clears_is_retried_within_the_budget_then_reported_once() -> None:
    from resilient_agent.middleware import default_middleware
    from structlog.testing import capture_logs

    from resilient_agent.testing import LLMRule

    class Patient(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            chain = [
                m if not isinstance(m, Watchdog) else Watchdog(thinking_s=2.0, max_recoveries=2)
                for m in default_middleware()
            ]
            super().__init__(*args, middleware=chain, **kwargs)

    forever = LLMRule(when_user_says="parking", text="Yes.", hangs_before=1000.0)
    scenario = dataclasses.replace(catalog("stall/llm_hangs"), llm=(forever,), duration=30.0)
    with capture_logs() as logs:
        world, _ = run_scenario(scenario, Patient)
    found = _events_of(world, "thinking_without_speech")
    assert [e["event"] for e in found] == [
        "race_detected",
        "race_handled",
        "race_detected",
        "race_handled",
        "race_detected",  # the budget is spent: reported once more, then never again
    ]
    assert [r["event"] for r in logs].count("watchdog_gave_up") == 1
    assert len([r for r in world.llm.requests if r.last_user_text == "do you have parking"]) == 3


def _events_of(world: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in world.race_events if e["kind"] == kind]


def test_a_reply_waiting_for_a_caller_who_really_talks_is_left_waiting() -> None:
    # a filler comes due at 7.4 s while the caller talks (with words) from 6 s to 13 s
    from resilient_agent.testing import Utterance

    base = catalog("control/long_tool_with_filler")
    addition = "and we will need two high chairs for the little ones and a quiet table please"
    scenario = dataclasses.replace(
        base, utterances=(*base.utterances, Utterance(6.0, 13.0, addition)), duration=26.0
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.lost_words == 0
    assert not [e for e in outcome.race_events if e["kind"] == "speech_waits_for_silence"]
    # a filler really came due while the caller was talking
    fillers = [r for r in world.recorder.speeches.values() if r.source == "say"]
    assert any(6.0 < r.created_at - world.t0 < 13.0 for r in fillers)


@pytest.mark.parametrize("name", ["vad/dead_in_handoff_drain", "vad/stuck_in_handoff_drain"])
def test_a_turn_stuck_while_a_handoff_drains_is_recovered_by_the_leaving_watchdog(
    name: str,
) -> None:
    # no middleware of either agent runs while livekit drains the leaving one, and the drain
    # waits for a reply that waits for the caller's silence
    from resilient_agent.testing import VADFault

    scenario = catalog(name)
    _world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.end_user_state == "listening" and outcome.unfinished_handles == 0
    (detected,), handled = _stuck_turn_events(outcome)
    assert [(e["action"], e["recovered"]) for e in handled] == [("restarted_vad", True)]
    # the words were withheld from the STT over the transfer message: quiet_s (1.2 s) of quiet
    faulted = scenario.utterances[1]
    assert faulted.end + 1.2 <= detected["at_s"] <= faulted.end + 1.2 + 0.06
    # recovered before the drain needed the caller's silence: answered as with a healthy VAD
    _, healthy = run_scenario(dataclasses.replace(scenario, vad_fault=VADFault()), ResilientAgent)
    assert outcome.reply_latencies_s == healthy.reply_latencies_s


def test_a_caller_talking_through_a_handoff_drain_is_never_cut_off() -> None:
    from resilient_agent.testing import Typed, Utterance, VADFault

    base = catalog("vad/dead_in_handoff_drain")
    talk = "we would like a quiet table near the window with a view of the garden please"
    scenario = dataclasses.replace(
        base,
        # a healthy VAD, and the caller talks from before the handoff to after the drain
        vad_fault=VADFault(),
        utterances=(base.utterances[0], Utterance(4.5, 12.0, talk, reply_within=3.0)),
        typed=(Typed(base.typed[0].at, base.typed[0].text, reply_within=11.0),),
    )
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not [e for e in outcome.race_events if e["kind"] == "user_turn_stuck"]


def test_a_recovery_under_way_as_the_drain_ends_is_finished_and_reported() -> None:
    # no typed reply: the drain ends with the transfer message (9.72 s), 0.5 s into a recovery
    from resilient_agent.testing import Utterance

    base = catalog("vad/dead_in_handoff_drain")
    said = Utterance(7.0, 8.0, "a table for three", reply_within=4.0)
    scenario = dataclasses.replace(base, utterances=(base.utterances[0], said), typed=())
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    (detected,), handled = _stuck_turn_events(outcome)
    assert detected["at_s"] < 9.72 < detected["at_s"] + 1.0
    assert [(e["action"], e["recovered"]) for e in handled] == [("restarted_vad", True)]
