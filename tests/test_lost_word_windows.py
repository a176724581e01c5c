"""The lost-word windows the fuzzer found, swept wider than the catalog's scenarios."""

from __future__ import annotations

import dataclasses

import pytest

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.testing import run_scenario

_BY_NAME = {s.name: s for s in scenarios()}
HANDOFF = _BY_NAME["lost_words/handoff_during_protected_hold"]
PAUSE = _BY_NAME["lost_words/pause_over_protected_say"]


@pytest.mark.parametrize("delay", [round(0.3 * i, 1) for i in range(1, 11)])
def test_handoff_during_protected_hold_keeps_every_word_at_every_delay(delay: float) -> None:
    scenario = dataclasses.replace(HANDOFF, agent=agents.protected_handoff_agent(delay_s=delay))
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.lost_words == 0, outcome.reasons
    assert outcome.passed, outcome.reasons


@pytest.mark.parametrize("pause", [0.58, 0.62, 0.66, 0.7, 0.75, 0.8])
def test_second_window_before_the_first_is_answered_keeps_its_words(pause: float) -> None:
    first = PAUSE.utterances[0]
    scenario = PAUSE.with_onset(1, round(first.end + pause, 2))
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.lost_words == 0, outcome.reasons
    assert outcome.passed, outcome.reasons
