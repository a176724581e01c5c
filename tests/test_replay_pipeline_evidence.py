"""A pipeline call's provider faults that its report shows only by what it lacks, replayed."""

from __future__ import annotations

from pathlib import Path

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay import load_plan
from resilient_agent.lab.replay.emit import trimmed_report
from resilient_agent.lab.replay.faults import ProviderError
from resilient_agent.lab.replay.pipeline_evidence import (
    HungRequest,
    hung_requests,
    lost_playouts,
    retry_after_refusals,
    silent_stt_from,
)
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.testing import Scenario, run_scenario
from resilient_agent.testing.session_report import session_report

_HANGS = "stall/llm_hangs"
_LOST_PLAYOUT = "stall/lost_playout_report"
_SILENT_STT = "provider/stt_goes_silent"
_REFUSED = "control/llm_refused_once"


def _scenario(name: str) -> Scenario:
    return next(s for s in CATALOG if s.name == name)


@pytest.mark.parametrize(
    ("name", "agent_class"),
    [
        # the LLM never answered the question: the Watchdog asked again 6 s later
        (_HANGS, ResilientAgent),
        # the playout report of the line the caller cut never came: given up 0.8 s later
        (_LOST_PLAYOUT, ResilientAgent),
        # the STT took the second turn and answered nothing: restarted, the words recovered
        (_SILENT_STT, ResilientAgent),
        # the first request refused, retried 0.1 s later: livekit's ttft counts from the first
        (_REFUSED, Agent),
    ],
)
def test_the_call_round_trips_with_its_recording(
    tmp_path: Path, name: str, agent_class: type[Agent]
) -> None:
    trip = round_trip(_scenario(name), agent_class, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_request_that_never_produced_a_token_hangs_until_the_agent_asked_again() -> None:
    world, _ = run_scenario(_scenario(_HANGS), ResilientAgent)
    plan = load_plan(session_report(world))
    assert plan.faults.llm_hangs == {("do you have parking", None): 9.04}
    assert any(
        a.startswith("at 3.05 s: the LLM's request answering 'do you have parking' produced no")
        for a in plan.assumptions
    )
    # nothing else is read into it
    assert not plan.faults.lost_playout_report and plan.faults.faults.stt_silent_at is None


@pytest.mark.parametrize("name", [_HANGS, _LOST_PLAYOUT, _SILENT_STT])
def test_an_emitted_test_keeps_what_the_inference_reads(name: str) -> None:
    # --emit-test inlines the report trimmed to what the replay reads
    world, _ = run_scenario(_scenario(name), ResilientAgent)
    report = session_report(world)
    faults = load_plan(report).faults
    assert faults.llm_hangs or faults.lost_playout_report or faults.faults.stt_silent_at
    assert load_plan(trimmed_report(report)).faults == faults


def test_a_refused_request_times_its_answer_from_the_retry() -> None:
    world, _ = run_scenario(_scenario(_REFUSED), Agent)
    plan = load_plan(session_report(world))
    first, second = plan.answers
    # livekit measured 0.4 s from the refused request; its retry came 0.1 s after the error
    assert (first.ttft, second.ttft) == (pytest.approx(0.3), pytest.approx(0.3))
    assert plan.faults.llm_hangs is None


def test_a_plain_agent_that_waited_to_the_close_asked_nothing_again() -> None:
    # no request after the one that hung: nothing shows when it would have answered
    world, _ = run_scenario(_scenario(_HANGS), Agent)
    plan = load_plan(session_report(world))
    assert plan.faults.llm_hangs is None
    assert not any("produced no token" in a for a in plan.assumptions)


def test_a_silent_stt_that_was_never_restarted_is_read_as_before() -> None:
    world, _ = run_scenario(_scenario(_SILENT_STT), Agent)
    plan = load_plan(session_report(world))
    assert plan.faults.faults.stt_silent_at == 7.0
    assert not any("a middleware recovered them" in a for a in plan.assumptions)


def test_asking_again_after_a_line_a_message_or_an_error_is_no_hang() -> None:
    states = [(0.0, "listening"), (3.0, "thinking")]
    assert hung_requests([3.0, 9.0], [9.0], states, []) == [HungRequest(3.0, 9.0)]
    # the first request was answered (a line said from it)
    assert hung_requests([3.0, 9.0], [3.0, 9.0], states, []) == []
    # the caller spoke, a message or tool output came, or the LLM failed in between
    assert hung_requests([3.0, 9.0], [9.0], states, [5.0]) == []
    # the agent spoke (or listened) in between
    assert hung_requests([3.0, 9.0], [9.0], [*states, (4.0, "speaking")], []) == []
    # the second request's answer was never said either: nothing shows it answered
    assert hung_requests([3.0, 9.0], [], states, []) == []


def test_a_line_cleared_and_reported_at_once_lost_no_playout() -> None:
    line = ("Tonight we have a roast chicken with lemon.", 3.7, 7.55)
    (lost,) = lost_playouts([line], [3.05, 6.75], [3.05, 7.55])
    assert (lost.cleared, lost.given_up) == (6.75, 7.55)
    # its message added as the caller's was committed: the report came
    assert lost_playouts([(line[0], 3.7, 6.76)], [3.05, 6.75], [3.05, 6.76]) == []
    # a reply asked for as the caller's message was committed did not wait for the line
    assert lost_playouts([line], [3.05, 6.75], [3.05, 6.75, 7.55]) == []
    assert lost_playouts([line], [3.05, 6.75], [3.05, 7.0, 7.55]) == []


def test_a_turn_untranscribed_while_the_agent_withheld_nothing_is_a_silent_stt() -> None:
    listening = [(0.0, "listening")]
    assert silent_stt_from([(7.0, 9.4, False, True)], listening) == 7.0
    # transcribed, or no words of it committed: nothing recovered from a silent STT
    assert silent_stt_from([(7.0, 9.4, True, True)], listening) is None
    assert silent_stt_from([(7.0, 9.4, False, False)], listening) is None
    # the agent spoke or worked over it: livekit may have withheld the audio
    assert silent_stt_from([(7.0, 9.4, False, True)], [(6.0, "thinking")]) is None
    assert silent_stt_from([(7.0, 9.4, False, True)], [*listening, (8.0, "speaking")]) is None


def test_an_answer_not_refused_keeps_its_time_to_first_token() -> None:
    refused = ProviderError(3.05, "llm", True, since_context=0.0)
    assert retry_after_refusals(3.05, 0.4, [refused]) == pytest.approx(0.1)
    assert retry_after_refusals(3.05, 0.4, []) == 0.0
    # an error after its first token, or another provider's, is not a refusal of it
    assert retry_after_refusals(1.0, 0.4, [refused]) == 0.0
    tts = ProviderError(3.05, "tts", True)
    assert retry_after_refusals(3.05, 0.4, [tts]) == 0.0
