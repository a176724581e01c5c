"""Session event listeners that livekit's event emitter can call without inspecting them.

livekit's ``EventEmitter.emit`` (``livekit/rtc/event_emitter.py``) runs ``inspect.signature``
on every listener at every emit, to pass it only the arguments it takes. For a bound method that
rebuilds the signature from the function's code and drops ``self``: hundreds of bytecodes per
listener per event, more than most listeners themselves cost. A function that carries its
signature in ``__signature__`` (the attribute ``inspect.signature`` reads first) is answered at
once, so every listener the library adds to a session goes through :func:`event_listener`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["event_listener"]

_Event = TypeVar("_Event")

_ONE_EVENT = inspect.Signature(
    [inspect.Parameter("event", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
)


def event_listener(handler: Callable[[_Event], Any]) -> Callable[[_Event], None]:
    """``handler`` as a listener of a one-argument session event, with its signature attached.

    Register the returned function (keep it to ``off()`` it later); it calls ``handler``.
    """

    def listener(event: _Event) -> None:
        handler(event)

    # inspect.signature reads this before looking at the code (PEP 362)
    listener.__signature__ = _ONE_EVENT  # type: ignore[attr-defined]
    return listener
