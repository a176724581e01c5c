"""What the caller-audio tap keeps: audio a recovery may still read, nothing more."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
from livekit import rtc
from resilient_agent.middleware.session_facts import stt_is_withheld
from resilient_agent.middleware.turn_keeper.withheld_audio import (
    _RECHECK_S,
    PRE_ROLL_S,
    WithheldAudioTap,
)

_NOISE = (np.random.default_rng(7).normal(0, 300, 160)).astype(np.int16).tobytes()


class _Speech:
    allow_interruptions = False
    interrupted = False

    def done(self) -> bool:
        return False

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        pass  # never done


class _Options:
    aec_warmup_duration = None
    interruption: ClassVar[dict[str, bool]] = {"discard_audio_if_uninterruptible": True}


class _Session:
    """The session's state as the tap reads it, and its events as livekit emits them.

    As in livekit, a speech is created (``speech_created``) before it is current, and a change
    of the caller's state is emitted right after it is made (``user_state_changed``).
    """

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[[Any], None]]] = {}
        self._current_speech: Any = None
        self._user_state = "listening"
        self.agent_state = "listening"
        self.options = _Options()

    def on(self, event: str, listener: Callable[[Any], None]) -> None:
        self._listeners.setdefault(event, []).append(listener)

    def off(self, event: str, listener: Callable[[Any], None]) -> None:
        self._listeners[event].remove(listener)

    def _emit(self, event: str, **fields: Any) -> None:
        for listener in list(self._listeners.get(event, ())):
            listener(SimpleNamespace(**fields))

    @property
    def current_speech(self) -> Any:
        return self._current_speech

    @current_speech.setter
    def current_speech(self, speech: Any) -> None:
        if speech is not None and speech is not self._current_speech:
            self._emit("speech_created", speech_handle=speech)
        self._current_speech = speech

    @property
    def user_state(self) -> str:
        return self._user_state

    @user_state.setter
    def user_state(self, state: str) -> None:
        if state != self._user_state:
            old, self._user_state = self._user_state, state
            self._emit("user_state_changed", old_state=old, new_state=state)


def _feed(tap: WithheldAudioTap, start: float, end: float) -> float:
    """Frames of line noise (a real line is never digitally silent) from start to end."""
    at = start
    while at < end - 1e-9:
        tap.on_frame(rtc.AudioFrame(_NOISE, 16000, 1, 160), at)
        at = round(at + 0.01, 6)
    return at


def test_a_quiet_line_keeps_only_the_onset_pre_roll() -> None:
    tap = WithheldAudioTap(_Session(), keep_seconds=20.0)  # type: ignore[arg-type]
    _feed(tap, 0.0, 30.0)
    assert tap.buffered_seconds == pytest.approx(PRE_ROLL_S, abs=0.06)


def test_a_window_is_kept_until_the_stt_caught_up_on_it() -> None:
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    _feed(tap, 0.0, 5.0)
    session.user_state = "speaking"
    _feed(tap, 5.0, 7.0)
    tap.note_transcript(final=False, now=6.0)
    session.user_state = "listening"
    _feed(tap, 7.0, 9.0)
    # no final transcript yet: a stream that died now would need all of it
    window = tap.window(5.0 - 0.3, 7.0)
    assert window[0].at == pytest.approx(4.7) and window[-1].at == pytest.approx(7.0)
    tap.note_transcript(final=True, now=9.0)
    _feed(tap, 9.0, 10.0)
    assert tap.buffered_seconds == pytest.approx(PRE_ROLL_S, abs=0.06)


def test_a_final_transcript_with_words_still_coming_keeps_the_window() -> None:
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    _feed(tap, 0.0, 5.0)
    session.user_state = "speaking"
    _feed(tap, 5.0, 6.0)
    tap.note_transcript(final=True, now=6.0)
    _feed(tap, 6.0, 7.0)
    tap.note_transcript(final=False, now=7.0)  # the caller went on
    session.user_state = "listening"
    _feed(tap, 7.0, 9.0)
    assert tap.window(6.0, 7.0)


def test_a_window_with_withheld_audio_is_kept_for_keep_seconds() -> None:
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=10.0)  # type: ignore[arg-type]
    _feed(tap, 0.0, 2.0)
    session.current_speech = _Speech()  # protected speech: livekit feeds the STT silence
    _feed(tap, 2.0, 3.0)
    session.user_state = "speaking"
    _feed(tap, 3.0, 5.0)
    session.user_state = "listening"
    tap.note_transcript(final=True, now=5.2)  # the STT's final of what it heard (nothing)
    _feed(tap, 5.0, 9.0)
    window = tap.window(3.0 - 0.3, 5.0)
    assert window[0].at == pytest.approx(2.7) and any(f.withheld for f in window)
    session.current_speech = None
    _feed(tap, 9.0, 14.0)
    # older than keep_seconds: gone
    assert not tap.window(0.0, 3.5)
    assert tap.buffered_seconds == pytest.approx(PRE_ROLL_S, abs=0.06)


def test_kept_frames_come_back_as_they_passed() -> None:
    session = _Session()
    session.user_state = "speaking"  # a window the STT never caught up on: all of it is kept
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    fed = []
    for index in range(40):
        # the line changes format, and changes back
        rate = 48000 if 17 <= index < 23 else 16000
        samples = np.full(rate // 100, index, dtype=np.int16)
        frame = rtc.AudioFrame(samples.tobytes(), rate, 1, rate // 100)
        fed.append(frame)
        tap.on_frame(frame, index * 0.01)
    window = tap.window(0.0, 1.0)
    assert [f.at for f in window] == pytest.approx([i * 0.01 for i in range(40)])
    for kept, original in zip(window, fed, strict=True):
        assert kept.frame.sample_rate == original.sample_rate
        assert kept.frame.samples_per_channel == original.samples_per_channel
        assert bytes(kept.frame.data) == bytes(original.data)
    assert tap.buffered_seconds == pytest.approx(0.4)


def test_withheld_within_agrees_with_the_window() -> None:
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    _feed(tap, 0.0, 2.0)
    session.user_state = "speaking"
    _feed(tap, 2.0, 3.0)
    session.current_speech = _Speech()
    _feed(tap, 3.0, 3.5)
    session.current_speech = None
    _feed(tap, 3.5, 4.03)  # the last frames are not packed yet
    for start, end in [(2.5, 2.9), (2.5, 3.1), (3.2, 3.3), (3.6, 4.1), (3.45, 3.6), (0, 9)]:
        expected = any(f.withheld for f in tap.window(start, end))
        assert tap.withheld_within(start, end) == expected, (start, end)
    assert tap.withheld_within(3.2, 3.3) and not tap.withheld_within(3.6, 4.1)
    session.current_speech = _Speech()
    _feed(tap, 4.03, 4.12)  # withheld frames still waiting to be packed
    assert tap.withheld_within(4.1, 4.2) == any(f.withheld for f in tap.window(4.1, 4.2))
    assert tap.withheld_within(4.1, 4.2)


def test_withheld_within_sees_the_withheld_frames_a_handed_off_tap_kept() -> None:
    # the answer without reading the frames (nothing withheld since the window's start) must
    # count the frames the previous agent's tap handed over too
    before = _Session()
    previous = WithheldAudioTap(before, keep_seconds=20.0)  # type: ignore[arg-type]
    before.user_state = "speaking"
    _feed(previous, 0.0, 1.0)
    before.current_speech = _Speech()
    _feed(previous, 1.0, 1.5)
    after = _Session()
    after.user_state = "speaking"
    tap = WithheldAudioTap(after, keep_seconds=20.0)  # type: ignore[arg-type]
    _feed(tap, 1.5, 2.0)
    assert not tap.withheld_within(1.0, 1.4)  # none of its own frames is there
    tap.take_over(previous)
    for start, end in [(1.0, 1.4), (1.2, 2.0), (0.5, 0.9), (1.6, 2.0)]:
        expected = any(f.withheld for f in tap.window(start, end))
        assert tap.withheld_within(start, end) == expected, (start, end)
    assert tap.withheld_within(1.0, 1.4) and not tap.withheld_within(1.6, 2.0)


def test_the_pre_roll_covers_the_keepers_onset_pad_when_the_tap_sees_speech_late() -> None:
    # RoomIO sends 50 ms frames; with a little jitter the tap rechecks only every other frame,
    # so it sees the start of speech up to ~0.1 s after the keeper does
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    step, at, started, fed = 0.0499, 0.0, None, []
    frame = rtc.AudioFrame(_NOISE * 5, 16000, 1, 800)
    for index in range(80):
        at = round(index * step, 6)
        tap.on_frame(frame, at)
        fed.append(at)
        if index == 40:  # a recheck ran at this frame: the keeper hears the VAD just after
            started = at + 0.001
            session.user_state = "speaking"
    assert started is not None
    onset = started - 0.3  # the keeper's onset pad
    window = tap.window(onset, at)
    # every frame that passed since the onset is there (the window's first words are not cut)
    assert [f.at for f in window] == [t for t in fed if t >= onset]


class _ReferenceTap(WithheldAudioTap):
    """The tap's recheck as it was written before its steady path: every recheck in full."""

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        if now - self._checked_at >= _RECHECK_S:
            self._checked_at = now
            session = self._session
            withheld = stt_is_withheld(session)
            if not withheld and not self._warmup.over:
                withheld = self._warmup.active(_RECHECK_S)
            self._withheld = withheld
            if withheld:
                self._withheld_at = now
            speech_from = self._speech_from
            if session.user_state == "speaking":
                if speech_from is None:
                    speech_from = self._speech_from = now - PRE_ROLL_S
                    self._speech_withheld = False
                if self._withheld_at >= speech_from:
                    self._speech_withheld = True
            elif speech_from is not None:
                self._close_window(speech_from, now)
                speech_from = self._speech_from = None
            unheard_from = self._unheard_from
            if unheard_from is not None and self._stt_caught_up(unheard_from):
                unheard_from = self._unheard_from = None
            if (
                speech_from is None
                and unheard_from is None
                and self._withheld_from is None
                and self._pre_roll_only
            ):
                horizon = now - PRE_ROLL_S
                frames = self._frames
                while frames and frames[0][0] < horizon:
                    del frames[0]
            else:
                self._trim(now)
        self._frames.append((now, frame, self._withheld))


