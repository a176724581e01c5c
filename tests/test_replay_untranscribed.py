"""The caller's untranscribed words placed from what the report evidences, round-tripped.

Each call once diverged in ``resilient-agent replay --round-trip``: its placeholder words were
put where the recorded STT heard nothing, or heard fewer words.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from livekit.agents import Agent

from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay.plan import ReplayPlan, load_plan
from resilient_agent.lab.replay.round_trip import RoundTrip, round_trip
from resilient_agent.lab.run import RESILIENT_PATH, load_agent_class
from resilient_agent.testing import run_scenario
from resilient_agent.testing.session_report import session_report


def _trip(name: str, agent_class: type[Agent], folder: Path) -> tuple[ReplayPlan, RoundTrip]:
    scenario = next(s for s in CATALOG if s.name == name)
    world, _ = run_scenario(scenario, agent_class)
    return load_plan(session_report(world)), round_trip(scenario, agent_class, folder)


def test_words_over_a_protected_line_are_placed_from_when_livekit_withheld_them(
    tmp_path: Path,
) -> None:
    # the caller began at 3.70 s; the tool's protected hold message was created at 3.85 s and
    # no transcript came of the 0.15 s before it: the ten untranscribed words were said from
    # then, and the replay's STT (fed silence from then) hears none of them
    plan, trip = _trip("talk_over/caller_keeps_talking_over_hold_message", Agent, tmp_path)
    turn = plan.turns[1]
    assert (turn.unheard, turn.said) == (10, (3.85, 9.2))
    assert trip.faithful, trip.divergences


def test_the_words_an_stt_flushed_after_it_died_are_the_turn_it_died_in(tmp_path: Path) -> None:
    # the STT died at 8.0 s in the caller's 7.0-9.4 s sentence; its words until then came as a
    # final at the close, after a later turn: they are the sentence's, the rest of it unheard
    plan, trip = _trip("provider/stt_dies_mid_call", Agent, tmp_path)
    assert [t.heard for t in plan.turns[1:]] == [("I", "would", "like", "a"), ()]
    assert plan.turns[1].unheard_after == 6
    assert plan.faults.faults.stt_silent_at is None  # the dead STT says why nothing came
    assert trip.faithful, trip.divergences


@pytest.mark.parametrize(
    ("agent", "words"),
    [("Agent", ()), ("ResilientAgent", ("many", "questions", "are", "there"))],
)
def test_a_final_after_a_split_is_the_words_of_the_turn_before(
    tmp_path: Path, agent: str, words: tuple[str, ...]
) -> None:
    # the task's handoff split the caller's question after 'how', whose interim came before
    # the split and its final after: 'how' is the first part's; the rest, withheld under the
    # task's protected question (and recovered by ResilientAgent), the second part's
    agent_class = Agent if agent == "Agent" else load_agent_class(RESILIENT_PATH)
    plan, trip = _trip("workflows/task_prompt_over_speaking_caller", agent_class, tmp_path)
    assert [t.heard for t in plan.turns[1:3]] == [("how",), words]
    assert trip.faithful, trip.divergences


def test_one_untranscribed_sound_split_by_a_commit_is_noise(tmp_path: Path) -> None:
    # a TV from 4.5 s to 14 s, split when ResilientAgent's reply began: both parts are the
    # same sound with no transcript, the agent silent over the first; no words in either, so
    # the replayed STT recovery has nothing to hear
    resilient = load_agent_class(RESILIENT_PATH)
    plan, trip = _trip("stall/reply_waits_for_noise", resilient, tmp_path)
    assert [t.noise for t in plan.turns] == [False, True, True]
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_split_replayed_from_the_transcripts_is_read_as_a_split_again() -> None:
    # without the recording the replay starts the second part a frame after the first ends:
    # the replayed report's split is read as the recorded one was
    scenario = next(s for s in CATALOG if s.name == "workflows/task_prompt_over_speaking_caller")
    trip = round_trip(scenario, load_agent_class(RESILIENT_PATH))
    assert trip.faithful, trip.divergences
