"""The production-shaped bench call runs on both agents, deterministically, with the same turns.

``python -m benchmarks.bench_session --production`` compares CPU only when turn latencies are
identical; these tests keep its call (real speech, livekit's embedded VAD and local turn
detector, 50 ms frames) passing and deterministic, without timing anything.
"""

from __future__ import annotations

import pytest
from livekit.agents import Agent

from benchmarks.bench_session import (
    _NULL_CLASSES,
    PRODUCTION_TURN_SECONDS,
    _alternate,
    _production_scenario,
    _ratios,
)
from resilient_agent import ResilientAgent
from resilient_agent.testing import run_scenario


def _turn_times(agent_class: type[Agent]) -> tuple[list[float | None], list[float]]:
    world, outcome = run_scenario(_production_scenario(turns=2), agent_class)
    assert outcome.passed, outcome.reasons
    return outcome.reply_latencies_s, [at for at, role, _ in world.recorder.items if role == "user"]


def test_the_production_call_answers_every_turn_alike_on_both_agents() -> None:
    agent_latencies, agent_turns = _turn_times(Agent)
    resilient_latencies, resilient_turns = _turn_times(ResilientAgent)
    assert agent_latencies == resilient_latencies
    assert all(latency is not None for latency in agent_latencies)
    # each turn is committed after the detector's hold, well before the next sentence
    assert len(agent_turns) == len(resilient_turns) == 2
    assert all(a < PRODUCTION_TURN_SECONDS * (i + 1) for i, a in enumerate(agent_turns))


def test_the_production_call_replays_exactly() -> None:
    """Threads run the models, and the virtual clock waits for them: a rerun is the same call."""
    assert _turn_times(Agent) == _turn_times(Agent)


def test_the_null_comparison_runs_a_plain_agent_on_both_sides_of_each_pair() -> None:
    """``--production --null``: what the CPU ratio is when nothing differs but the run."""
    assert list(_NULL_CLASSES.values()) == [Agent, Agent]
    seconds, same = _alternate(lambda: _production_scenario(turns=2), "the call", 2, _NULL_CLASSES)
    assert list(seconds) == list(_NULL_CLASSES)
    assert all(len(runs) == 2 and all(s > 0 for s in runs) for runs in seconds.values())
    assert "identical for all 2 turns in all 4 runs: True" in same
    # the pair's second run over its first, as ResilientAgent's over Agent's
    pairs = zip(seconds["Agent"], seconds["Agent again"], strict=True)
    assert _ratios(seconds) == pytest.approx([again / first for first, again in pairs])
