"""Watchdog: every VAD fault is recovered with evidence; long speech and long tools are not."""

from __future__ import annotations

import pytest
from livekit.agents import Agent
from resilient_agent.middleware.watchdog import Watchdog

from resilient_agent import MiddlewareError, ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import Scenario, run_scenario


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


@pytest.mark.parametrize("name", FAULTS)
def test_a_stuck_user_turn_is_ended_and_answered(name: str) -> None:
    _, plain = run_scenario(catalog(name), Agent)
    assert plain.end_user_state == "speaking"
    _world, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.end_user_state == "listening" and outcome.unfinished_handles == 0
    (detected,) = [
        e
        for e in outcome.race_events
        if e["event"] == "race_detected" and e["kind"] == "user_turn_stuck"
    ]
    handled = [
        e
        for e in outcome.race_events
        if e["kind"] == "user_turn_stuck" and e["event"] == "race_handled"
    ]
    assert [e["action"] for e in handled] == ["restarted_vad"]
    assert handled[0]["recovered"] is True
    # evidence: 2 s of silence from the end of the faulted utterance, checked every 0.25 s
    faulted = catalog(name).utterances[catalog(name).vad_fault.utterance]
    assert faulted.end + 2.0 <= detected["at_s"] <= faulted.end + 2.0 + 0.3


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
        ({"quiet_s": 1.0, "check_every_s": 1.0}, "check_every_s=1.0 is not below quiet_s=1.0"),
    ],
)
def test_options_are_validated(options: dict[str, float], message: str) -> None:
    with pytest.raises(MiddlewareError, match=message.replace(".", r"\.")):
        Watchdog(**options)  # type: ignore[arg-type]
