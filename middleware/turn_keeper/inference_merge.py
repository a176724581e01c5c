"""Pending words given to an inference that is not a user turn; kept once if livekit commits them.

A caller who spoke over a protected tool preamble would otherwise wait for the tool's protected
reply to play before being answered: the reply takes the TurnKeeper's pending words in instead.
The reply to an input that interrupted a protected speech (a typed chat message) takes in the
words said before it, in front of it. Each merged message is put in the inference, the agent's
context and ``session.history``; when livekit then commits the same words as a turn of its own,
the merged copy is removed from each, so every record holds the words once.
"""

from __future__ import annotations

from collections import deque

from livekit.agents import llm

from resilient_agent import InferenceRequest, MiddlewareContext, UserTurn, get_logger
from resilient_agent._engine.pending_words import PendingWords, normalized, typed_extra

from ..clock import loop_now
from ..session_facts import livekit_turn_delay
from .dropped_turns import GRACE_MARGIN_S
from .options import TurnKeeperOptions
from .transcript_match import without_repeats

__all__ = ["InferenceMerger"]

# the TurnKeeper's records: one logger for everything the keeper does
logger = get_logger("middleware.turn_keeper")

# How long after words were final livekit may still commit them (VAD silence, STT finalising).
_END_OF_SPEECH_SLACK_S = 1.0
# How much earlier than the input they preceded merged words are stamped.
_BEFORE_INPUT_S = 1e-3


class InferenceMerger:
    """Merges the TurnKeeper's pending words into inferences that are not user turns.

    Args:
        options: The keeper's options: its ``merge_format`` makes the words one user message.
        words: The session's pending words.
        reporter: The name the races are reported under (the keeper's).
    """

    def __init__(self, options: TurnKeeperOptions, words: PendingWords, *, reporter: str) -> None:
        self._options = options
        self._reporter = reporter
        self._words = words
        # (when, message) merged into inferences that were not user turns, until the next turn;
        # made at the first merge (most calls have none)
        self._merged: deque[tuple[float, llm.ChatMessage]] | None = None
        self._max_merged = options.max_fragments

    async def take_in(
        self, ctx: MiddlewareContext, request: InferenceRequest, *, input_reply: bool
    ) -> None:
        """Merge the pending words into ``request`` if it is not the reply to a user turn.

        Args:
            ctx: The session's context.
            request: The inference about to run.
            input_reply: The inference replies to an input that interrupted a protected speech.
        """
        items = [i for i in request.chat_ctx.items if i.type in ("message", "function_call_output")]
        last = items[-1] if items else None
        follows_user = isinstance(last, llm.ChatMessage) and last.role == "user"
        if not follows_user:
            if last is not None and last.type != "function_call_output" and self._spoken():
                # a reply asked for without user input (a task's on_enter, say) is typed input
                # to livekit (generate_reply's input_modality defaults to "text"): spoken words
                # merged into it would lose their modality, and a modality-aware task (livekit's
                # GetEmailTask) would save them unconfirmed. They are answered as speech instead
                return
            # one message, stamped now, at the end of the inference's context
            await self._merge(ctx, request, created_at=None)
        elif input_reply and isinstance(last, llm.ChatMessage):
            # stamped just before the input, so every record holds the words in the order said
            await self._merge(
                ctx,
                request,
                created_at=last.created_at - _BEFORE_INPUT_S,
                input_text=last.text_content,
            )

    def _spoken(self) -> bool:
        return any(f.modality == "audio" for f in self._words.undelivered())

    async def _merge(
        self,
        ctx: MiddlewareContext,
        request: InferenceRequest,
        *,
        created_at: float | None,
        input_text: str | None = None,
    ) -> None:
        """Put the pending words in the inference, the agent's context and livekit's transcript.

        Words the input itself already says (a turn livekit committed from the same speech)
        stay pending, so the LLM never reads them twice.
        """
        said = normalized(input_text or "")
        pending = [
            f for f in self._words.undelivered() if not said or normalized(f.text) not in said
        ]
        if not pending:
            return
        for fragment in pending:
            fragment.delivered = True
        fragments = " ".join(without_repeats(pending))
        text = self._options.merged_text(fragments, "")
        message = llm.ChatMessage(role="user", content=[text.strip()], extra=typed_extra(pending))
        if created_at is not None:
            message.created_at = created_at
        # session.history is the session's live ChatContext
        request.chat_ctx.insert(message)
        context = ctx.agent.chat_ctx.copy()
        context.insert(message)
        await ctx.agent.update_chat_ctx(context)
        ctx.session.history.insert(message)
        if self._merged is None:
            self._merged = deque(maxlen=self._max_merged)
        self._merged.append((loop_now(), message))
        action = "merged_into_inference" if created_at is None else "merged_before_input"
        ctx.race_handled(self._reporter, "dropped_user_words", action)

    async def forget_committed(self, ctx: MiddlewareContext, turn: UserTurn) -> None:
        """When livekit commits words a tool reply already took in, keep livekit's message.

        A word too short to interrupt can be final before a tool ends, taken in by the tool
        reply, and then committed by livekit as a turn of its own, which interrupts that reply
        and is answered. The merged copy is removed from this reply's context, the agent's
        context and ``session.history``, so each holds the words once.
        """
        # only the turn livekit still had open when the words were merged can carry them again
        open_for = livekit_turn_delay(ctx.session) + GRACE_MARGIN_S + _END_OF_SPEECH_SLACK_S
        merged = self._merged or ()
        recent = [m for at, m in merged if loop_now() - at <= open_for]
        if self._merged is not None:
            self._merged.clear()
        said = normalized(turn.text)
        committed = [m for m in recent if said and normalized(m.text_content or "") in said]
        if not committed:
            return
        ids = {m.id for m in committed}
        for message in committed:
            for record in (turn.turn_ctx, ctx.session.history):
                if record.get_by_id(message.id) is not None:
                    record.remove(message.id)
        context = ctx.agent.chat_ctx.copy()
        context.items = [i for i in context.items if i.id not in ids]
        await ctx.agent.update_chat_ctx(context)
        logger.info(
            "merged_user_words_committed_by_livekit",
            messages=len(committed),
            action="kept livekit's message, removed the merged copy",
        )
