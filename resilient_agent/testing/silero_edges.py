"""A replay's Silero following the recorded call's turn ends where Opus blurred one window.

livekit's Silero decides on 32 ms windows and ends a turn once ``min_silence_duration`` of them
heard silence, dated back by that silence (``END_OF_SPEECH`` at ``time.time() -
silence_duration``). A replay hears the call's Opus-coded recording, not the call's audio: a
window the call's Silero heard just under its threshold can be heard just over it (the lab's
``thank_you``: 0.349 in the call, 0.577 on the recording), so the replay's turn ends a window
later, and the agent's reply with it. The report has the call's end of each turn.

:class:`EdgeFollower` moves the replay's Silero ``END_OF_SPEECH`` to the recorded end of the
turn where the two are at most :data:`EDGE_TOLERANCE_S` (two windows) apart, and only there:

- **late** (the replay's Silero still hears speech a window or two past the recorded end, then
  silence): at the window its silence since the recorded end reaches the silence Silero waits
  on, it ends the turn, dated at the recorded end, and drops Silero's own end that follows; if
  Silero then hears the caller again before its own end, it starts a turn there (the replay
  does what it hears);
- **early** (the replay's Silero ended the turn up to two windows before the recorded end): it
  holds the end until the recorded end plus the same silence, unless Silero hears speech first.

Silero still hears every frame; a larger disagreement is left alone, a real difference.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from livekit.agents import vad

__all__ = [
    "ACTIVATION_THRESHOLD",
    "DEACTIVATION_THRESHOLD",
    "EDGE_TOLERANCE_S",
    "SILERO_WINDOW_S",
    "EdgeFollower",
    "FollowedEdge",
]

SILERO_WINDOW_S = 0.032
"""livekit's Silero decides on 512-sample windows at 16 kHz."""

EDGE_TOLERANCE_S = 2 * SILERO_WINDOW_S
"""How far the replay's turn end may be from the recorded one to be moved: two windows."""

ACTIVATION_THRESHOLD = 0.5
"""livekit's Silero hears speech from this probability (its default)."""

DEACTIVATION_THRESHOLD = ACTIVATION_THRESHOLD - 0.15
"""...and, once speaking, goes on hearing it above this one (its default)."""

# the call's and the replay's frames reach Silero 10 ms at a time: a window's edge is stamped
# at the frame that completed it
_FRAME_S = 0.01


@dataclasses.dataclass(frozen=True)
class FollowedEdge:
    """A turn end the replay took from the report.

    Attributes:
        replayed: Call seconds of the end the replay's Silero made (or would have made).
        recorded: Call seconds of the report's end, which the replay followed.
    """

    replayed: float
    recorded: float


