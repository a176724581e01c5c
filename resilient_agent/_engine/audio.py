"""What the chain is given of the caller's audio: frames as they pass, and a realtime model's input.

The session (:mod:`resilient_agent._session`) implements both; the engine names them here so
that the context (:mod:`.state`) types its fields without importing the session's modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from livekit import rtc

__all__ = ["FrameCallback", "FrameNotes", "Interruptible", "ModelInputHold", "notes_of"]

FrameCallback = Callable[[rtc.AudioFrame, float], None]
"""Called with each frame of caller audio and the loop time it passed at."""


class Interruptible(Protocol):
    """What a frame's noting asks of a speech (livekit's ``SpeechHandle`` is one)."""

    @property
    def allow_interruptions(self) -> bool:
        """Whether the caller may interrupt it (it can change at any time, with no event)."""
        ...


class FrameNotes(Protocol):
    """A frame callback with a quick path the audio observation runs itself, without calling it.

    A frame passing before :attr:`until`, while :attr:`guard` (if any) allows interruptions, is
    appended to :attr:`frames` as ``(time, frame, False)``; any other is shown to
    :attr:`on_frame`. Calling the notes does the same (where the observation calls its callbacks
    in a loop). The owner moves :attr:`until` and :attr:`guard` (read for every frame) and reads
    what was noted; what it would have done for each noted frame it does in bulk, later. So one
    caller frame runs one Python frame of the library's while nothing is due: the observed
    input's own ``__anext__``. The observation tells notes from other callbacks by
    their attributes (see :func:`notes_of`).
    """

    until: float
    guard: Interruptible | None
    frames: list[tuple[float, rtc.AudioFrame, bool]]
    on_frame: FrameCallback

    def __call__(self, frame: rtc.AudioFrame, now: float) -> None:
        """Note ``frame`` while the notes hold, else show it to :attr:`on_frame`."""
        ...


def notes_of(callback: FrameCallback) -> FrameNotes | None:
    """``callback`` as :class:`FrameNotes` if it is notes (their four attributes), else None."""
    if (
        isinstance(getattr(callback, "frames", None), list)
        and hasattr(callback, "until")
        and hasattr(callback, "guard")
        and callable(getattr(callback, "on_frame", None))
    ):
        return callback  # type: ignore[return-value]
    return None


class ModelInputHold(Protocol):
    """One session's realtime model input, held and kept on request, sent on release.

    :class:`resilient_agent._session.model_input.ModelInput` is the session's implementation.
    """

    @property
    def available(self) -> bool:
        """Whether the active agent runs on a realtime model (there is an input to hold)."""
        ...

    @property
    def server_detects_turns(self) -> bool:
        """Whether the model's server detects the caller's turns (its events set ``user_state``)."""
        ...

    @property
    def session(self) -> object | None:
        """The active agent's realtime model session, or None (livekit may hand it on)."""
        ...

    @property
    def held(self) -> bool:
        """Whether the input is held now."""
        ...

    def hold(self) -> bool:
        """Stop what livekit pushes from reaching the model; False if there is no model."""
        ...

    def keep(self, frame: rtc.AudioFrame) -> None:
        """Queue ``frame`` for the model, sent at the release."""
        ...

    def kept(self) -> list[rtc.AudioFrame]:
        """The frames kept so far in this hold, in order (a copy)."""
        ...

    def release(self, *, send: bool = True) -> int:
        """End the hold: the kept frames go to the model, in order; returns how many."""
        ...
