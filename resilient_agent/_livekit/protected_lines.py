"""The app's own protected lines on a realtime model: ``allow_interruptions=False`` honoured.

Under a realtime model's server turn detection, livekit-agents 1.8 drops
``allow_interruptions=False`` from ``session.say(...)`` and ``session.generate_reply(...)``
(with a warning, ``AgentActivity.say`` / ``_generate_reply``): the line is made interruptible and
the server's barge-in cuts it at the caller's first word. What livekit honours there is a
protected handle (``handle.allow_interruptions = False`` once it is made): livekit then feeds the
model silence for the caller (``RealtimeInputHold`` keeps that audio and sends it after the
line) and does not interrupt the speech.

:class:`ProtectedLineGate` shadows both methods on the session instance: a call that asks for a
protected line on such a session is made without the argument livekit would drop, and its handle
is protected at once, before anything awaits. Every other call goes to livekit unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession, llm
from livekit.agents.voice import SpeechHandle

from .._engine.log import get_logger
from .interception import Interceptor

__all__ = ["ProtectedLineGate", "protect", "server_detects_turns"]

logger = get_logger("protected_lines")


def server_detects_turns(session: AgentSession[Any]) -> bool:
    """Whether the active agent runs on a realtime model whose server detects turns.

    There livekit drops ``allow_interruptions=False`` from ``say`` and ``generate_reply``.
    """
    try:
        model = session.current_agent.realtime_llm_session.realtime_model
    except RuntimeError:  # no agent yet, or not a realtime model
        return False
    return isinstance(model, llm.RealtimeModel) and model.capabilities.turn_detection


def protect(handle: SpeechHandle, how: str) -> SpeechHandle:
    """Make ``handle`` uninterruptible, as its caller asked (``how``: which call), and log it."""
    if not handle.interrupted and not handle.done():
        handle.allow_interruptions = False
        logger.info(
            "protected_line_on_realtime_model",
            speech_id=handle.id,
            call=how,
            why=(
                "livekit drops allow_interruptions=False under server turn detection; the "
                "speech's handle is protected instead, which livekit honours"
            ),
        )
    return handle


class ProtectedLineGate:
    """Shadows ``session.say`` and ``session.generate_reply`` so a protected line stays protected.

    Args:
        session: The session whose calls are followed.
    """

    def __init__(self, session: AgentSession[Any]) -> None:
        self._session = session

    def install(self, interceptor: Interceptor) -> None:
        """Shadow both methods on the session instance."""
        for method in ("say", "generate_reply"):
            if callable(getattr(self._session, method, None)):  # a stand-in session may have none
                interceptor.install(f"AgentSession.{method}", self._session, self._shadow(method))

    def _shadow(self, how: str) -> Callable[[Callable[..., SpeechHandle]], Callable[..., Any]]:
        session = self._session

        def shadow(original: Callable[..., SpeechHandle]) -> Callable[..., SpeechHandle]:
            def call(*args: Any, **kwargs: Any) -> SpeechHandle:
                if kwargs.get("allow_interruptions") is not False or not server_detects_turns(
                    session
                ):
                    return original(*args, **kwargs)
                del kwargs["allow_interruptions"]
                return protect(original(*args, **kwargs), how)

            return call

        return shadow