class EdgeFollower:
    """Moves Silero's turn ends to the recorded ones within :data:`EDGE_TOLERANCE_S`.

    Feed it every event of Silero's stream with the call second it came at; send what it
    returns, in order. A held end is released by :meth:`due` once its time came.

    Args:
        recorded_ends: The recorded call's turn ends, call seconds.
        min_silence_duration: The silence Silero waits on before it ends a turn.
    """

    def __init__(self, recorded_ends: Sequence[float], min_silence_duration: float) -> None:
        self._ends = tuple(sorted(recorded_ends))
        # Silero counts silence in whole windows
        windows = math.ceil(min_silence_duration / SILERO_WINDOW_S - 1e-9)
        self._wait = windows * SILERO_WINDOW_S
        self._last_voiced: float | None = None
        self._dropping = False  # ended at the recorded end: Silero's own end is dropped
        self._held: tuple[vad.VADEvent, float, float] | None = None  # event, release at, its end
        self._dropped_end: float | None = None  # the recorded end the turn was ended at
        self._held_since = 0.0
        self.followed: list[FollowedEdge] = []

    def on_event(self, event: vad.VADEvent, now: float) -> list[vad.VADEvent]:
        """The events to send for Silero's ``event`` at call second ``now``."""
        if event.type == vad.VADEventType.INFERENCE_DONE:
            return self._on_inference(event, now)
        if event.type == vad.VADEventType.START_OF_SPEECH:
            released = self._release(now)
            return [*released, event]
        if self._dropping:
            self._dropping = False
            return []
        ended = now - event.silence_duration
        recorded = self._recorded_near(ended, early=True)
        if recorded is None:
            return [event]
        # the recorded end came later: hold Silero's end until that end's silence is over
        self._held = (event, recorded + event.silence_duration, ended)
        self._held_since = now
        self.followed.append(FollowedEdge(round(ended, 3), recorded))
        return []

    def due(self) -> float | None:
        """Call second at which a held end is to be sent, None when none is held."""
        return self._held[1] if self._held is not None else None

    def release_due(self, now: float) -> list[vad.VADEvent]:
        """The held end, if its time came by ``now``."""
        if self._held is None or now < self._held[1] - 1e-9:
            return []
        event, _, _ = self._held
        self._held = None
        return [event]

    def _release(self, now: float) -> list[vad.VADEvent]:
        """A held end sent now, at Silero's own time: the caller spoke again before the report's."""
        if self._held is None:
            return []
        event, _, ended = self._held
        self._held = None
        self.followed.pop()
        return [dataclasses.replace(event, silence_duration=now - ended)]

    def _on_inference(self, event: vad.VADEvent, now: float) -> list[vad.VADEvent]:
        voiced = event.probability >= ACTIVATION_THRESHOLD or (
            event.speaking and event.probability > DEACTIVATION_THRESHOLD
        )
        if voiced:
            self._last_voiced = now
            if self._dropping:
                # heard again before Silero's own end: the turn goes on in the replay
                self._dropping = False
                return [event, _start(event)]
            return [self._as_told(event, now)]
        if self._dropping or self._held is not None:
            return [self._as_told(event, now)]
        if not event.speaking or self._last_voiced is None:
            return [event]
        recorded = self._recorded_near(self._last_voiced, early=False)
        if recorded is None or now - recorded < self._wait - SILERO_WINDOW_S / 2:
            return [event]
        self._dropping = True
        self._dropped_end = recorded
        self.followed.append(FollowedEdge(round(self._last_voiced, 3), recorded))
        return [event, _end(event, silence=now - recorded)]

    def _as_told(self, event: vad.VADEvent, now: float) -> vad.VADEvent:
        """Silero's window as livekit is told it: past a moved end, as Silero tells it after one.

        livekit reads a window's ``speaking`` and ``speech_duration`` (an agent's line is
        interrupted on speech): after an end taken early the caller is silent, while an end is
        held they are still speaking, as Silero says around its own end.
        """
        if self._dropping and self._dropped_end is not None:
            return dataclasses.replace(
                event, speaking=False, speech_duration=0.0, silence_duration=now - self._dropped_end
            )
        if self._held is not None:
            held, _, _ = self._held
            speech = held.speech_duration + held.silence_duration + now - self._held_since
            return dataclasses.replace(
                event, speaking=True, speech_duration=speech, silence_duration=0.0
            )
        return event

    def _recorded_near(self, replayed: float, *, early: bool) -> float | None:
        """The recorded end a window or two after (``early``) or before ``replayed``."""
        for recorded in self._ends:
            apart = recorded - replayed if early else replayed - recorded
            if SILERO_WINDOW_S / 2 < apart <= EDGE_TOLERANCE_S + _FRAME_S:
                return recorded
        return None


def _end(inference: vad.VADEvent, *, silence: float) -> vad.VADEvent:
    """Silero's end of speech at ``inference``'s window, ``silence`` after the turn's end."""
    return vad.VADEvent(
        type=vad.VADEventType.END_OF_SPEECH,
        samples_index=inference.samples_index,
        timestamp=inference.timestamp,
        speech_duration=max(0.0, inference.speech_duration - silence),
        silence_duration=silence,
        speaking=False,
    )


def _start(inference: vad.VADEvent) -> vad.VADEvent:
    """Silero's start of speech at ``inference``'s window: the window it heard."""
    return vad.VADEvent(
        type=vad.VADEventType.START_OF_SPEECH,
        samples_index=inference.samples_index,
        timestamp=inference.timestamp,
        speech_duration=SILERO_WINDOW_S,
        silence_duration=0.0,
        speaking=True,
    )
