"""What a closing :class:`~.keeper.TurnKeeper` hands the next agent's keeper.

The session's runtime keeps the leaving agent's chain running through livekit's drain of its
activity (a protected speech plays to its end, withholding the caller's words from the STT), so
the leaving keeper sees every word said meanwhile. When the next ``ResilientAgent`` enters, the
leaving keeper closes with ``reason="handoff"`` and carries (``ctx.carry``) a
:class:`CarriedWords`: its undelivered words, its audio tap (still observed through the session's
one audio observer), and the start of a speech window still open; the next keeper takes them in
its ``setup`` and answers them (the words themselves wait in the session's pending words).
"""

from __future__ import annotations

from dataclasses import dataclass

from livekit.agents import Agent, llm

from resilient_agent import get_logger
from resilient_agent._engine.pending_words import Fragment

from ..clock import loop_now
from .withheld_audio import WithheldAudioTap

__all__ = ["CARRY_KEY", "CarriedWords", "unanswered_messages"]

logger = get_logger("middleware.handover")

CARRY_KEY = "TurnKeeper"
"""The key a keeper carries its words under."""


@dataclass
class CarriedWords:
    """A leaving keeper's tap and open speech window, and the words it leaves unanswered.

    The words stay in the session's pending words (``ctx.state.pending_words``), where the next
    keeper finds them: ``fragments`` names those pending at the handoff, to log them if no
    keeper takes over.
    """

    fragments: list[Fragment]
    tap: WithheldAudioTap | None
    open_window_start: float | None

    def dropped(self) -> None:
        """No next keeper took them (the next agent has no TurnKeeper): log what is lost."""
        lost = [f for f in self.fragments if not f.delivered and not f.superseded]
        if lost:
            logger.warning(
                "user_words_lost",
                fragments=len(lost),
                words=sum(len(f.text.split()) for f in lost),
                why="the next agent's chain has no TurnKeeper to take them",
            )


def unanswered_messages(
    leaving: Agent | None, next_context: llm.ChatContext | None, carried: list[Fragment]
) -> list[Fragment]:
    """The caller's last messages in ``leaving``'s context that no reply of it followed.

    livekit plays the leaving agent's queued replies before the next agent starts; one the
    caller talked over (its turn skipped while the activity drains) leaves the message it
    answers in the leaving agent's context only, and a next agent with a context of its own
    never answers it. Messages the next agent's context already holds, and words already
    carried, are left out.
    """
    if leaving is None:
        return []
    unanswered: list[llm.ChatMessage] = []
    for item in leaving.chat_ctx.items:
        if item.type == "function_call" or (
            item.type == "message" and item.role == "assistant" and not item.interrupted
        ):
            unanswered.clear()  # the agent acted on what came before
        elif item.type == "message" and item.role == "user":
            unanswered.append(item)
    held = {i.id for i in next_context.items} if next_context is not None else set()
    texts = {f.text for f in carried}
    now = loop_now()
    return [
        Fragment(text, now)
        for message in unanswered
        if message.id not in held
        and (text := (message.text_content or "").strip())
        and text not in texts
    ]
