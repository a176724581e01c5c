"""The watchdog's evidence: playout reports and stalls are judged on signs of life."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from livekit import rtc
from livekit.agents.voice.speech_handle import SpeechHandle
from resilient_agent.middleware.audio_level import AudioLevelMeter
from resilient_agent.middleware.playout_ledger import PlayoutLedger
from resilient_agent.middleware.stall_evidence import StallEvidence, StallThresholds

from resilient_agent import ConversationState, Middleware, MiddlewareContext, ToolCall
from resilient_agent.testing import PlayoutAudioOutput, run_virtual
from tests.test_audio import _capture, agent_frames


def _ledger(out: PlayoutAudioOutput, clock: object) -> PlayoutLedger:
    ctx = MiddlewareContext(
        session=None,  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=lambda _event: None,
    )
    return PlayoutLedger(ctx, Middleware(), out, clock)


THRESHOLDS = StallThresholds(quiet_s=2.0, speech_wait_s=3.0, thinking_s=6.0, interrupted_done_s=1.0)


def test_the_ledger_reports_a_cleared_segment_the_sink_never_reported() -> None:
    async def main() -> tuple[int, bool, bool, int, bool]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time, reports_cleared_playout=False)
        ledger = _ledger(out, loop.time)
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
        ledger = _ledger(out, loop.time)  # attached mid-segment
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
    stall = evidence.find(8.0, speaking, speech, None)
    assert stall is not None and stall.kind == "speech_waits_for_silence"
    assert stall.for_s == pytest.approx(3.0)
    # a protected speech does not wait for silence at all
    protected = SpeechHandle.create(allow_interruptions=False)
    assert evidence.find(20.0, speaking, protected, None) is None


def _frame(rms: float) -> rtc.AudioFrame:
    samples = np.full(160, rms, dtype=np.int16)
    return rtc.AudioFrame(samples.tobytes(), 16_000, 1, 160)


def _turn(voice_rms: float, *, voice_until: float) -> tuple[StallEvidence, AudioLevelMeter]:
    """A caller shown as speaking from 0 s, with a voice at ``voice_rms`` until ``voice_until``."""
    meter = AudioLevelMeter()
    evidence = StallEvidence(THRESHOLDS, meter)
    evidence.user_state_changed(True, 0.0)
    for step in range(0, 400):
        t = step * 0.01
        meter.on_frame(_frame(voice_rms if t < voice_until else 0.0), t)
    return evidence, meter


SPEAKING = _state(user_state="speaking")


@pytest.mark.parametrize("voice_rms", [2_000.0, 100.0])
def test_a_final_transcript_then_a_quiet_line_past_the_vad_window_is_a_stuck_turn(
    voice_rms: float,
) -> None:
    """At any line gain (100 RMS is a low-gain line, under any absolute 300 floor)."""
    evidence, meter = _turn(voice_rms, voice_until=1.5)
    quiet_since = meter.quiet_since
    # the meter looks every 50 ms
    assert meter.voice_heard and quiet_since is not None and 1.5 <= quiet_since <= 1.55
    evidence.transcript(1.7, final=True)
    # the VAD's window (0.55 s) and the margin (0.25 s) from the start of the quiet
    assert evidence.user_turn_stuck_due(SPEAKING) == (pytest.approx(quiet_since + 0.8), quiet_since)
    assert evidence.find(quiet_since + 0.79, SPEAKING, None, None) is None
    stall = evidence.find(quiet_since + 0.8, SPEAKING, None, None)
    assert stall is not None and stall.kind == "user_turn_stuck"
    assert evidence.final_transcript_in


def test_an_interim_after_the_final_means_words_are_still_coming() -> None:
    evidence, _ = _turn(2_000.0, voice_until=1.5)
    evidence.transcript(1.6, final=True)
    evidence.transcript(1.7, final=False)
    assert not evidence.final_transcript_in
    # no final for the last words: quiet_s (2 s here) of quiet, and nothing is committed
    assert evidence.find(3.49, SPEAKING, None, None) is None
    assert evidence.find(3.56, SPEAKING, None, None) is not None


def test_a_line_that_never_carried_a_voice_gives_no_evidence() -> None:
    """Frames of zeros (or an observer that never sees frames): the watchdog cannot tell."""
    evidence, meter = _turn(0.0, voice_until=0.0)
    evidence.transcript(1.0, final=True)
    assert not meter.voice_heard
    assert evidence.find(60.0, SPEAKING, None, None) is None
    assert StallEvidence(THRESHOLDS, None).find(60.0, SPEAKING, None, None) is None


def test_a_steady_hum_without_words_is_never_quiet() -> None:
    evidence, meter = _turn(150.0, voice_until=60.0)
    assert meter.voice_heard and meter.quiet_since is None
    assert evidence.find(3.9, SPEAKING, None, None) is None


def test_speech_without_a_transcript_is_left_to_livekit_when_the_app_asked() -> None:
    evidence, _ = _turn(2_000.0, voice_until=1.0)
    assert evidence.find(2.99, SPEAKING, None, None) is None
    assert evidence.find(3.06, SPEAKING, None, None) is not None  # quiet_s after the quiet
    assert evidence.find(30.0, SPEAKING, None, None, leave_untranscribed=True) is None


def test_readers_share_one_meter_that_measures_while_anyone_wants_it() -> None:
    meter = AudioLevelMeter()
    meter.track_floor(500.0)
    meter.want("a", True)
    meter.want("b", True)
    meter.want("a", False)
    meter.on_frame(_frame(400.0), 1.0)
    assert (meter.loud_at(300.0), meter.loud_at(500.0)) == (1.0, 0.0)
    meter.want("b", False)
    meter.on_frame(_frame(4_000.0), 2.0)
    assert meter.loud_at(300.0) == 1.0  # nobody wanted it: the frame was not even looked at


@pytest.mark.asyncio  # speech handles need a running loop
async def test_the_thinking_period_starts_when_a_long_tool_or_the_caller_stops() -> None:
    # fuzz/7-269: thinking since the hold message ended (10 s), a tool working until 17.9 s
    speech = SpeechHandle.create()
    evidence = StallEvidence(THRESHOLDS, None)
    evidence.agent_state_changed(10.0)
    busy = _state(agent_state="thinking", tools_in_flight={1: ToolCall("book_table")})
    thinking = _state(agent_state="thinking")
    for t in (12.0, 15.0, 17.75):
        assert evidence.find(t, busy, speech, None) is None
    assert evidence.find(18.0, thinking, speech, None) is None  # 8 s thinking, 0.25 s free
    assert evidence.find(23.7, thinking, speech, None) is None
    stall = evidence.find(23.75, thinking, speech, None)
    assert stall is not None and stall.for_s == pytest.approx(6.0)
    # a caller who spoke is progress too
    evidence = StallEvidence(THRESHOLDS, None)
    evidence.agent_state_changed(0.0)
    assert (
        evidence.find(5.0, _state(user_state="speaking", agent_state="thinking"), speech, None)
        is None
    )
    assert evidence.find(10.9, thinking, speech, None) is None
    assert evidence.find(11.0, thinking, speech, None) is not None


def test_audio_playing_out_while_the_agent_thinks_is_not_thinking_without_speech() -> None:
    # a reply became current while another speech's tool ran, and plays on while that speech
    # makes its tool reply: livekit says "thinking", the caller hears the reply (seeded fuzz call
    # answer_heard_twice: asking for it again cut it and played the tool reply twice)
    async def main() -> tuple[bool, bool, bool, bool]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time)
        ledger = _ledger(out, loop.time)
        speech = SpeechHandle.create()
        evidence = StallEvidence(THRESHOLDS, None)
        thinking = _state(agent_state="thinking")
        start = loop.time()
        evidence.agent_state_changed(start)
        await _capture(out, agent_frames(1, 8.0))
        out.flush()
        await asyncio.sleep(7.0 - (loop.time() - start))
        playing = ledger.playing
        playout = asyncio.ensure_future(out.wait_for_playout())
        while_playing = True
        while not playout.done():  # the watchdog's looks
            while_playing &= evidence.find(loop.time(), thinking, speech, ledger) is None
            await asyncio.sleep(0.25)
        ended = loop.time()
        before_period = evidence.find(ended + 5.5, thinking, speech, ledger) is None
        after_period = evidence.find(ended + 6.1, thinking, speech, ledger) is not None
        return playing, while_playing, before_period, after_period

    assert run_virtual(main()) == (True, True, True, True)
