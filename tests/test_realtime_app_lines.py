"""The app's own protected lines on a realtime model: livekit drops the argument, we do not."""

from __future__ import annotations

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog.agents.realtime import GREETING
from resilient_agent.lab.catalog.realtime import realtime_controls, realtime_scenarios
from resilient_agent.testing import Scenario, heard_sentences, run_scenario

FLAVOURS = ("openai", "gemini")
LIVEKIT_WARNING = "allow_interruptions cannot be False"


def _named(found: list[Scenario], name: str) -> Scenario:
    (scenario,) = [s for s in found if s.name == name]
    return scenario


def _greeting_heard(world: object) -> float:
    (greeting,) = [s for s in heard_sentences(world) if s.text == GREETING]  # type: ignore[arg-type]
    return greeting.heard


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_greeting_asked_protected_is_cut_on_agent_and_whole_on_resilient_agent(
    flavour: str,
) -> None:
    scenario = _named(realtime_scenarios(), f"realtime/{flavour}/words_over_app_protected_greeting")
    world, on_agent = run_scenario(scenario, Agent)
    assert not on_agent.passed
    assert any("protected line" in reason for reason in on_agent.reasons), on_agent.reasons
    assert world.logs.count(LIVEKIT_WARNING) == 1
    assert _greeting_heard(world) < 2.0  # cut at the caller's first words

    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert world.logs.count(LIVEKIT_WARNING) == 0
    # held while the greeting played, then the caller's words went to the model and were answered
    races = [(r["kind"], r["action"]) for r in world.race_events]
    assert races[-1] == ("caller_audio_withheld_from_model", "sent_to_model")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_with_nobody_over_it_the_protected_greeting_times_as_on_agent(flavour: str) -> None:
    scenario = _named(realtime_controls(), f"control/realtime_{flavour}_app_protected_greeting")
    timings = []
    for agent_class in (Agent, ResilientAgent):
        world, outcome = run_scenario(scenario, agent_class)
        assert outcome.passed, (agent_class.__name__, outcome.reasons)
        timings.append(
            [
                (s.text, round(s.started_at or -1.0, 3), round(s.heard, 3))
                for s in heard_sentences(world)
            ]
        )
        assert not world.race_events
    assert timings[0] == timings[1]
