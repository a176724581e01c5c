"""A realtime reply that ends with no audio is asked for again, once.

Gemini Live can answer a turn in audio mode with text only, or with an empty ``turnComplete``
(livekit/agents PR #7390, googleapis/python-genai#2117): livekit-plugins-google drops the text
(it is not spoken) and the generation ends with nothing played. The caller hears nothing, the
agent goes back to listening, and nothing reports it.

:class:`SilentTurnGuard` watches each reply livekit played on a realtime model: one that ended,
not interrupted, having added nothing to the conversation (no spoken message, no tool call) is a
silent turn (``silent_realtime_turn``). The model is asked for the reply again
(``session.generate_reply()``; the caller's turn is already in its conversation), once per
silent turn: a reply that comes back silent again is reported, not retried (``gave_up``), so a
model that cannot speak is not asked forever. On a pipeline session it leaves the chain at setup.
"""

from __future__ import annotations

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    MiddlewareNotUsed,
    SpeechInfo,
    get_logger,
    never_waits,
)

__all__ = ["RACE", "SilentTurnGuard"]

RACE = "silent_realtime_turn"

logger = get_logger("middleware.silent_turn")


class SilentTurnGuard(Middleware):
    """Asks a realtime model again, once, for a reply that ended with no audio."""

    name = "SilentTurnGuard"

    def __init__(self) -> None:
        # the speech asked for after a silent turn: if it is silent too, nothing more is asked
        self._retry_id: str | None = None
        self._retry_pending = False

    async def setup(self, ctx: MiddlewareContext) -> None:
        """On a session whose active agent runs a realtime model only."""
        model_input = ctx.model_input
        if model_input is None or not model_input.available:
            raise MiddlewareNotUsed

    @never_waits
    async def on_speech_created(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """The reply asked for after a silent turn is remembered, to be judged in its turn."""
        if self._retry_pending and speech.source == "generate_reply":
            self._retry_pending = False
            self._retry_id = speech.id

    @never_waits
    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A reply that ended uninterrupted with nothing in it is a silent turn."""
        handle = speech.handle
        if speech.source != "generate_reply" or handle.interrupted or handle.chat_items:
            if speech.id == self._retry_id:
                self._retry_id = None
            return
        details = {"speech_id": speech.id, "user_initiated": speech.user_initiated}
        ctx.race_detected(self, RACE, details=details)
        if speech.id == self._retry_id:
            self._retry_id = None
            logger.warning("silent_turn_again", speech_id=speech.id)
            ctx.race_handled(self, RACE, "gave_up", details=details)
            return
        try:
            ctx.session.generate_reply()
        except RuntimeError as exc:
            # the session is closing or the agent leaving: no reply can be asked for now
            logger.warning("silent_turn_not_asked_again", speech_id=speech.id, error=str(exc))
            ctx.race_handled(self, RACE, "gave_up", details=details)
            return
        self._retry_pending = True
        ctx.race_handled(self, RACE, "regenerated", details=details)
