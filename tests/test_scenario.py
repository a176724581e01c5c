"""Scenario model validation: bad timelines fail at construction, with the field named."""

from __future__ import annotations

import pytest

from resilient_agent.testing import Scenario, Sweep, Utterance, VADFault


def _agent(base):  # type: ignore[no-untyped-def]
    return base(instructions="x")


def test_utterance_must_end_after_it_starts() -> None:
    with pytest.raises(ValueError, match=r"Utterance\.end \(1\.0\) must be after start"):
        Utterance(2.0, 1.0, "hello")


def test_utterance_needs_words() -> None:
    with pytest.raises(ValueError, match="at least one word"):
        Utterance(1.0, 2.0, "  ")


def test_overlapping_utterances_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"overlap at 1\.5s"):
        Scenario(
            name="x/y",
            family="x",
            description="",
            agent=_agent,
            utterances=(Utterance(1.0, 2.0, "a b"), Utterance(1.5, 3.0, "c d")),
        )


def test_utterance_past_the_end_of_the_call_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"duration=5"):
        Scenario(
            name="x/y",
            family="x",
            description="",
            agent=_agent,
            utterances=(Utterance(4.0, 6.0, "a b"),),
            duration=5.0,
        )


def test_faults_need_the_scripted_vad() -> None:
    with pytest.raises(ValueError, match="vad_fault needs vad='scripted'"):
        Scenario(
            name="x/y",
            family="x",
            description="",
            agent=_agent,
            utterances=(Utterance(1.0, 2.0, "a b"),),
            vad="silero",
            vad_fault=VADFault(mode="stuck"),
        )


def test_caller_frames_are_a_whole_number_of_lab_frames() -> None:
    with pytest.raises(ValueError, match=r"caller_frame_s: frame_s=0\.025"):
        Scenario(
            name="x/y",
            family="x",
            description="",
            agent=_agent,
            utterances=(Utterance(1.0, 2.0, "a b"),),
            caller_frame_s=0.025,
        )


def test_recorded_utterance_lasts_as_long_as_its_audio() -> None:
    utterance = Utterance.recorded(1.0, "thank_you")
    assert utterance.text == "great thank you very much"
    assert utterance.end == pytest.approx(1.0 + 2.02, abs=0.01)
    with pytest.raises(ValueError, match="unknown bundled speech"):
        Utterance.recorded(1.0, "nope")


def test_sweep_onsets_include_both_ends_and_shifting_keeps_duration() -> None:
    assert Sweep(utterance=0, start=1.0, stop=1.5, step=0.25).onsets() == [1.0, 1.25, 1.5]
    moved = Utterance(1.0, 2.5, "a b").shifted(3.0)
    assert (moved.start, moved.end) == (3.0, 4.5)
