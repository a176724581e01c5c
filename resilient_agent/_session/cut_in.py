"""Deliberate cut-ins: speeches the app means to play over a caller who is still talking.

livekit's ``user_turn_limit`` (``turn_handling={"user_turn_limit": {"max_words": ...}}``) calls
``Agent.on_user_turn_exceeded`` when a caller talks too long, and its default answer is an
uninterruptible reply over the caller: a cut-in, on purpose. The chain must not hold it for the
caller to stop (that is what the app configured against), so speeches created while that hook
runs, or inside :func:`cut_in`, reach the chain with ``SpeechInfo.cut_in`` set, and middleware
that waits for the caller leaves them to play as livekit plays them::

    from resilient_agent import cut_in

    with cut_in():
        session.say("Sorry to cut in: the office closes in a minute.", allow_interruptions=False)

The words the caller says over a cut-in are still kept (livekit drops them while the speech is
protected): only the speech's timing is livekit's.

A cut-in's assistant message carries ``extra[CUT_IN_EXTRA] = True`` in the chat (and so in
livekit's session report): the report says which lines the app meant to play over the caller,
which nothing else in it does, and a replay plays them so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any

from livekit.agents.voice import SpeechHandle, UserTurnExceededEvent

__all__ = ["CUT_IN_EXTRA", "cut_in", "cutting_in", "mark_cut_in_lines", "run_as_cut_in"]

CUT_IN_EXTRA = "resilient_agent_cut_in"
"""The key of a cut-in's assistant message's ``extra`` (set to True)."""

_CUTTING_IN: ContextVar[bool] = ContextVar("resilient_agent_cutting_in", default=False)


@contextlib.contextmanager
def cut_in() -> Iterator[None]:
    """Speeches created inside the block (and tasks started from it) are deliberate cut-ins."""
    token = _CUTTING_IN.set(True)
    try:
        yield
    finally:
        _CUTTING_IN.reset(token)


def cutting_in() -> bool:
    """Whether the code running now creates deliberate cut-ins."""
    return _CUTTING_IN.get()


def run_as_cut_in(
    hook: Callable[[UserTurnExceededEvent], Awaitable[None]],
) -> Callable[[UserTurnExceededEvent], Coroutine[Any, Any, None]]:
    """``hook`` (an ``on_user_turn_exceeded``) with the speeches it creates marked cut-ins."""

    async def on_user_turn_exceeded(ev: UserTurnExceededEvent) -> None:
        with cut_in():
            await hook(ev)

    return on_user_turn_exceeded


def mark_cut_in_lines(handle: SpeechHandle) -> None:
    """Mark the assistant messages a finished cut-in said (see :data:`CUT_IN_EXTRA`)."""
    for item in handle.chat_items:
        extra = getattr(item, "extra", None)
        if item.type == "message" and item.role == "assistant" and isinstance(extra, dict):
            extra[CUT_IN_EXTRA] = True