class _Handle:
    """A speech as the tap sees it: created live, protected or not, done at some point."""

    def __init__(self, allow_interruptions: bool, interrupted: bool, done: bool) -> None:
        self.allow_interruptions = allow_interruptions
        self.interrupted = interrupted
        self._done = done
        self._callbacks: list[Callable[[Any], None]] = []

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    def finish(self) -> list[Callable[[Any], None]]:
        """Done now; the callbacks to call (livekit calls them a step later)."""
        self._done = True
        return self._callbacks


class _WarmingOptions(_Options):
    aec_warmup_duration = 1.0  # type: ignore[assignment]


def _kept(tap: WithheldAudioTap) -> list[tuple[float, bool]]:
    return [(f.at, f.withheld) for f in tap.window(float("-inf"), float("inf"))]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("keep_seconds", [2.0, 0.3])
@pytest.mark.parametrize("frame_s", [0.05, 0.01])
def test_the_quick_and_steady_paths_keep_what_the_full_recheck_keeps(
    seed: int, keep_seconds: float, frame_s: float
) -> None:
    # the quick path (frames only appended between the session's events) and the steady recheck
    # (a trim alone) against every recheck in full, reading the session at every one: the same
    # frames kept, with the same withheld flags, whatever the session does and whenever the
    # tap is read
    rng = random.Random(seed)
    sessions, taps = [], []
    for cls in (WithheldAudioTap, _ReferenceTap):
        session = _Session()
        if seed == 1:
            session.options = _WarmingOptions()
        sessions.append(session)
        taps.append(cls(session, keep_seconds=keep_seconds))  # type: ignore[arg-type]
    at = 0.0
    frame = rtc.AudioFrame(_NOISE, 16000, 1, 160)
    live: list[list[_Handle]] = []  # each speech as the two sessions have it
    later: list[tuple[Callable[[Any], None], _Handle]] = []
    compared = quick = 0
    for _ in range(3000):
        roll = rng.random()
        change: dict[str, Any] = {}
        if roll < 0.006:
            protected, interrupted = rng.random() < 0.3, rng.random() < 0.2
            pair = [_Handle(not protected, interrupted, False) for _ in sessions]
            live.append(pair)
            change["current_speech"] = pair
        elif roll < 0.02 and live:
            # a live speech is done: livekit leaves it current, or lets it go
            pair = live.pop(rng.randrange(len(live)))
            for handle, session in zip(pair, sessions, strict=True):
                later.extend((callback, handle) for callback in handle.finish())
                if session.current_speech is handle and rng.random() < 0.7:
                    session.current_speech = None
        elif roll < 0.025 and live:
            # the app protects a live speech, or lets the caller interrupt it, in place
            pair = rng.choice(live)
            value = rng.random() < 0.5
            for handle in pair:
                handle.allow_interruptions = value or handle.interrupted
        elif roll < 0.035:
            change["user_state"] = rng.choice(["speaking", "listening"])
        elif roll < 0.045:
            change["agent_state"] = rng.choice(["speaking", "listening", "thinking"])
        elif roll < 0.06:
            final = rng.random() < 0.8
            for tap in taps:
                tap.note_transcript(final=final, now=at)
        for index, session in enumerate(sessions):
            for name, value in change.items():
                setattr(session, name, value[index] if name == "current_speech" else value)
        # RoomIO's frames at a fixed step (whose sums round), or with jitter
        step = frame_s if seed < 2 else frame_s * rng.choice([1.0, 1.0, 0.9, 1.1])
        at = round(at + step, 6) if seed % 2 else at + step
        quick += at < taps[0]._quick_until
        for tap in taps:
            tap.on_frame(frame, at)
        done, later = later, []
        for callback, handle in done:
            callback(handle)
        if rng.random() < 0.05:
            compared += 1
            assert _kept(taps[0]) == _kept(taps[1]), f"at {at}"
            start = at - rng.random() * 2
            expected = any(f.withheld for f in taps[1].window(start, at))
            assert taps[0].withheld_within(start, at) == expected
    assert _kept(taps[0]) == _kept(taps[1])
    assert compared > 100
    # the quick path ran (keep_seconds that bound the pre-roll keep every recheck in full)
    assert quick > 200 if keep_seconds > 1 else not quick


