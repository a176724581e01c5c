"""A line the recording's agent channel has no audio of, round-tripped (a TTS that sent silence).

The report records a TTS's errors, not a TTS that returned silence: livekit plays it and
records the line as said. livekit's recorder writes the agent's played audio on the
recording's second channel, where the silence shows.
"""

from __future__ import annotations

from pathlib import Path

from livekit.agents import Agent

from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay.plan import load_plan
from resilient_agent.lab.replay.recording import read_recording
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.testing import run_scenario
from resilient_agent.testing.session_report import session_report


def test_a_line_played_as_silence_is_a_tts_that_returned_silence(tmp_path: Path) -> None:
    # 'We make a lemon tart.' was synthesized as silence: the caller never heard the answer
    # (the call fails), and the replay's TTS returns silence for it too
    scenario = next(s for s in CATALOG if s.name == "provider/tts_returns_silence")
    world, _ = run_scenario(scenario, Agent, record_audio=tmp_path / "call.ogg")
    report = session_report(world)
    recording = read_recording(tmp_path / "call.ogg", report, load_plan(report))
    assert recording.silent is not None
    assert (recording.silent.text, recording.silent.sentence) == ("We make a lemon tart.", 1)
    assert any("the TTS returned silence for sentence 1" in a for a in recording.assumptions)
    trip = round_trip(scenario, Agent, tmp_path)
    assert trip.faithful, trip.divergences
    assert (trip.verdict, trip.replayed_verdict) == (False, False)


def test_a_line_with_audio_is_not_taken_for_silence(tmp_path: Path) -> None:
    scenario = next(s for s in CATALOG if s.name == "control/slow_tts_reply")
    world, _ = run_scenario(scenario, Agent, record_audio=tmp_path / "call.ogg")
    report = session_report(world)
    recording = read_recording(tmp_path / "call.ogg", report, load_plan(report))
    assert recording.silent is None
