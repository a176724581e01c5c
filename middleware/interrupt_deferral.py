"""A non-forced ``session.interrupt()`` defers to a protected current speech instead of raising.

On livekit-agents 1.8.9, ``AgentSession.interrupt()`` raises ``RuntimeError`` when the current
speech disallows interruptions. RoomIO's default text input callback calls it before
``generate_reply(user_input=...)``, so a chat message typed while a protected speech plays never
reaches the LLM: RoomIO catches the error and logs "failed to handle chat text stream". livekit's
DTMF workflow (``beta.workflows``) calls it the same way.

While installed, :class:`InterruptDeferral` shadows ``interrupt`` on the session instance (public
names only; put back by :meth:`InterruptDeferral.uninstall`). A call that would have raised for
a protected current speech still runs livekit's own ``interrupt``, which interrupts the
interruptible background speeches before it raises; the protected speech plays to the end, the
deferral is reported, and the caller gets a future that is already done. A reply the caller
asks for next (``generate_reply``) is queued behind the protected speech, as livekit queues any
reply. ``force=True`` and every other case go to livekit unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent.options import OptionChecker

__all__ = ["InterruptDeferral", "protected_current_speech"]


def protected_current_speech(session: AgentSession[Any]) -> SpeechHandle | None:
    """The current speech if a non-forced interrupt cannot cut it, else None."""
    current = session.current_speech
    if current is None or current.allow_interruptions or current.done() or current.interrupted:
        return None
    return current


class InterruptDeferral:
    """Shadows ``session.interrupt`` for as long as one agent runs in the session.

    Args:
        session: The session whose ``interrupt`` is shadowed.
        on_deferred: Called with the protected speech each time an interrupt defers to it.
    """

    def __init__(
        self, session: AgentSession[Any], on_deferred: Callable[[SpeechHandle], None]
    ) -> None:
        self._session = session
        self._on_deferred = OptionChecker("InterruptDeferral").callable("on_deferred", on_deferred)
        self._saved: Any = None
        self._shadow: Callable[..., asyncio.Future[None]] | None = None

    @property
    def installed(self) -> bool:
        """Whether the session's ``interrupt`` is this deferral's shadow."""
        return self._shadow is not None and vars(self._session).get("interrupt") is self._shadow

    def install(self) -> None:
        """Shadow ``session.interrupt``; a second call does nothing."""
        if self._shadow is not None:
            return
        session = self._session
        # an instance attribute already there (another wrapper) is kept and restored later
        self._saved = vars(session).get("interrupt")
        original = session.interrupt

        def interrupt(*, force: bool = False) -> asyncio.Future[None]:
            protected = None if force else protected_current_speech(session)
            if protected is None:
                return original(force=force)
            try:
                return original(force=force)
            except RuntimeError:
                if protected_current_speech(session) is not protected:
                    raise  # not the protected speech's refusal
            self._on_deferred(protected)
            done: asyncio.Future[None] = asyncio.Future()  # as livekit's own interrupt makes it
            done.set_result(None)
            return done

        self._shadow = interrupt
        session.interrupt = interrupt  # type: ignore[method-assign]

    def uninstall(self) -> None:
        """Put back what ``session.interrupt`` was, unless someone shadowed it after us."""
        if self._shadow is None:
            return
        if self.installed:
            if self._saved is not None:
                self._session.interrupt = self._saved  # type: ignore[method-assign]
            else:
                with contextlib.suppress(AttributeError):
                    del self._session.interrupt
        self._shadow = None
        self._saved = None
