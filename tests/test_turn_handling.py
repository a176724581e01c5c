"""livekit 1.8's deliberate cut-ins play exactly as on Agent; the words said over them are kept.

``turn_handling={"user_turn_limit": ...}`` makes livekit cut in over a caller who talks too long
(``Agent.on_user_turn_exceeded``), and an app may cut in itself inside ``cut_in()``. The chain
must not hold such a speech for the caller (WaitForCaller would, for any other protected speech
over a speaking caller): its creation, playout and end are compared with the same call on a plain
``Agent``. What the caller says over it is livekit's race (withheld from the STT, dropped): the
reference call loses those words, ``ResilientAgent`` answers them after the cut-in.
"""

from __future__ import annotations

import dataclasses

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.catalog.turn_handling import (
    ANNOUNCEMENT,
    CUT_IN_LINE,
    announcing_agent,
    turn_handling_scenarios,
)
from resilient_agent.testing import Scenario, run_scenario
from resilient_agent.testing.differential import CallTrace, call_trace, run_differential

# calls whose livekit logs are compared: no earlier test's garbage logs into them
pytestmark = pytest.mark.usefixtures("earlier_tests_garbage_collected")

_HELD = "protected_speech_over_speaking_caller"
_RACES = turn_handling_scenarios()
_CONTROL = next(s for s in scenarios() if s.name == "control/turn_limit_cut_in")


def _cut_in(trace: CallTrace) -> tuple[object, ...]:
    """The cut-in's speech handle, its playout as heard, and the agent states until it ended."""
    speech = trace["speeches"][0]
    done_at = speech[6]
    states = [entry for entry in trace["agent_state"] if entry[0] <= done_at]
    return speech, trace["heard"][0], tuple(states)


def _over_a_speaking_caller(trace: CallTrace) -> bool:
    """The first speech is protected and created while the caller is speaking."""
    _, created_at, _, allow_interruptions, *_ = trace["speeches"][0]
    speaking_since = [at for at, state in trace["user_state"] if state == "speaking"]
    stopped = [at for at, state in trace["user_state"] if state != "speaking"]
    return (
        not allow_interruptions
        and bool(speaking_since)
        and speaking_since[0] < created_at < min(stopped, default=float("inf"))
    )


def test_a_race_free_cut_in_is_agents_call() -> None:
    result = run_differential(_CONTROL, Agent, ResilientAgent)
    # the feature acted: livekit cut in, uninterruptible, while the VAD still had the caller
    assert _over_a_speaking_caller(result.expected)
    assert [words for _, role, words in result.expected["items"] if role == "assistant"] == [
        CUT_IN_LINE
    ]
    assert result.differences == [], result.report()


@pytest.mark.parametrize("scenario", _RACES, ids=[s.name for s in _RACES])
def test_a_cut_in_over_a_talking_caller_plays_as_on_agent(scenario: Scenario) -> None:
    result = run_differential(scenario, Agent, ResilientAgent)
    assert _over_a_speaking_caller(result.expected)
    assert _cut_in(result.actual) == _cut_in(result.expected)
    assert not [entry for entry in result.actual["interventions"] if entry[2] == _HELD], (
        "the cut-in was taken for a race"
    )


@pytest.mark.parametrize("scenario", _RACES, ids=[s.name for s in _RACES])
def test_the_words_said_over_a_cut_in_are_answered(scenario: Scenario) -> None:
    _, on_agent = run_scenario(scenario, Agent)
    _, on_resilient = run_scenario(scenario, ResilientAgent)
    assert on_agent.lost_words > 0, "the reference call shows livekit's race"
    assert on_resilient.passed, on_resilient.reasons
    assert on_resilient.lost_words == 0


def test_a_protected_speech_the_app_does_not_mark_is_still_held() -> None:
    """The mark is what lets a speech over the caller play: without it the chain waits."""
    marked = next(s for s in _RACES if s.name == "turn_limit/words_over_app_cut_in")
    unmarked = dataclasses.replace(marked, agent=announcing_agent(at_s=3.0, marked=False))
    held = call_trace(run_scenario(unmarked, ResilientAgent)[0])
    played = call_trace(run_scenario(marked, ResilientAgent)[0])
    assert _HELD in [entry[2] for entry in held["interventions"]]
    # paused at its first frame until the caller stopped (6.55 s), then played whole
    caller_stopped = next(at for at, state in held["user_state"] if state == "listening")
    _, played_until, _, _ = played["heard"][0]
    _, held_until, _, _ = held["heard"][0]
    assert played_until < caller_stopped
    assert held_until >= caller_stopped + len(ANNOUNCEMENT) / 15