def test_the_quick_path_is_taken_and_left_at_the_next_event() -> None:
    # a quiet line with no speech live (the warm-up over): frames are only appended until the
    # caller speaks, and the window then opens where a recheck in full opens it
    sessions = [_Session(), _Session()]
    tap = WithheldAudioTap(sessions[0], keep_seconds=20.0)  # type: ignore[arg-type]
    reference = _ReferenceTap(sessions[1], keep_seconds=20.0)  # type: ignore[arg-type]
    frame = rtc.AudioFrame(_NOISE * 5, 16000, 1, 800)
    quick = 0
    for index in range(100):
        at = index * 0.05
        for session in sessions:
            session.agent_state = "speaking" if index < 2 else "listening"
            if index == 60:
                session.user_state = "speaking"
        quick += at < tap._quick_until  # appended without a look at the session
        tap.on_frame(frame, at)
        reference.on_frame(frame, at)
        if index == 60:
            assert at >= tap._quick_until  # the caller's state changed: looked at in full
    assert quick > 70
    assert _kept(tap) == _kept(reference)
    assert tap.window(3.0 - 0.4, 5.0)[0].at == pytest.approx(3.0 - 0.4)


def test_a_protected_speech_holds_the_quick_path_only_until_it_is_done() -> None:
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    frame = rtc.AudioFrame(_NOISE * 5, 16000, 1, 800)
    session.agent_state = "speaking"  # the warm-up is over at the first recheck
    tap.on_frame(frame, 0.0)
    session.agent_state = "listening"
    speech = _Handle(True, False, False)
    session.current_speech = speech  # a speech the caller may interrupt withholds nothing
    quick = []
    for index in range(1, 60):
        if index == 20:
            speech.allow_interruptions = False  # protected in place, as the app may do
        if index == 40:
            for callback in speech.finish():
                callback(speech)
        at = index * 0.05
        quick.append(at < tap._quick_until)
        tap.on_frame(frame, at)
    assert sum(quick[2:19]) > 12  # quick while the live speech may be interrupted
    assert not any(quick[20:39])  # looked at in full while it is protected
    assert sum(quick[41:]) > 12  # and quick again once it is done


