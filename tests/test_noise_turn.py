"""A turn that never ends on continuous noise: hold music under the caller's question.

The STT has the question, but the VAD hears the music as speech, so livekit never ends the turn
and holds the answer until the music stops. The Watchdog ends the turn ``noise_turn_s`` after
the final transcript when no word came since, and plays the reply over the noise.
"""

from __future__ import annotations

import dataclasses

import pytest
from livekit.agents import Agent
from resilient_agent.middleware import Watchdog

from resilient_agent import OptionError, ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import CallOutcome, Scenario, Utterance, run_scenario


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def noise_events(outcome: CallOutcome) -> list[tuple[str, str | None]]:
    return [
        (e["event"], e.get("action"))
        for e in outcome.race_events
        if e["kind"] == "turn_held_by_noise"
    ]


def test_a_question_under_hold_music_is_answered_while_the_music_plays() -> None:
    scenario = catalog("stall/question_under_hold_music")
    _, plain = run_scenario(scenario, Agent)
    # livekit answers once the music stops, at 25 s
    assert plain.reply_latencies_s[0] is not None and plain.reply_latencies_s[0] > 20.0
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert noise_events(outcome)[0] == ("race_detected", None)
    latency = outcome.reply_latencies_s[0]
    assert latency is not None and latency <= 3.5


def test_music_that_stops_after_the_question_is_left_to_the_vad() -> None:
    scenario = catalog("control/noise_stops_after_question")
    _, plain = run_scenario(scenario, Agent)
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert plain.passed and outcome.passed, (plain.reasons, outcome.reasons)
    assert outcome.reply_latencies_s == plain.reply_latencies_s
    assert noise_events(outcome) == []


def test_a_caller_who_talks_on_over_the_music_is_not_cut_off() -> None:
    # six seconds of words: the STT keeps hearing them, so the turn is not ended under them
    long_question = Utterance(
        3.0,
        9.0,
        "I would like to know what time you open tomorrow and whether I can bring my dog",
        reply_within=4.0,
    )
    scenario = dataclasses.replace(
        catalog("stall/question_under_hold_music"), utterances=(long_question,)
    )
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    detected = [e["at_s"] for e in outcome.race_events if e["kind"] == "turn_held_by_noise"]
    assert detected and min(detected) >= 9.0 + 2.0


def test_bad_noise_turn_option_is_refused() -> None:
    with pytest.raises(OptionError):
        Watchdog(noise_turn_s=0.1)
