"""Recovering words livekit never let the STT hear.

While an uninterruptible speech is current (with ``discard_audio_if_uninterruptible``, livekit's
default) and during AEC warm-up, livekit feeds the STT silence instead of the caller's audio, so
those words are never transcribed. :class:`WithheldAudioTap` sees every frame of the caller's
audio (through the chain's shared audio observer), keeps the last seconds of it, and notes which
frames livekit is withholding from the STT at the moment they pass. When a speech window of
the caller contained withheld audio, :func:`transcribe` runs the window through a fresh stream of
the session's own STT.

The tap keeps audio on evidence that a recovery may read it, not the whole ``keep_seconds``
always: the last 0.4 s (a speech window's onset, before the VAD reports it) is kept for
every frame; a caller speech window is kept from that onset while it is open, then until the STT
has caught up on it (a final transcript and no interim after it: what :func:`SttRecovery` would
re-transcribe if the stream died now), and for the full ``keep_seconds`` when livekit withheld
part of it from the STT (the keeper reads it when the window closes, or the next agent's keeper
after a handoff). On a call where nothing is withheld the tap holds about the caller's current
sentence.

Most frames pass while nothing a recheck reads can change: the last recheck found the tap steady
(a trim alone), the caller's state is the one it saw, and no speech that is live (created, not
done) is protected, so none withholds whichever is current. The tap knows the live speeches
and the caller's changes from the session's events (``speech_created``, ``user_state_changed``),
heard synchronously as livekit emits them, before any later frame passes; whether a live speech
is protected it asks at each frame (the app may protect one at any time). Until something
changes a frame is only appended (the *quick* path); what the rechecks among those frames
would have done (the last one's trim) is done in bulk at the next full look: at the next
change, after a few frames, or when the audio is read. The frames kept, and their withheld
flags, are those every recheck in full keeps.

While at most one speech is live, the quick path is run by the audio observation itself: the
tap's frame callback is its notes (:class:`~resilient_agent._engine.audio.FrameNotes`: until
when, and while which speech allows interruptions, a frame is only appended), so such a frame
calls nothing of the tap's; the rechecks' 50 ms schedule over those frames is caught up when the
notes close.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession, stt
from livekit.agents.voice.events import EventTypes, SpeechCreatedEvent
from livekit.agents.voice.speech_handle import SpeechHandle

from ..recognition import recognize_frames
from ..session_facts import stt_withheld_for

__all__ = ["TappedFrame", "WithheldAudioTap", "transcribe"]

# How often the tap asks whether livekit withholds the caller's audio from the STT, whether the
# caller is speaking, and drops the audio nobody can need any more.
_RECHECK_S = 0.05
# Audio kept before every frame: a speech window is read from 0.3 s before the VAD's start of
# speech (the keeper's onset pad), which the tap sees at its next recheck: up to ~0.1 s late
# when 50 ms frames arrive a little early and the recheck skips one. Every 0.1 s more costs
# ~6 KB per session with the lab's 10 ms frames (frame objects, not only samples).
PRE_ROLL_S = 0.4
# What the next recheck has to do when nothing changes (WithheldAudioTap._note_steady).
_NOT_STEADY, _QUIET, _IN_WINDOW = 0, 1, 2
# Frames appended on the quick path before the tap looks in full again (and trims): the
# memory held beyond the last trim, against one full look per this many frames.
_QUICK_FRAMES = 16
_NEVER = float("-inf")


@dataclass(frozen=True)
class TappedFrame:
    """One frame of caller audio as it reached livekit.

    Attributes:
        at: Loop time when it passed.
        frame: The audio.
        withheld: Whether livekit replaced it with silence for the STT.
    """

    at: float
    frame: rtc.AudioFrame
    withheld: bool


class _WarmupClock:
    """Approximates livekit's AEC warm-up: the first seconds of agent speech in a session."""

    def __init__(self, session: AgentSession[Any]) -> None:
        self._session = session
        self._spoken = 0.0
        self.over = False
        """Whether the warm-up is over (it stays over): then :meth:`active` need not be asked."""

    def active(self, elapsed: float) -> bool:
        # the cheap tests come first, and it stays off once the warm-up is over
        if self.over or self._session.agent_state != "speaking":
            return False
        warmup = self._session.options.aec_warmup_duration
        self._spoken += elapsed
        if not warmup or self._spoken > warmup:
            self.over = True
            return False
        return True


