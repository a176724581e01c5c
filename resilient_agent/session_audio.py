"""The caller's audio, shown to the middleware while ``session.input.audio`` stays the app's own.

Middleware that watch the caller's audio (the turn keeper's buffer, the watchdog's level meter)
register a synchronous callback through ``MiddlewareContext.observe_audio``; one
:class:`SessionAudio` per session shows them every frame livekit reads from the session's audio
input, with the loop time it passed at. With no callback registered nothing is changed and no
frame is touched.

How: livekit reads the input with ``async for``, and ``AudioInput.__aiter__`` returns the input
itself, so each frame is one call of ``type(input).__anext__``. While observed, the input's class
is a subclass of its own class (made once per class, same name, same ``__qualname__``, no slots
or attributes of its own) whose ``__anext__`` calls the class's own and then the callbacks, and
whose ``on_detached`` tells the session's :class:`SessionAudio` that livekit let the input go,
so that a replacement input is observed the same way. The object is the app's: identity,
``isinstance``, attributes, ``repr`` are unchanged; only ``type(input) is TheAppsClass`` tells.
The class is put back when the last callback leaves, the input is replaced, or the session ends.

livekit's public observation points cannot replace it: ``Agent.stt_node`` receives silence in
place of the caller's audio while a protected speech plays (which is when the middleware must
hear the caller), and the VAD is the app's object.

An input whose class cannot be swapped (``__class__`` assignment refused, a class that refuses
subclasses, an ``__aiter__`` that returns another iterator) is observed the old way: an
:class:`~resilient_agent.audio_observer.AudioObserver` chained in front of it, which is said in
an ``audio_observed_by_wrapper`` log record with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice.io import AudioInput

from .audio_observer import AudioObserver, FrameCallback, _loop_clock
from .log import get_logger

__all__ = ["SessionAudio", "shown_callbacks"]

logger = get_logger("session_audio")


class _Tap:
    """One observed input: the class to put back and the callbacks of every session observing it.

    An input two sessions observe (one reusing it after the other, or a handoff's two agents)
    has one tap; each session's callbacks are kept apart, and shown each frame together.
    """

    __slots__ = ("audio", "base", "callbacks", "clock", "observed", "owners")

    def __init__(self, audio: AudioInput, base: type[AudioInput], observed: type[Any]) -> None:
        self.audio = audio
        self.base = base
        self.observed = observed
        self.owners: dict[SessionAudio, tuple[FrameCallback, ...]] = {}
        # read for every frame: every owner's callbacks in one tuple, replaced (never changed)
        # so that a callback leaving while the frame is shown leaves the frame's loop as it was
        self.callbacks: tuple[FrameCallback, ...] = ()
        self.clock: Callable[[], float] | None = None

    def set(self, owner: SessionAudio, callbacks: tuple[FrameCallback, ...]) -> None:
        if callbacks:
            self.owners[owner] = callbacks
        else:
            self.owners.pop(owner, None)
        self.callbacks = tuple(c for held in self.owners.values() for c in held)

    def detached(self) -> None:
        for owner in list(self.owners):
            owner._detached()


# Observed inputs by themselves (their class hashes and compares by identity: a dict lookup
# without a call into the app's code), else by id().
_TAPS: dict[AudioInput, _Tap] = {}
_TAPS_BY_ID: dict[int, _Tap] = {}
# The observed subclass of each class, by id(class): kept while an input uses it (its bases
# keep the class alive, so the id is the class's), made again after it is collected.
_OBSERVED: weakref.WeakValueDictionary[int, type[Any]] = weakref.WeakValueDictionary()
_BASE_OF: weakref.WeakKeyDictionary[type[Any], type[AudioInput]] = weakref.WeakKeyDictionary()


def _by_identity(cls: type[Any]) -> bool:
    hash_: Any = cls.__hash__
    eq: Any = cls.__eq__
    return hash_ is object.__hash__ and eq is object.__eq__


def _tap_of(audio: AudioInput) -> _Tap | None:
    if _by_identity(type(audio)):
        return _TAPS.get(audio)
    return _TAPS_BY_ID.get(id(audio))


def _observed_class(base: type[AudioInput]) -> type[Any]:
    """The subclass of ``base`` an observed input of that class has (made once, then reused).

    Raises:
        Exception: Whatever the class (or its metaclass, or ``__init_subclass__``) raises when
            subclassed.
    """
    observed = _OBSERVED.get(id(base))
    if observed is not None:
        return observed
    next_frame = base.__anext__
    on_detached = base.on_detached
    if _by_identity(base):
        taps_get: Callable[[Any], _Tap | None] = _TAPS.get

        async def __anext__(self: AudioInput) -> rtc.AudioFrame:
            frame = await next_frame(self)
            tap = taps_get(self)
            if tap is not None:
                clock = tap.clock
                if clock is None:
                    clock = tap.clock = _loop_clock(asyncio.get_running_loop())
                now = clock()
                for callback in tap.callbacks:
                    callback(frame, now)
            return frame

    else:
        taps_get = _TAPS_BY_ID.get

        async def __anext__(self: AudioInput) -> rtc.AudioFrame:
            frame = await next_frame(self)
            tap = taps_get(id(self))
            if tap is not None:
                clock = tap.clock
                if clock is None:
                    clock = tap.clock = _loop_clock(asyncio.get_running_loop())
                now = clock()
                for callback in tap.callbacks:
                    callback(frame, now)
            return frame

    def detached(self: AudioInput) -> None:
        try:
            on_detached(self)
        finally:
            tap = _tap_of(self)
            if tap is not None:
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
    }
    metaclass: Any = type(base)
    observed = metaclass(base.__name__, (base,), namespace)
    if not isinstance(observed, type):
        raise TypeError(f"the metaclass of {base.__qualname__} made {observed!r}, not a class")
    _OBSERVED[id(base)] = observed
    _BASE_OF[observed] = base
    return observed


def _take(audio: AudioInput, owner: SessionAudio, callbacks: tuple[FrameCallback, ...]) -> str:
    """Observe ``audio`` for ``owner`` (swapping its class if nobody did); why not, or ``""``."""
    tap = _tap_of(audio)
    if tap is not None:
        tap.set(owner, callbacks)
        return ""
    current = type(audio)
    base = _BASE_OF.get(current, current)  # a copy of an observed input has the observed class
    if base.__aiter__ is not AudioInput.__aiter__ and base.__aiter__(audio) is not audio:
        return "its __aiter__ returns another iterator than the input itself"
    try:
        observed = _observed_class(base)
    except Exception as exc:
        return f"its class cannot be subclassed: {type(exc).__name__}: {exc}"
    if current is not observed:
        before = audio.__class__
        try:
            audio.__class__ = observed
        except (TypeError, AttributeError) as exc:
            return f"its class cannot be swapped: {type(exc).__name__}: {exc}"
        if type(audio) is not observed:
            # a __class__ of its own (a proxy, a mock) took the assignment without changing type
            with contextlib.suppress(Exception):
                audio.__class__ = before
            return "its __class__ assignment does not change its type"
    tap = _Tap(audio, base, observed)
    if _by_identity(base):
        _TAPS[audio] = tap
    else:
        _TAPS_BY_ID[id(audio)] = tap
    tap.set(owner, callbacks)
    return ""


def _let_go(audio: AudioInput, owner: SessionAudio) -> None:
    """``owner`` no longer observes ``audio``; its class is put back when nobody does."""
    tap = _tap_of(audio)
    if tap is None or tap.audio is not audio:
        return
    tap.set(owner, ())
    if tap.owners:
        return
    if _by_identity(tap.base):
        _TAPS.pop(audio, None)
    else:
        _TAPS_BY_ID.pop(id(audio), None)
    found = type(audio)
    if found is not tap.observed:
        logger.warning(
            "audio_class_left",
            why="the input's class was changed by someone else while it was observed",
            audio_input=tap.base.__qualname__,
            found=found.__qualname__,
        )
        return
    try:
        audio.__class__ = tap.base
    except (TypeError, AttributeError) as exc:  # pragma: no cover - the swap in did work
        logger.warning(
            "audio_class_left", why=f"{type(exc).__name__}: {exc}", audio_input=found.__qualname__
        )


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
        elif self._observed is not None:
            if self._callbacks:
                _take(self._observed, self, self._callbacks)
            else:
                # nobody listens: the input gets its own class back, and no frame is touched
                _let_go(self._observed, self)
                self._observed = None

    def _release(self) -> None:
        observed, self._observed = self._observed, None
        if observed is not None:
            _let_go(observed, self)
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
