"""A speech-to-text stream that died mid-call, restarted, and the words it lost recovered.

livekit recreates the STT stream after a connection failure (``APIError``), but any other
exception raised inside the stream (a plugin bug, a protocol surprise, a decoder error) ends it
for the rest of the call: livekit reports one unrecoverable ``error`` event on the session and
from then on the caller's words reach nobody, silently. :class:`SttRecovery` acts on exactly
that evidence: it gives the agent a fresh stream through the public
``Agent.update_options(stt=...)`` (as the Watchdog restarts a VAD), and asks the session's
:class:`~.word_recovery.WordRecovery` (the TurnKeeper, which keeps the last seconds of the
caller's audio, offers it on the context) to re-transcribe what was said since the last final
transcript. Those words join the caller's next
turn (or are answered on their own), like any other words livekit dropped.

A connection livekit (or the plugin) reconnects after a failure mid-stream (a recoverable error
caused by an ``APIError``: Deepgram's socket closed mid-utterance) keeps the stream going but
loses the words it had not finalized: those are re-transcribed the same way, reported as
``stt_reconnected``, once until the next final transcript.

It costs nothing while the STT is healthy: listeners on the session's ``error`` and
``user_input_transcribed`` events and no hook the chain dispatches.
"""

from __future__ import annotations

import asyncio
from typing import Any

from livekit.agents import APIError, stt, utils
from livekit.agents.voice import events as lk_events

from resilient_agent import CloseReason, Middleware, MiddlewareContext, OptionChecker, get_logger

from .clock import loop_now
from .word_recovery import WordRecovery

__all__ = ["SttRecovery"]

logger = get_logger("middleware.stt_recovery")

STT_STREAM_DIED = "stt_stream_died"
"""The race kind: detection, restart and word recovery are reported under it."""

STT_RECONNECTED = "stt_reconnected"
"""The race kind of a stream livekit (or the plugin) reconnected after a connection failure: the
words the lost connection was hearing are recovered under it."""


class SttRecovery(Middleware):
    """Restarts an STT stream that died of an error livekit does not retry (on by default).

    Args:
        max_restarts: Restarts per session; a stream that keeps dying past them is reported
            once and left to livekit (its ``max_unrecoverable_errors`` closes the session).
        recover_words: Re-transcribe the caller's audio since the last final transcript
            (needs the TurnKeeper and its audio buffer).
    """

    name = "SttRecovery"

    def __init__(self, *, max_restarts: int = 3, recover_words: bool = True) -> None:
        check = OptionChecker(self.display_name)
        self.max_restarts = check.count("max_restarts", max_restarts, ge=1, le=100)
        self.recover_words = check.flag("recover_words", recover_words)
        self.restarts = 0
        self._ctx: MiddlewareContext | None = None
        self._pending: asyncio.Handle | None = None
        # a reconnect's words are recovered once until the next final transcript: livekit
        # retries a connection several times, and each retry reports an error
        self._recovered_since_final = False

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Listen for the session's error events."""
        self._ctx = ctx
        self.restarts = 0
        ctx.listen(ctx.session, "error", self._on_error, by=self)
        ctx.listen(ctx.session, "user_input_transcribed", self._on_transcript, by=self)

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Cancel a restart not yet made (the listener is removed by the core)."""
        if self._pending is not None:
            self._pending.cancel()

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        if ev.is_final:
            self._recovered_since_final = False

    def _on_error(self, ev: lk_events.ErrorEvent) -> None:
        error = ev.error
        if not isinstance(error, stt.STTError):
            return
        if error.recoverable:
            if isinstance(error.error, APIError):
                self._on_reconnect(error)
            return
        if isinstance(error.error, APIError):
            # livekit recreates the stream itself after a connection failure
            return
        ctx = self._ctx
        if ctx is None or self._pending is not None:
            return
        died_at = loop_now()
        ctx.race_detected(
            self, STT_STREAM_DIED, details={"error": type(error.error).__name__, "stt": error.label}
        )
        if self.restarts >= self.max_restarts:
            logger.warning(
                "stt_stream_not_restarted",
                restarts=self.restarts,
                why="max_restarts reached; livekit's max_unrecoverable_errors decides the rest",
            )
            return
        # livekit raises the error right after reporting it: restart once it has unwound
        self._pending = asyncio.get_running_loop().call_soon(self._restart, ctx, died_at)

    def _on_reconnect(self, error: stt.STTError) -> None:
        """A connection lost mid-stream: the stream goes on, the words it was hearing do not.

        A provider socket closed mid-utterance (Deepgram's plugin reconnects on its own)
        takes the words not finalized yet with it; they are re-transcribed from the kept audio.
        """
        ctx = self._ctx
        if ctx is None or self._recovered_since_final:
            return
        self._recovered_since_final = True
        # reported only when there is audio the lost connection may have been hearing (a
        # connection refused before the caller said anything lost nothing)
        if self.recover_words and not _recover_words(ctx, STT_RECONNECTED):
            return
        ctx.race_detected(
            self, STT_RECONNECTED, details={"error": type(error.error).__name__, "stt": error.label}
        )

    def _restart(self, ctx: MiddlewareContext, died_at: float) -> None:
        self._pending = None
        recognizer = _current_stt(ctx)
        if recognizer is None:
            return
        self.restarts += 1
        ctx.agent.update_options(stt=recognizer)
        restarted_at = loop_now()
        recovering = self.recover_words and _recover_words(ctx, STT_STREAM_DIED)
        ctx.race_handled(
            self,
            STT_STREAM_DIED,
            "restarted_stream",
            details={
                "restart": self.restarts,
                "restart_s": round(restarted_at - died_at, 3),
                "recovering_words": recovering,
            },
            counts={"stt_restarts": 1},
        )


def _current_stt(ctx: MiddlewareContext) -> stt.STT[Any] | None:
    agent_stt = getattr(ctx.agent, "stt", None)
    current = agent_stt if utils.is_given(agent_stt) and agent_stt is not None else ctx.session.stt
    return current if isinstance(current, stt.STT) else None


def _recover_words(ctx: MiddlewareContext, kind: str) -> bool:
    """Ask the session's word recovery to re-transcribe what the stream never finished."""
    recovery = ctx.service(WordRecovery)
    if recovery is None:
        logger.warning(
            "stt_words_not_recovered",
            why="no TurnKeeper in the chain: it keeps the caller's audio",
        )
        return False
    return recovery.recover_unheard_audio(ctx, kind=kind)
