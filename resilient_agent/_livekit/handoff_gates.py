"""The caller's typed input while livekit hands a session from one agent to the next.

On ``session.update_agent(...)`` livekit drains the leaving agent's activity: a protected speech
it was playing plays to its end, and its speech scheduling is paused until the next agent's
activity has started. RoomIO's default text callback (``room_io/types.py``) then fails twice:
``session.interrupt()`` raises on the protected speech, and
``session.generate_reply(user_input=...)`` raises because scheduling is paused ("cannot schedule
new speech, the speech scheduling is draining/paused"); the typed words are lost.

While a middleware keeps text input (``MiddlewareContext.hold_input_through_handoff``), the
session's runtime installs :class:`HandoffGates` from the leaving agent's ``on_exit`` until the
next agent starts (or the session ends):

* until livekit has switched to the next agent (its ``agent_handoff`` conversation item), a
  non-forced ``session.interrupt()`` that livekit refuses for the protected speech defers to it,
  instead of raising;
* a ``session.generate_reply(user_input=...)`` livekit refuses (it raises ``RuntimeError``) gives
  the input's text to the keeper, which answers it once the next agent runs, and then raises
  livekit's error unchanged: the caller of ``generate_reply`` sees what
  livekit does.

Every other call goes to livekit unchanged. The shadows are installed through
:class:`~resilient_agent._livekit.interception.Interceptor`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession, llm
from livekit.agents.voice import events as lk_events

from .._engine.log import get_logger
from .interception import Interceptor
from .speech_gates import interrupt_deferring_to, protected_current_speech

__all__ = ["HandoffGates", "RefusedInputCallback"]

logger = get_logger("handoff_gates")

RefusedInputCallback = Callable[[str], None]
"""Given the text of a user input livekit refused to answer during a handoff."""


class HandoffGates:
    """Keeps RoomIO's text input working while a session is handed to the next agent.

    Args:
        session: The session being handed over.
        keep: Given the text of each user input livekit refuses to answer.
    """

    def __init__(self, session: AgentSession[Any], keep: RefusedInputCallback) -> None:
        self._session = session
        self._keep = keep
        self._draining = True

    def install(self, interceptor: Interceptor) -> None:
        """Shadow ``interrupt`` and ``generate_reply`` (``interceptor.restore_all()`` undoes it)."""
        interceptor.install("AgentSession.interrupt", self._session, self._interrupt_shadow)
        interceptor.install(
            "AgentSession.generate_reply", self._session, self._generate_reply_shadow
        )
        self._session.on("conversation_item_added", self._on_item)
        interceptor.on_restore(lambda: self._session.off("conversation_item_added", self._on_item))

    def _on_item(self, ev: lk_events.ConversationItemAddedEvent) -> None:
        if ev.item.type == "agent_handoff":
            # the next agent's activity is current: its speeches are its own to refuse
            self._draining = False

    def _interrupt_shadow(
        self, original: Callable[..., asyncio.Future[None]]
    ) -> Callable[..., asyncio.Future[None]]:
        session = self._session

        def interrupt(*, force: bool = False) -> asyncio.Future[None]:
            protected = None if force or not self._draining else protected_current_speech(session)
            if protected is None:
                return original(force=force)
            return interrupt_deferring_to(
                protected,
                session,
                original,
                force=force,
                on_deferred=lambda: logger.info(
                    "interrupt_deferred_during_handoff",
                    speech_id=protected.id,
                    why=(
                        "the leaving agent's protected speech plays to its end while livekit "
                        "hands the session over; the input that follows is kept for the next agent"
                    ),
                ),
            )

        return interrupt

    def _generate_reply_shadow(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def generate_reply(**kwargs: Any) -> Any:
            try:
                return original(**kwargs)
            except RuntimeError:
                text = _input_text(kwargs.get("user_input"))
                if text:
                    self._keep(text)
                    logger.info(
                        "user_input_kept_through_handoff",
                        words=len(text.split()),
                        why=(
                            "livekit refused to schedule a reply while handing the session to "
                            "the next agent; the next agent answers the input"
                        ),
                    )
                raise

        return generate_reply


def _input_text(user_input: object) -> str:
    if isinstance(user_input, str):
        return user_input.strip()
    if isinstance(user_input, llm.ChatMessage):
        return (user_input.text_content or "").strip()
    return ""
