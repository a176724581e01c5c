"""The library's listeners on livekit emitters, registered as few times as their order allows.

livekit's ``EventEmitter.emit`` (``livekit/rtc/event_emitter.py``) runs ``inspect.signature`` on
every listener at every emit and builds each one's arguments: about 215 bytecodes a listener per
event, more than most of the library's listeners cost themselves. The session's own listeners
and those middleware add through the context often sit one after another on the same event
(the core's ``user_input_transcribed`` listener, then ``SttRecovery``'s; ``PlayoutLedger``'s and
``WaitForCaller``'s on the audio output's playback events). :class:`FanOut` registers such a run
of listeners as one listener that calls them in turn, exactly as ``emit`` would have: in the
order they were added, each given what ``emit`` gives a one-argument listener, a ``TypeError``
raised on (ending the emit), any other exception logged to the ``livekit`` logger as ``emit``
logs it, and the next listener called.

A listener joins the run registered last only while that run is still the emitter's last
listener for the event (nobody registered after it): otherwise it starts a run of its own, so
every listener of the emitter, the library's and anyone else's, is called in the order of
registration, as before. Whether the run is still last is read from the emitter
(``last_listener``, given by the session: livekit keeps it in a private attribute); when that
cannot be told, every listener gets a run of its own.

One difference remains, where the library never adds a listener: a listener added to a run
from inside an emit of the same event, by a listener called before the run, would hear that
emit (``emit`` calls only the listeners registered when it began).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["NOT_KNOWN", "Emitter", "FanOut", "Guarded", "LastListener"]

NOT_KNOWN: Any = object()
"""What a :data:`LastListener` answers when the emitter does not say."""

LastListener = Callable[[Any, str], Any]
"""``(emitter, event)`` to the listener registered last for ``event`` (None if none), or
:data:`NOT_KNOWN`."""

# the logger and message of livekit's ``EventEmitter.emit`` for a listener that raised
_livekit_logger = logging.getLogger("livekit")

# What a run tells livekit's emitter it takes: ``(*args)``. The emitter reads it from
# ``__signature__`` (no code inspected) and, for a listener with ``*args``, calls it with every
# argument at once: the shortest way through ``emit``, with no list of positional parameters
# built per listener per event. The run then gives each of its listeners what ``emit`` gives a
# one-argument listener: the first argument only.
_EVERY_ARGUMENT = inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])


class Emitter(Protocol):
    """A livekit event emitter (the session, an audio output, ...)."""

    def on(self, event: Any, callback: Any) -> Any:
        """Add ``callback`` for ``event``."""
        ...

    def off(self, event: Any, callback: Any) -> Any:
        """Remove ``callback`` for ``event``."""
        ...


def _not_known(_emitter: Any, _event: str) -> Any:
    return NOT_KNOWN


class Guarded:
    """A listener inside a fault boundary: its handler's failures are its owner's to report.

    A run calls :attr:`handler` itself and hands what it raises to :meth:`failed`, so a guarded
    listener costs the run no call frame of its own; called alone, it does the same.
    """

    __slots__ = ("handler",)

    def __init__(self, handler: Callable[[Any], Any]) -> None:
        self.handler = handler

    def __call__(self, event: Any) -> None:
        try:
            self.handler(event)
        except Exception as exc:
            self.failed(exc)

    def failed(self, exc: Exception) -> None:
        """Report ``exc``, raised by the handler; never raises."""
        raise NotImplementedError


def _calls(
    listeners: tuple[Callable[..., Any], ...],
) -> tuple[tuple[Callable[..., Any], Guarded | None], ...]:
    """What a run calls for each listener, and the guard that takes its failures, if any."""
    return tuple(
        (listener.handler, listener) if isinstance(listener, Guarded) else (listener, None)
        for listener in listeners
    )


class _Run:
    """One registered listener calling a run of the library's listeners, as ``emit`` would."""

    __slots__ = ("_calls", "_event", "_listeners")
    # livekit's emitter reads this instead of inspecting the run at every emit
    __signature__ = _EVERY_ARGUMENT

    def __init__(self, event: str, listener: Callable[..., Any]) -> None:
        self._event = event
        self.listeners = (listener,)

    @property
    def listeners(self) -> tuple[Callable[..., Any], ...]:
        """The listeners, in order.

        Replaced, never changed in place: a call goes through the listeners it began with.
        """
        return self._listeners

    @listeners.setter
    def listeners(self, listeners: tuple[Callable[..., Any], ...]) -> None:
        self._listeners = listeners
        self._calls = _calls(listeners)

    def __call__(self, *args: Any) -> None:
        if len(args) != 1:
            if not args:
                self._call_each()  # each as ``emit`` calls it with no argument
                return
            args = args[:1]  # what ``emit`` gives a one-argument listener
        for call, guard in self._calls:
            try:
                call(*args)
            except Exception as exc:
                # a guarded listener's failure is its own; any other is what ``emit`` makes of it
                if guard is not None:
                    guard.failed(exc)
                elif isinstance(exc, TypeError):
                    raise
                else:
                    _livekit_logger.exception(f"failed to emit event {self._event}")

    def _call_each(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except TypeError:
                raise
            except Exception:
                _livekit_logger.exception(f"failed to emit event {self._event}")


class FanOut:
    """The library's listeners on livekit emitters in one session, in runs (module docstring).

    Args:
        last_listener: Tells the listener an emitter called last for an event.
    """

    def __init__(self, last_listener: LastListener = _not_known) -> None:
        self.last_listener = last_listener
        # (id(emitter), event) -> the emitter (kept, so its id stays its own) and its runs
        self._runs: dict[tuple[int, str], tuple[Emitter, list[_Run]]] = {}

    def on(self, emitter: Emitter, event: str, listener: Callable[[Any], Any]) -> None:
        """Add ``listener`` (a one-argument callable) for ``event``, after all others."""
        key = (id(emitter), event)
        entry = self._runs.get(key)
        if entry is not None:
            runs = entry[1]
            last = runs[-1]
            if self.last_listener(emitter, event) is last:
                if listener not in last.listeners:
                    last.listeners = (*last.listeners, listener)
                return
        else:
            runs = []
            self._runs[key] = (emitter, runs)
        run = _Run(event, listener)
        emitter.on(event, run)
        runs.append(run)

    def off(self, emitter: Emitter, event: str, listener: Callable[[Any], Any]) -> None:
        """Remove ``listener`` for ``event`` (nothing happens if it is not there)."""
        key = (id(emitter), event)
        entry = self._runs.get(key)
        if entry is None:
            return
        runs = entry[1]
        for run in runs:
            if listener in run.listeners:
                run.listeners = tuple(kept for kept in run.listeners if kept is not listener)
                if not run.listeners:
                    runs.remove(run)
                    if not runs:
                        del self._runs[key]
                    emitter.off(event, run)
                return

    def __len__(self) -> int:
        return sum(len(run.listeners) for _, runs in self._runs.values() for run in runs)
