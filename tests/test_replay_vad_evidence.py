"""A VAD that failed in the recorded call, read from the report and the recording, replayed so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from livekit.agents import Agent
from readme_call import README_CALL, livekit_report_of_the_readme_call

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay.plan import CallerTurn, load_plan
from resilient_agent.lab.replay.recording import read_recording
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.lab.replay.vad_evidence import vad_failure, with_vad_evidence
from resilient_agent.testing import run_scenario
from resilient_agent.testing.session_report import session_report


def _frames(*spans: tuple[float, float]) -> np.ndarray:
    """The starts of the 10 ms frames with speech over ``spans``."""
    return np.concatenate([np.arange(round(a * 100), round(b * 100)) / 100 for a, b in spans])


@pytest.mark.parametrize(
    "name",
    ["vad/stuck_plain_agent", "vad/dead_plain_agent", "vad/no_end_of_speech_plain_agent"],
)
def test_the_agent_recovers_from_the_recorded_vads_failure_when_it_did(
    name: str, tmp_path: Path
) -> None:
    """ResilientAgent recovered at a time the failure set; the replay's VAD fails the same way."""
    scenario = next(s for s in CATALOG if s.name == name)
    trip = round_trip(scenario, ResilientAgent, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_the_same_call_on_a_plain_agent_still_round_trips(tmp_path: Path) -> None:
    """Its turn never ended: the replay loses its end of speech, as before, and nothing more."""
    scenario = next(s for s in CATALOG if s.name == "vad/stuck_plain_agent")
    audio = tmp_path / "call.ogg"
    world, _ = run_scenario(scenario, Agent, record_audio=audio)
    report = session_report(world)
    plan = load_plan(report)
    assert with_vad_evidence(plan, read_recording(audio, report, plan)).vad_fault is None
    trip = round_trip(scenario, Agent, tmp_path)
    assert trip.faithful, trip.divergences


def test_how_the_vad_failed_is_read_from_livekits_last_speaking_anchor() -> None:
    turn = CallerTurn(1.0, 3.31, ("do", "you", "have", "parking"))
    voiced = _frames((1.0, 2.5))
    stuck = vad_failure([turn], [(1.0, 3.3)], voiced)
    dead = vad_failure([turn], [(1.0, 1.29)], voiced)
    lost = vad_failure([turn], [(1.0, 3.03)], voiced)
    merged = vad_failure([turn], [], voiced)  # a message an agent merged: no VAD metrics
    assert stuck is not None and stuck.mode == "stuck" and stuck.quiet_from == 2.5
    assert dead is not None and dead.mode == "dead" and dead.after == pytest.approx(0.3)
    assert lost is not None and lost.mode == "no_end_of_speech"
    assert merged is not None and merged.mode == "no_end_of_speech"
    assert "stopped_speaking_at" in stuck.assumption(turn.end)


def test_no_failure_is_read_where_the_vad_ended_the_turn_at_the_callers_last_sound() -> None:
    turns = [CallerTurn(1.0, 2.5, ("hello",)), CallerTurn(4.0, 5.2, ("table", "for", "two"))]
    # livekit dates a VAD's end back to the last sound; the caller spoke to each turn's end
    assert vad_failure(turns, [(1.0, 2.5), (4.0, 5.2)], _frames((1.0, 2.5), (4.0, 5.2))) is None
    # a turn ended late with the caller still sounding until its end is no VAD's failure
    assert vad_failure([CallerTurn(1.0, 3.31, ())], [], _frames((1.0, 3.31))) is None
    # a turn with no sound of the caller's on the recording says nothing of the VAD
    assert vad_failure([CallerTurn(1.0, 3.31, ())], [], _frames((5.0, 6.0))) is None


def test_livekits_own_report_of_an_unscripted_session_shows_no_vad_failure() -> None:
    """The README's agent's SessionReport, made by livekit: each turn ends at its last sound."""
    data, _ = livekit_report_of_the_readme_call()
    plan = load_plan(data)
    assert plan.vad_spans  # livekit measured the spoken turns
    said = _frames(*((u.start, u.end) for u in README_CALL.utterances))
    assert vad_failure(plan.turns, plan.vad_spans, said) is None
