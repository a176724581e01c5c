"""The service that re-transcribes caller audio an STT lost: offered on the context, asked for.

The :class:`~.turn_keeper.TurnKeeper` keeps the last seconds of the caller's audio and offers
itself as :class:`WordRecovery` in its ``setup`` (``ctx.provide(WordRecovery, self)``);
``SttRecovery`` asks for it (``ctx.service(WordRecovery)``) after restarting a dead STT stream.
Through the context, not ``ctx.agent.middleware``: after a handoff to a plain ``Agent``, served
by the chain before it, the active agent has no chain of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from resilient_agent import MiddlewareContext

__all__ = ["WordRecovery"]


class WordRecovery:
    """Re-transcribes the caller's audio since the last final transcript (an STT lost it)."""

    def recover_unheard_audio(
        self,
        ctx: MiddlewareContext,
        *,
        kind: str,
        on_words: Callable[[int], None] | None = None,
        as_turn: bool = False,
    ) -> bool:
        """Start the recovery; its words reach the LLM like any words livekit dropped.

        Args:
            ctx: The session's context.
            kind: The race kind the recovered words are reported under.
            on_words: Called with the number of words recovered, just before they are
                reported, when the audio held words the STT never delivered (not called
                otherwise): the evidence that the STT lost them.
            as_turn: The words are the caller's turn livekit just ended without them (no
                turn of livekit's will carry them): they are answered as that turn, at once
                and through the agent's ``on_user_turn_completed``, as livekit answers a
                committed turn.

        Returns:
            False when no audio is kept to recover from.
        """
        raise NotImplementedError