def test_a_speech_current_before_the_tap_was_made_still_holds_the_quick_path() -> None:
    frame = rtc.AudioFrame(_NOISE * 5, 16000, 1, 800)
    taps = []
    for cls in (WithheldAudioTap, _ReferenceTap):
        session = _Session()
        session.agent_state = "speaking"  # the warm-up is over at the first recheck
        speech = _Handle(True, False, False)
        session.current_speech = speech  # created before the tap listens
        tap = cls(session, keep_seconds=20.0)  # type: ignore[arg-type]
        tap.on_frame(frame, 0.0)
        session.agent_state = "listening"
        taps.append((tap, speech))
    for index in range(1, 40):
        if index == 20:
            for _, speech in taps:
                speech.allow_interruptions = False  # protected in place: livekit withholds
        for tap, _ in taps:
            tap.on_frame(frame, index * 0.05)
        assert _kept(taps[0][0]) == _kept(taps[1][0]), index
    assert _kept(taps[0][0])[-1][1]  # withheld


def test_a_closed_tap_no_longer_follows_the_session() -> None:
    session = _Session()
    tap = WithheldAudioTap(session, keep_seconds=20.0)  # type: ignore[arg-type]
    assert session._listeners["user_state_changed"]
    tap.close()
    assert not any(session._listeners.values())


@pytest.mark.parametrize("user_state", ["listening", "speaking"])
def test_the_warm_up_is_asked_at_every_recheck_until_it_is_over(user_state: str) -> None:
    # the agent speaks from the start: livekit withholds the caller's audio for the warm-up's
    # first second, whatever the tap's recheck would otherwise skip
    frame = rtc.AudioFrame(_NOISE, 16000, 1, 160)
    taps = []
    for cls in (WithheldAudioTap, _ReferenceTap):
        session = _Session()
        session.options = _WarmingOptions()
        session.agent_state = "speaking"
        session.user_state = user_state
        taps.append(cls(session, keep_seconds=20.0))  # type: ignore[arg-type]
    flags = []
    for n in range(1, 40):
        for tap in taps:
            tap.on_frame(frame, n * 0.05)
        assert _kept(taps[0]) == _kept(taps[1])
        flags.append(taps[0].window(float("-inf"), float("inf"))[-1].withheld)
    # withheld for the warm-up's second of agent speech, then heard
    assert flags[:20] == [True] * 20 and flags[-10:] == [False] * 10
