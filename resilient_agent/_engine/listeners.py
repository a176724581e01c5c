"""Session event listeners that livekit's event emitter can call without inspecting them.

livekit's ``EventEmitter.emit`` (``livekit/rtc/event_emitter.py``) runs ``inspect.signature``
on every listener at every emit, to pass it only the arguments it takes. For a bound method that
rebuilds the signature from the function's code and drops ``self``: hundreds of bytecodes per
listener per event, more than most listeners themselves cost. A listener that carries its
signature in ``__signature__`` (the attribute ``inspect.signature`` reads first) is answered at
once: the library's listeners reach livekit as :mod:`.fanout` runs, which carry it, and
:func:`event_listener` gives it to any other listener.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["ONE_EVENT", "event_listener"]

_Event = TypeVar("_Event")

ONE_EVENT = inspect.Signature([inspect.Parameter("event", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
"""The signature of a one-argument listener, as livekit's emitter reads it."""


def event_listener(handler: Callable[[_Event], Any]) -> Callable[[_Event], None]:
    """``handler`` as a listener of a one-argument session event, with its signature attached.

    Register the returned callable (keep it to ``off()`` it later); it calls ``handler``.
    """
    return _Listener(handler)


class _Listener(Generic[_Event]):
    __slots__ = ("_handler",)
    # inspect.signature reads this before looking at any code (PEP 362); on the class, so that
    # a listener is one small object
    __signature__ = ONE_EVENT

    def __init__(self, handler: Callable[[_Event], Any]) -> None:
        self._handler = handler

    def __call__(self, event: _Event) -> None:
        self._handler(event)
