"""The watchdog's evidence: playout reports and stalls are judged on signs of life."""

from __future__ import annotations

import asyncio

import pytest
from livekit.agents.voice.speech_handle import SpeechHandle
from resilient_agent.middleware.audio_level import AudioLevelMeter
from resilient_agent.middleware.playout_ledger import PlayoutLedger
from resilient_agent.middleware.stall_evidence import StallEvidence, StallThresholds

from resilient_agent import ConversationState, ToolCall
from resilient_agent.testing import PlayoutAudioOutput, run_virtual
from tests.test_audio import _capture, agent_frames

THRESHOLDS = StallThresholds(quiet_s=2.0, speech_wait_s=3.0, thinking_s=6.0, interrupted_done_s=1.0)


def test_the_ledger_reports_a_cleared_segment_the_sink_never_reported() -> None:
    async def main() -> tuple[int, bool, bool, int, bool]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time, reports_cleared_playout=False)
        ledger = PlayoutLedger(out, loop.time)
        await _capture(out, agent_frames(1, 2.0))
        out.flush()
        await asyncio.sleep(0.5)
        out.clear_buffer()
        unreported = ledger.unreported
        waiting = asyncio.ensure_future(out.wait_for_playout())
        await asyncio.sleep(1.0)
        stuck = not waiting.done()
        released = ledger.report_cleared_segment()
        ev = await asyncio.wait_for(waiting, 0.1)
        return unreported, stuck, released, ledger.unreported, ev.interrupted

    unreported, stuck, released, left, interrupted = run_virtual(main())
    assert (unreported, stuck, released, left, interrupted) == (1, True, True, 0, True)


def test_the_ledger_never_reports_twice_or_for_a_segment_played_before_it_attached() -> None:
    async def main() -> tuple[bool, int, bool]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time)
        await _capture(out, agent_frames(1, 1.0))
        out.flush()
        ledger = PlayoutLedger(out, loop.time)  # attached mid-segment
        await out.wait_for_playout()
        after_first = ledger.report_cleared_segment()
        await _capture(out, agent_frames(2, 1.0))
        out.flush()
        await out.wait_for_playout()
        return after_first, ledger.unreported, ledger.report_cleared_segment()

    assert run_virtual(main()) == (False, 0, False)


def _state(**changes: object) -> ConversationState:
    state = ConversationState()
    for key, value in changes.items():
        setattr(state, key, value)
    return state


@pytest.mark.asyncio  # speech handles need a running loop
async def test_thinking_counts_only_with_a_current_speech_no_tool_and_a_silent_caller() -> None:
    speech = SpeechHandle.create()
    evidence = StallEvidence(THRESHOLDS, None)
    evidence.agent_state_changed(10.0)
    thinking = _state(agent_state="thinking")
    assert evidence.find(15.9, thinking, speech, None) is None
    stall = evidence.find(16.0, thinking, speech, None)
    assert stall is not None and stall.kind == "thinking_without_speech" and stall.speech is speech
    # a long tool is progress, a speech waiting for its tools is not current
    busy = _state(agent_state="thinking", tools_in_flight={1: ToolCall("book_table")})
    assert evidence.find(30.0, busy, speech, None) is None
    assert evidence.find(30.0, thinking, None, None) is None


@pytest.mark.asyncio  # speech handles need a running loop
async def test_a_reply_asked_for_again_gets_the_whole_thinking_period() -> None:
    first, second = SpeechHandle.create(), SpeechHandle.create()
    evidence = StallEvidence(THRESHOLDS, None)
    evidence.agent_state_changed(0.0)
    thinking = _state(agent_state="thinking")
    assert evidence.find(6.0, thinking, first, None) is not None
    assert evidence.find(6.25, thinking, second, None) is None
    assert evidence.find(12.0, thinking, second, None) is None
    assert evidence.find(12.25, thinking, second, None) is not None


@pytest.mark.asyncio  # speech handles need a running loop
async def test_a_speech_waiting_for_a_caller_who_keeps_talking_is_not_a_stall() -> None:
    speech = SpeechHandle.create(allow_interruptions=True)
    loud_line = AudioLevelMeter(floor_rms=300.0)
    evidence = StallEvidence(THRESHOLDS, loud_line)
    evidence.user_state_changed(True, 0.0)
    speaking = _state(user_state="speaking", agent_state="thinking")
    assert evidence.find(1.0, speaking, speech, None) is None  # starts the wait
    for t in (2.0, 3.0, 4.0, 5.0):
        evidence.transcript(t)  # a caller who really talks keeps producing transcripts
        assert evidence.find(t + 0.5, speaking, speech, None) is None
    loud_line.last_loud_at = 8.0  # noise: loud, but no words
    stall = evidence.find(8.0, speaking, speech, None)
    assert stall is not None and stall.kind == "speech_waits_for_silence"
    assert stall.for_s == pytest.approx(3.0)
    # a protected speech does not wait for silence at all
    protected = SpeechHandle.create(allow_interruptions=False)
    loud_line.last_loud_at = 20.0
    assert evidence.find(20.0, speaking, protected, None) is None
