"""The caller's audio held over a protected transfer reaches the next agent's model."""

from __future__ import annotations

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import Scenario, run_scenario


def _scenario(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


@pytest.mark.parametrize("flavour", ["openai", "gemini"])
def test_words_over_a_protected_transfer_are_answered_by_the_next_agent(flavour: str) -> None:
    scenario = _scenario(f"realtime/{flavour}/words_over_protected_transfer")
    _, plain = run_scenario(scenario, Agent)
    world, resilient = run_scenario(scenario, ResilientAgent)
    # plain Agent: the model heard silence for the words, and the manager never heard them
    assert not plain.passed
    assert any("never reached the LLM" in r for r in plain.reasons)
    assert resilient.passed, resilient.reasons
    assert "Nine it is, I changed the booking." in world.tts.sentences.values()
    actions = [e["action"] for e in world.race_events if e["event"] == "race_handled"]
    # sent to the front desk's model as the preamble ended, then to the manager's at the handoff
    assert actions == ["sent_to_model", "sent_to_next_agent"]


def test_on_the_real_gemini_plugin_too() -> None:
    pytest.importorskip("livekit.plugins.google")
    scenario = _scenario("realtime/gemini/words_over_protected_transfer")
    _, plain = run_scenario(scenario, Agent, stack="gemini-live")
    world, resilient = run_scenario(scenario, ResilientAgent, stack="gemini-live")
    assert not plain.passed
    assert resilient.passed, resilient.reasons
    # the manager's model is a second connection, and it heard the words
    assert sum(world.connections.values()) == 2
    assert [text for _, text, _ in world.stt.finals][-1] == "actually make it nine instead"
