"""The caller's audio, shown to the middleware while ``session.input.audio`` stays the app's own.

Middleware that watch the caller's audio (the turn keeper's buffer, the watchdog's level meter)
register a synchronous callback through ``MiddlewareContext.observe_audio``; one
:class:`SessionAudio` per session shows them every frame livekit reads from the session's audio
input, with the loop time it passed at. With no callback registered nothing is changed and no
frame is touched.

How: livekit reads the input with ``async for``, and ``AudioInput.__aiter__`` returns the input
itself, so each frame is one call of ``type(input).__anext__``. While observed, the input's class
is a subclass of its own class (made for that input, same name, same ``__qualname__``, no slots
or instance attributes of its own) whose ``__anext__`` calls the class's own and then the
callbacks (a first callback that is
:class:`~resilient_agent._engine.audio.FrameNotes`, the turn keeper's tap, has the frames it
only notes appended in that ``__anext__`` itself, with no call), and whose ``on_detached`` tells
the session's :class:`SessionAudio` that livekit let
the input go, so that a replacement input is observed the same way. The object is the app's:
identity, ``isinstance``, attributes, ``repr`` are unchanged; only ``type(input) is
TheAppsClass`` tells. The class is put back when the last callback leaves, the input is
replaced, or the session ends.

The swap is the interception ``AudioInput.__class__``
(:data:`~resilient_agent._livekit.interception.INTERCEPTIONS`), restored as every interception is.
Nothing is kept outside the sessions: each :class:`SessionAudio` holds what it observes, and an
input observed by two sessions leads to their shared tap through its own (observed) class.

livekit's public observation points cannot replace it: ``Agent.stt_node`` receives silence in
place of the caller's audio while a protected speech plays (which is when the middleware must
hear the caller), and the VAD is the app's object.

An input whose class cannot be swapped (``__class__`` assignment refused, a class that refuses
subclasses, an ``__aiter__`` that returns another iterator) is observed the old way: an
:class:`~resilient_agent._session.audio_observer.AudioObserver` chained in front of it, which is
said in an ``audio_observed_by_wrapper`` log record with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice.io import AudioInput

from .._engine.audio import FrameNotes, notes_of
from .._engine.log import get_logger
from .._livekit.interception import ClassNotSwapped, Interceptor
from .audio_observer import AudioObserver, FrameCallback, _loop_clock

__all__ = ["SessionAudio", "shown_callbacks"]

logger = get_logger("session_audio")


# The attribute of an observed class that holds its tap: the class is made for one input, so the
# input's class leads to the tap, with no registry of observed inputs anywhere.
_TAP = "_resilient_agent_tap"
_SWAP = "AudioInput.__class__"


class _Tap:
    """One observed input: its class swap and the callbacks of every session observing it.

    An input two sessions observe (one reusing it after the other, or a handoff's two agents)
    has one tap, found through the input's class; each session's callbacks are kept apart, and
    shown each frame together. The class swap is an interception (``AudioInput.__class__``),
    undone when the last session lets the input go.
    """

    __slots__ = (
        "audio",
        "base",
        "callbacks",
        "clock",
        "notes",
        "observed",
        "owners",
        "show",
        "swap",
        "wake",
    )

    def __init__(self, audio: AudioInput, base: type[AudioInput]) -> None:
        self.audio = audio
        self.base = base
        self.owners: dict[SessionAudio, tuple[FrameCallback, ...]] = {}
        # read for every frame: every owner's callbacks in one tuple, replaced (never changed)
        # so that a callback leaving while the frame is shown leaves the frame's loop as it was
        self.callbacks: tuple[FrameCallback, ...] = ()
        # the first callback when it is notes (the turn keeper's tap, all call long): a frame
        # it only notes is appended in __anext__ itself, with no call (see FrameNotes)
        self.notes: FrameNotes | _NoNotes = _NO_NOTES
        # what each frame is shown to after the notes (None: nothing), and what each frame
        # the notes do not take is shown to: one callable, no loop or test in __anext__
        self.show: FrameCallback | None = None
        self.wake: FrameCallback = _nobody
        # the loop's clock, found at the first frame (no None test on every frame after it)
        self.clock: Callable[[], float] = self._first_clock
        self.swap = Interceptor()
        self.observed: type[Any] = _observed_class(base, self)

    def set(self, owner: SessionAudio, callbacks: tuple[FrameCallback, ...]) -> None:
        if callbacks:
            self.owners[owner] = callbacks
        else:
            self.owners.pop(owner, None)
        self.callbacks = callbacks = tuple(c for held in self.owners.values() for c in held)
        notes = notes_of(callbacks[0]) if callbacks else None
        if notes is not None:
            self.notes, self.show = notes, _shown_to(callbacks[1:])
            # a frame the notes do not take is the notes' owner's to look at in full
            callbacks = (notes.on_frame, *callbacks[1:])
        else:
            self.notes, self.show = _NO_NOTES, None
        self.wake = _shown_to(callbacks) or _nobody

    def _first_clock(self) -> float:
        self.clock = clock = _loop_clock(asyncio.get_running_loop())
        return clock()

    def detached(self) -> None:
        for owner in list(self.owners):
            owner._detached()


class _NoNotes:
    """The notes of a tap whose first callback has none: no frame is only noted."""

    __slots__ = ()
    until = float("-inf")
    guard = None
    frames: list[tuple[float, rtc.AudioFrame, bool]]  # never read: no frame is before until


_NO_NOTES = _NoNotes()


def _nobody(frame: rtc.AudioFrame, now: float) -> None:
    """Shows a frame to nobody (a tap between its last callback leaving and its restore)."""


def _shown_to(callbacks: tuple[FrameCallback, ...]) -> FrameCallback | None:
    """One callback showing a frame to each of ``callbacks`` in order (None: to nobody)."""
    if len(callbacks) < 2:
        return callbacks[0] if callbacks else None
    if len(callbacks) == 2:
        first, second = callbacks

        def show_both(frame: rtc.AudioFrame, now: float) -> None:
            first(frame, now)
            second(frame, now)

        return show_both

    def show_all(frame: rtc.AudioFrame, now: float) -> None:
        for callback in callbacks:
            callback(frame, now)

    return show_all


def _tap_of(audio: AudioInput) -> _Tap | None:
    """The tap observing ``audio``, found through its class (None: nobody observes it)."""
    tap: _Tap | None = type(audio).__dict__.get(_TAP)
    return tap if tap is not None and tap.audio is audio else None


def _observed_class(base: type[AudioInput], tap: _Tap) -> type[Any]:
    """The subclass of ``base`` that ``tap``'s input has while observed.

    Raises:
        Exception: Whatever the class (or its metaclass, or ``__init_subclass__``) raises when
            subclassed.
    """
    next_frame = base.__anext__
    on_detached = base.on_detached
    audio = tap.audio

    async def __anext__(self: AudioInput) -> rtc.AudioFrame:
        frame = await next_frame(self)
        # a copy of the observed input has its class too, and is not observed
        if self is audio:
            # each callable read into a local, then called: CPython 3.11 specializes a call of
            # a method, not of a callable held in a slot (tap.clock() is looked up generically)
            clock = tap.clock
            now = clock()
            notes = tap.notes
            # most frames of a call: noted, with no call (see FrameNotes)
            if now < notes.until and ((guard := notes.guard) is None or guard.allow_interruptions):
                notes.frames.append((now, frame, False))
                show = tap.show
                if show is not None:
                    show(frame, now)
            else:
                wake = tap.wake
                wake(frame, now)
        return frame

    def detached(self: AudioInput) -> None:
        try:
            on_detached(self)
        finally:
            if self is audio:
                tap.detached()

    __anext__.__qualname__ = f"{base.__qualname__}.__anext__"
    detached.__name__ = "on_detached"
    detached.__qualname__ = f"{base.__qualname__}.on_detached"
    namespace: dict[str, Any] = {
        "__slots__": (),
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        "__anext__": __anext__,
        "on_detached": detached,
        _TAP: tap,
    }
    metaclass: Any = type(base)
    observed = metaclass(base.__name__, (base,), namespace)
    if not isinstance(observed, type):
        raise TypeError(f"the metaclass of {base.__qualname__} made {observed!r}, not a class")
    return observed


def _take(audio: AudioInput, owner: SessionAudio, callbacks: tuple[FrameCallback, ...]) -> str:
    """Observe ``audio`` for ``owner`` (swapping its class if nobody did); why not, or ``""``."""
    tap = _tap_of(audio)
    if tap is not None:
        tap.set(owner, callbacks)
        return ""
    current = type(audio)
    copied: _Tap | None = current.__dict__.get(_TAP)
    # a copy of an observed input has the observed class: its own class is the one below it
    base = copied.base if copied is not None else current
    if base.__aiter__ is not AudioInput.__aiter__ and base.__aiter__(audio) is not audio:
        return "its __aiter__ returns another iterator than the input itself"
    try:
        tap = _Tap(audio, base)
    except Exception as exc:
        return f"its class cannot be subclassed: {type(exc).__name__}: {exc}"
    if current is not base:
        audio.__class__ = base  # the copy's class was the other input's observed one
    try:
        tap.swap.swap_class(_SWAP, audio, tap.observed)
    except ClassNotSwapped as exc:
        return str(exc)
    except (TypeError, AttributeError) as exc:
        return f"its class cannot be swapped: {type(exc).__name__}: {exc}"
    tap.set(owner, callbacks)
    return ""


def _let_go(tap: _Tap, owner: SessionAudio) -> None:
    """``owner`` no longer observes ``tap``'s input; its class is put back when nobody does."""
    tap.set(owner, ())
    if not tap.owners:
        tap.swap.restore_all()


def shown_callbacks(audio: AudioInput | None) -> tuple[FrameCallback, ...]:
    """The callbacks each frame read from ``audio`` is shown to (none when nobody observes it)."""
    if isinstance(audio, AudioObserver):
        return tuple(audio.callbacks)
    tap = _tap_of(audio) if audio is not None else None
    return tap.callbacks if tap is not None else ()


class SessionAudio:
    """Shows every frame of one session's audio input to callbacks, the input left the app's own.

    Owned by the session core, one per session: :meth:`observe` and :meth:`stop_observing` are
    ``MiddlewareContext.observe_audio`` and ``stop_observing_audio``, and :meth:`close` puts
    everything back when the session (or the agent) is over.

    Args:
        session: The livekit session whose ``input.audio`` is observed.
    """

    def __init__(self, session: AgentSession[Any]) -> None:
        self._session = session
        self._callbacks: tuple[FrameCallback, ...] = ()
        self._observed: AudioInput | None = None  # the input whose class is swapped for us
        self._tap: _Tap | None = None  # and what observes it (shared with other sessions)
        self._wrapper: AudioObserver | None = None  # or the observer chained in front of it
        self._closed = False

    @property
    def callbacks(self) -> tuple[FrameCallback, ...]:
        """The callbacks registered, in order."""
        return self._callbacks

    @property
    def observed(self) -> AudioInput | None:
        """The input whose frames the callbacks are shown (the observer, when one wraps it)."""
        return self._wrapper or self._observed

    def observe(self, callback: FrameCallback) -> bool:
        """Show ``callback`` every frame of the caller's audio, with the loop time it passed at.

        Args:
            callback: Called synchronously on the audio path for each frame: keep it cheap.

        Returns:
            False when the session has no audio input (or this one is closed).
        """
        if self._closed:
            return False
        callbacks = (*self._callbacks, callback)
        if self.observed is None:
            if self._session.input.audio is None:
                return False
            self._callbacks = callbacks
            self._attach()
        else:
            self._callbacks = callbacks
            self._publish()
        return True

    def stop_observing(self, callback: FrameCallback) -> None:
        """No frame reaches ``callback`` until it is observed again; nothing if it is not."""
        if callback not in self._callbacks:
            return
        self._callbacks = tuple(c for c in self._callbacks if c != callback)
        self._publish()

    def close(self) -> None:
        """Put everything back: the input's own class, or the input the observer stood in for."""
        self._closed = True
        self._callbacks = ()
        self._release()

    def _attach(self) -> None:
        audio = self._session.input.audio
        if audio is None:
            return
        why = _take(audio, self, self._callbacks)
        if not why:
            self._observed = audio
            self._tap = _tap_of(audio)
            return
        logger.info("audio_observed_by_wrapper", why=why, audio_input=type(audio).__qualname__)
        wrapper = AudioObserver(audio, on_swapped=self._follow)
        wrapper.callbacks = list(self._callbacks)
        self._wrapper = wrapper
        self._session.input.audio = wrapper

    def _publish(self) -> None:
        if self._wrapper is not None:
            # a new list: the observer may be going through the old one right now
            self._wrapper.callbacks = list(self._callbacks)
        elif self._tap is not None:
            if self._callbacks:
                self._tap.set(self, self._callbacks)
            else:
                # nobody listens: the input gets its own class back, and no frame is touched
                _let_go(self._tap, self)
                self._observed = self._tap = None

    def _release(self) -> None:
        tap, self._tap, self._observed = self._tap, None, None
        if tap is not None:
            _let_go(tap, self)
        wrapper, self._wrapper = self._wrapper, None
        if wrapper is not None:
            wrapper.callbacks = []
            if self._session.input.audio is wrapper and wrapper.source is not None:
                self._session.input.audio = wrapper.source

    def _detached(self) -> None:
        # livekit detaches the old input before it stores the new one: look once it did
        with contextlib.suppress(RuntimeError):  # no loop: nothing is running to follow
            asyncio.get_running_loop().call_soon(self._follow)

    def _follow(self) -> None:
        """The session let our input go (replaced, or audio disabled): observe what it reads now."""
        reading = self.observed
        current = self._session.input.audio
        if self._closed or reading is None or current is reading:
            return
        if current is not None and _chain_holds(current, reading):
            return  # the new input reads through ours: every frame still passes it
        self._release()
        if current is not None and self._callbacks:
            self._attach()


def _chain_holds(audio: AudioInput, wanted: AudioInput) -> bool:
    """Whether ``wanted`` is ``audio`` or one of its ``source`` s."""
    seen: AudioInput | None = audio
    while seen is not None:
        if seen is wanted:
            return True
        seen = seen.source
    return False