class WithheldAudioTap:
    """Keeps the caller's audio a recovery may still need, and what livekit withheld of it.

    Feed it with :meth:`on_frame` (``MiddlewareContext.observe_audio`` does) and tell it about
    the session's transcripts with :meth:`note_transcript` (the TurnKeeper does). Nothing older
    than ``keep_seconds`` is ever kept. It follows the session's events until :meth:`close`.

    Args:
        session: The session whose caller's audio it is fed.
        keep_seconds: The most audio it keeps.
        speeches: The speeches already live (created, not done) when it is made; it hears of
            later ones as they are created (the session's current speech it asks itself).
        listen: Adds its listeners to the session's events (``speech_created``,
            ``user_state_changed``), as ``MiddlewareContext.listen`` (the keeper's: inside the
            chain's fault boundary, owned by the tap, so that one raising is reported under
            :attr:`display_name` and costs the tap that event alone, and they outlive a handoff
            with the tap until :meth:`close`). By default they are added with the session's
            own ``on``.
        display_name: The name a failure of its listeners is reported under.
    """

    def __init__(
        self,
        session: AgentSession[Any],
        *,
        keep_seconds: float,
        speeches: Iterable[SpeechHandle] = (),
        listen: Callable[..., Callable[[], None]] | None = None,
        display_name: str = "WithheldAudioTap",
    ) -> None:
        self.display_name = display_name
        self._session = session
        self._keep_seconds = keep_seconds
        # whether keep_seconds never bounds the pre-roll: then, while no recovery may need more,
        # the last PRE_ROLL_S is all that is kept (see on_frame)
        self._pre_roll_only = keep_seconds - _RECHECK_S > PRE_ROLL_S + _RECHECK_S
        self._warmup = _WarmupClock(session)
        # plain tuples (at, frame, withheld): this runs for every 10-20 ms frame of the call
        # (in time order: old ones are dropped in bulk, see _drop_before)
        self._frames: list[tuple[float, rtc.AudioFrame, bool]] = []
        self._withheld = False
        self._withheld_at = float("-inf")
        # every withheld frame kept passed before this: a frame is withheld only at a recheck that
        # found it so, or within _RECHECK_S after it (two of them here: no float rounding matters)
        self._withheld_frames_before = float("-inf")
        self._checked_at = float("-inf")
        # the open caller speech window (from the first recheck that saw it) and whether
        # livekit withheld any of it from the STT
        self._speech_from: float | None = None
        self._speech_withheld = False
        # kept after the window closed: until the STT caught up / for keep_seconds
        self._unheard_from: float | None = None
        self._withheld_from: float | None = None
        self._final_at = float("-inf")
        self._interim_pending = False
        # whether the next recheck is a trim alone (see _note_steady), and from when in a window
        self._steady = _NOT_STEADY
        self._window_from = float("-inf")
        # the quick path (see on_frame): taken by frames before this time, and whether the
        # tap is on it (its rechecks' trim still to do)
        self._quick_until = _NEVER
        self._quick = False
        # what the observation is given: while at most one speech is live (the notes' guard),
        # the frames of the quick path are appended by the observation itself (no call), from
        # the index noted here (0: not noting)
        self.on_frame = _Notes(self._frames, self._on_frame)
        self._noted_from = 0
        # speeches created and not done: while one is, a recheck reads the session
        self._live: set[SpeechHandle] = set()
        current = session.current_speech
        for speech in (*speeches, current) if current is not None else speeches:
            self._arm(speech)
        add = listen if listen is not None else _listen_on
        self._stop_listening = (
            add(session, "user_state_changed", self._caller_changed, by=self),
            add(session, "speech_created", self._speech_created, by=self),
        )

    def _on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Keep one frame, noting whether livekit withholds it from the STT right now.

        Called as ``on_frame`` (the tap's :class:`_Notes`) for the frames it does not only note.
        """
        if self._noted_from:
            self._catch_up()
        # the quick path (see the module's doc): no speech live can withhold, nothing to look at
        if now < self._quick_until:
            for speech in self._live:
                if not speech.allow_interruptions:
                    break  # a protected speech is live: it may be current
            else:
                if now - self._checked_at >= _RECHECK_S:
                    self._checked_at = now  # a steady recheck: its trim is done in bulk
                self._frames.append((now, frame, False))
                return
        if self._quick:
            self._settle()
            self._quick = False
        if self._take(frame, now) and self._steady:
            # steady: until the caller's state changes, or a speech live may withhold, the
            # rechecks would only trim
            self._quick = True
            self._quick_until = until = now + _QUICK_FRAMES * frame.duration
            live = self._live
            if len(live) < 2:
                # at most one speech live: the observation notes the frames while it allows
                # interruptions (asked at each frame: the app may protect it in place)
                notes = self.on_frame
                notes.until = until
                notes.guard = next(iter(live)) if live else None
                self._noted_from = len(self._frames)
        else:
            self._quick_until = _NEVER

    def _catch_up(self) -> None:
        """The rechecks' 50 ms schedule over the frames the observation noted; ends the noting.

        A noted frame ``_RECHECK_S`` or more after the one before it rechecked, whatever came
        earlier: the schedule is walked from the last such frame only (at 50 ms frames, about
        the last frame), as on_frame's quick path would have walked it frame by frame.
        """
        frames, first = self._frames, self._noted_from
        self.on_frame.until = _NEVER
        self._noted_from = 0
        last = max(len(frames) - 1, first)
        while last > first and frames[last][0] - frames[last - 1][0] < _RECHECK_S:
            last -= 1
        checked = self._checked_at
        for at, _, _ in frames[last:]:
            if at - checked >= _RECHECK_S:
                checked = at
        self._checked_at = checked

    def _take(self, frame: rtc.AudioFrame, now: float) -> bool:
        """Keep one frame, rechecking when it is time to; whether it rechecked."""
        frames = self._frames
        if now - self._checked_at < _RECHECK_S:
            frames.append((now, frame, self._withheld))
            return False
        # whole speech windows are re-transcribed, so 50 ms resolution is plenty; at RoomIO's
        # 50 ms frames every frame rechecks
        self._checked_at = now
        session = self._session
        speech = session.current_speech
        # most rechecks of a call are steady (see _note_steady): no speech withholds (one the
        # caller may interrupt never does), the caller's state is the last recheck's, so the
        # recheck below would only trim
        steady = self._steady
        if steady and (speech is None or speech.allow_interruptions):
            if session.user_state == "speaking":
                if steady == _IN_WINDOW:
                    horizon = now - self._keep_seconds + _RECHECK_S
                    window_from = self._window_from
                    if window_from > horizon:
                        horizon = window_from
                    frames.append((now, frame, False))
                    _drop_before(frames, horizon)
                    return True
            elif steady == _QUIET:
                horizon = now - PRE_ROLL_S
                frames.append((now, frame, False))
                _drop_before(frames, horizon)
                return True
        self._recheck(session, speech, now)
        frames.append((now, frame, self._withheld))
        return True

    def _settle(self) -> None:
        """The trim the rechecks on the quick path left to do: the last one's.

        Each was a steady one (see on_frame), whose trim drops all the earlier ones' would.
        """
        if self._noted_from:
            self._catch_up()
        if not self._quick:
            return
        checked = self._checked_at
        if self._steady == _QUIET:
            horizon = checked - PRE_ROLL_S
        else:
            horizon = checked - self._keep_seconds + _RECHECK_S
            if self._window_from > horizon:
                horizon = self._window_from
        _drop_before(self._frames, horizon)

    def _caller_changed(self, _: object) -> None:
        # the next frame rechecks in full (reading the caller's state as it is then)
        self._quick_until = _NEVER
        self.on_frame.until = _NEVER

    def _speech_created(self, event: SpeechCreatedEvent) -> None:
        self._arm(event.speech_handle)

    def _arm(self, speech: SpeechHandle) -> None:
        """Watch ``speech`` until it is done: once current, it withholds if protected."""
        live = self._live
        if speech not in live and not speech.done():
            live.add(speech)
            speech.add_done_callback(live.discard)
            # a live speech may be protected at any frame: on_frame asks (the noting ends)
            self.on_frame.until = _NEVER

    def close(self) -> None:
        """Stop following the session's events (the tap is no longer fed)."""
        for stop in self._stop_listening:
            stop()

    def _recheck(self, session: AgentSession[Any], speech: SpeechHandle | None, now: float) -> None:
        """Whether livekit withholds the caller's audio now, the caller's window, the trim.

        ``speech`` is ``session.current_speech``, read in the same step.
        """
        # a speech that allows interruptions never withholds (stt_withheld_for's cheapest test)
        withheld = (
            speech is not None
            and not speech.allow_interruptions
            and stt_withheld_for(session, speech)
        )
        if not withheld and not self._warmup.over:
            withheld = self._warmup.active(_RECHECK_S)
        self._withheld = withheld
        if withheld:
            self._withheld_at = now
            self._withheld_frames_before = now + 2 * _RECHECK_S
        speech_from = self._speech_from
        if session.user_state == "speaking":
            if speech_from is None:
                speech_from = self._speech_from = now - PRE_ROLL_S
                self._speech_withheld = False
            # withheld audio in the window's onset counts too: the keeper reads it with it
            if self._withheld_at >= speech_from:
                self._speech_withheld = True
        elif speech_from is not None:
            self._close_window(speech_from, now)
            speech_from = self._speech_from = None
        unheard_from = self._unheard_from
        if unheard_from is not None and self._stt_caught_up(unheard_from):
            self._unheard_from = None
        self._trim(now)
        self._note_steady()

    def _note_steady(self) -> None:
        """Whether the next recheck can be a trim alone, and of what (see on_frame).

        Steady: the warm-up over (it need not be asked), ``keep_seconds`` never bounding the
        pre-roll, nothing withheld at this recheck (a steady one leaves ``_withheld`` as it is),
        nothing kept for after a window (no STT to catch up, nothing withheld), and
        either no window open (``_QUIET``: the last ``PRE_ROLL_S`` is kept) or the caller's
        window open since an earlier recheck (``_IN_WINDOW``: kept from its onset, at most
        ``keep_seconds``).
        """
        steady = _NOT_STEADY
        if (
            not self._withheld
            and self._unheard_from is None
            and self._withheld_from is None
            and self._pre_roll_only
            and self._warmup.over
        ):
            window_from = self._speech_from
            if window_from is None:
                steady = _QUIET
            elif window_from < self._checked_at - PRE_ROLL_S:
                # opened at an earlier recheck: its onset is below the pre-roll from now on
                steady = _IN_WINDOW
                self._window_from = window_from
        self._steady = steady

    def note_transcript(self, *, final: bool, now: float) -> None:
        """The STT reported a transcript: after a final one, what it heard is no longer needed."""
        if final:
            self._final_at = now
            self._interim_pending = False
        else:
            self._interim_pending = True

    def _close_window(self, started: float, now: float) -> None:
        withheld = self._speech_withheld or self._withheld_at >= started
        if withheld:
            self._withheld_from = _earliest(self._withheld_from, started)
        if not self._stt_caught_up(started):
            self._unheard_from = _earliest(self._unheard_from, started)

    def _stt_caught_up(self, since: float) -> bool:
        return self._final_at > since and not self._interim_pending

    def _trim(self, now: float) -> None:
        horizon = now - PRE_ROLL_S
        # trimmed once per recheck: the next one comes before anything is past keep_seconds
        oldest_kept = now - self._keep_seconds + _RECHECK_S
        withheld_from = self._withheld_from
        if withheld_from is not None and withheld_from < oldest_kept:
            withheld_from = self._withheld_from = None
        # the earliest time a recovery may still read from, written out (no tuple, no max()):
        # this runs at every recheck of a caller's sentence
        speech_from, unheard_from = self._speech_from, self._unheard_from
        if speech_from is not None and speech_from < horizon:
            horizon = speech_from
        if unheard_from is not None and unheard_from < horizon:
            horizon = unheard_from
        if withheld_from is not None and withheld_from < horizon:
            horizon = withheld_from
        if oldest_kept > horizon:
            horizon = oldest_kept
        _drop_before(self._frames, horizon)

    def take_over(self, previous: WithheldAudioTap) -> None:
        """Put the audio ``previous`` kept (a handed-off agent's tap) in front of this one's."""
        self._settle()
        previous._settle()
        # the next frame looks in full
        self._quick_until, self._quick = _NEVER, False
        self.on_frame.until = _NEVER
        first = self._frames[0][0] if self._frames else float("inf")
        earlier = [f for f in previous._frames if f[0] < first]
        self._frames[:0] = earlier
        self._withheld_frames_before = max(
            self._withheld_frames_before, previous._withheld_frames_before
        )
        # what the previous tap still had to keep, this one keeps
        self._unheard_from = _earliest(self._unheard_from, previous._unheard_from)
        self._withheld_from = _earliest(self._withheld_from, previous._withheld_from)
        if previous._speech_from is not None:
            self._withheld_from = _earliest(self._withheld_from, previous._speech_from)
        self._note_steady()

    def window(self, start: float, end: float) -> list[TappedFrame]:
        """The frames that passed between ``start`` and ``end`` (loop time)."""
        self._settle()
        found: list[TappedFrame] = []
        for at, frame, withheld in reversed(self._frames):
            if at < start:
                break
            if at <= end:
                found.append(TappedFrame(at, frame, withheld))
        found.reverse()
        return found

    def withheld_within(self, start: float, end: float) -> bool:
        """Whether livekit withheld any frame that passed between ``start`` and ``end``.

        As ``any(f.withheld for f in self.window(start, end))``, without building the frames,
        and without reading them when nothing was withheld since ``start`` (most windows).
        """
        if start >= self._withheld_frames_before:
            return False
        self._settle()
        for at, _, withheld in reversed(self._frames):
            if at < start:
                return False
            if withheld and at <= end:
                return True
        return False

    @property
    def buffered_seconds(self) -> float:
        """Seconds of audio held right now (bounded by ``keep_seconds``)."""
        self._settle()
        return sum(f[1].duration for f in self._frames)


_AT = itemgetter(0)


class _Notes:
    """The tap's frame callback (:class:`~resilient_agent._engine.audio.FrameNotes`).

    A frame before :attr:`until`, while :attr:`guard` (the one live speech, if any) allows
    interruptions, is only appended, as the quick path of :meth:`WithheldAudioTap._on_frame`
    would (the observation does it without the call).
    """

    __slots__ = ("frames", "guard", "on_frame", "until")

    def __init__(
        self,
        frames: list[tuple[float, rtc.AudioFrame, bool]],
        on_frame: Callable[[rtc.AudioFrame, float], None],
    ) -> None:
        self.until = _NEVER
        self.guard: SpeechHandle | None = None
        self.frames = frames
        self.on_frame = on_frame

    def __call__(self, frame: rtc.AudioFrame, now: float) -> None:
        guard = self.guard
        if now < self.until and (guard is None or guard.allow_interruptions):
            self.frames.append((now, frame, False))
        else:
            self.on_frame(frame, now)


def _listen_on(
    emitter: AgentSession[Any], event: EventTypes, handler: Callable[[Any], None], *, by: object
) -> Callable[[], None]:
    """The emitter's own ``on``, outside any fault boundary; returns what removes it."""
    emitter.on(event, handler)
    return lambda: emitter.off(event, handler)


def _drop_before(frames: list[tuple[float, rtc.AudioFrame, bool]], horizon: float) -> None:
    """Drop the frames that passed before ``horizon``, all at once (``frames`` is in time order)."""
    count = bisect_left(frames, horizon, key=_AT)
    if count:
        del frames[:count]


def _earliest(current: float | None, candidate: float | None) -> float | None:
    if current is None:
        return candidate
    return current if candidate is None else min(current, candidate)


async def transcribe(recognizer: stt.STT[Any], frames: list[rtc.AudioFrame]) -> str:
    """The final transcript of ``frames`` from a fresh stream of ``recognizer``.

    A non-streaming STT recognizes them in one request instead (:mod:`.recognition`).
    """
    whole = await recognize_frames(recognizer, frames)
    if whole is not None:
        return whole
    stream = recognizer.stream()
    texts: list[str] = []
    try:
        for frame in frames:
            stream.push_frame(frame)
        stream.end_input()
        async for event in stream:
            if event.type == stt.SpeechEventType.FINAL_TRANSCRIPT and event.alternatives:
                text = event.alternatives[0].text.strip()
                if text:
                    texts.append(text)
    finally:
        await stream.aclose()
    return " ".join(texts)
