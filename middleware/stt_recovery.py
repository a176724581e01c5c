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

A connection livekit (or the plugin) reconnects after a failure mid-stream (an error caused by
an ``APIError``: Deepgram's socket closed mid-utterance), or a stream livekit gave up and
recreated once its connection attempts were all refused (429, 503), keeps the call going but
loses the words it had not finalized: those are re-transcribed the same way, reported as
``stt_reconnected``, once until the next final transcript (a failure before the caller said
anything recovers nothing and uses nothing up). A refused attempt livekit retries loses
nothing: it keeps the audio for the next attempt.

A stream that stays open and answers nothing (a half-open socket: no transcript, no error,
livekit never reconnects) is found on evidence: the caller's speech ended (the VAD's word),
the STT was fed their audio (no protected speech withheld it), and ``silent_s`` later not one
transcript, interim or final, came since the speech began. A streaming STT that is slow but
live sends its words long before that. The kept audio since the last final transcript is then
re-transcribed through a fresh stream of the same STT; only when it holds words the stream
never delivered (noise the VAD took for speech holds none) is the stream restarted, and the
stream reported as ``stt_silent`` with the words recovered.

It costs nothing while the STT is healthy: listeners on the session's ``error``,
``user_input_transcribed`` and ``user_state_changed`` events (a timer per end of speech) and
no hook the chain dispatches.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from livekit.agents import APIError, APIStatusError, stt, utils
from livekit.agents.voice import events as lk_events

from resilient_agent import CloseReason, Middleware, MiddlewareContext, OptionChecker, get_logger

from .clock import loop_now
from .session_facts import stt_is_withheld
from .word_recovery import WordRecovery

__all__ = ["SttRecovery"]

logger = get_logger("middleware.stt_recovery")

STT_STREAM_DIED = "stt_stream_died"
"""The race kind: detection, restart and word recovery are reported under it."""

STT_RECONNECTED = "stt_reconnected"
"""The race kind of a stream livekit (or the plugin) reconnected after a connection failure: the
words the lost connection was hearing are recovered under it."""

STT_SILENT = "stt_silent"
"""The race kind of a stream that stayed open and answered nothing (a half-open socket): the
detection, the restart and the words recovered are reported under it."""


class SttRecovery(Middleware):
    """Restarts an STT stream that died of an error livekit does not retry (on by default).

    Args:
        max_restarts: Restarts per session; a stream that keeps dying past them is reported
            once and left to livekit (its ``max_unrecoverable_errors`` closes the session).
        recover_words: Re-transcribe the caller's audio since the last final transcript
            (needs the TurnKeeper and its audio buffer).
        silent_s: Seconds after the caller's speech ended without a single transcript since it
            began before a streaming STT is suspected of a half-open socket (the kept audio is
            then re-transcribed; the evidence needs the TurnKeeper and ``recover_words``).
    """

    name = "SttRecovery"

    def __init__(
        self, *, max_restarts: int = 3, recover_words: bool = True, silent_s: float = 2.0
    ) -> None:
        check = OptionChecker(self.display_name)
        self.max_restarts = check.count("max_restarts", max_restarts, ge=1, le=100)
        self.recover_words = check.flag("recover_words", recover_words)
        self.silent_s = check.number("silent_s", silent_s, ge=0.5, le=60.0)
        self.restarts = 0
        self._ctx: MiddlewareContext | None = None
        self._pending: asyncio.Handle | None = None
        # a reconnect's words are recovered once until the next final transcript: livekit
        # retries a connection several times, and each retry reports an error
        self._recovered_since_final = False
        # time.time() of the last final transcript: what the caller said since may be lost
        self._final_wall = 0.0
        self._speech_began: float | None = None
        self._audio_withheld = False
        self._last_transcript_at = float("-inf")
        self._silence_check: asyncio.TimerHandle | None = None

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Listen for the session's error events."""
        self._ctx = ctx
        self.restarts = 0
        ctx.listen(ctx.session, "error", self._on_error, by=self)
        ctx.listen(ctx.session, "user_input_transcribed", self._on_transcript, by=self)
        ctx.listen(ctx.session, "user_state_changed", self._on_user_state, by=self)

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Cancel a restart not yet made (the listener is removed by the core)."""
        if self._pending is not None:
            self._pending.cancel()
        if self._silence_check is not None:
            self._silence_check.cancel()
            self._silence_check = None

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        self._last_transcript_at = loop_now()
        if ev.is_final:
            self._recovered_since_final = False
            self._final_wall = time.time()

    def _on_error(self, ev: lk_events.ErrorEvent) -> None:
        error = ev.error
        if not isinstance(error, stt.STTError):
            return
        if isinstance(error.error, APIError):
            if error.recoverable and _refused_at_connect(error.error):
                # no connection was open: livekit keeps the audio for its next attempt
                return
            # livekit (or the plugin) connects again by itself: the words the lost connection
            # had not finalized are gone, and so is all the audio of a stream livekit gave up
            # (it recreates the stream) after its retries were refused
            self._on_reconnect(error, given_up=not error.recoverable)
            return
        if error.recoverable:
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

    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        ctx = self._ctx
        if ctx is None:
            return
        if ev.new_state == "speaking":
            self._speech_began = loop_now()
            self._audio_withheld = stt_is_withheld(ctx.session)
            return
        began, self._speech_began = self._speech_began, None
        if began is None or not self.recover_words:
            return
        # the STT was fed silence for (part of) the speech: its silence is no evidence
        withheld = self._audio_withheld or stt_is_withheld(ctx.session)
        if withheld:
            return
        if self._silence_check is not None:
            self._silence_check.cancel()
            self._silence_check = None
        if self._last_transcript_at >= began:
            # the speech has a transcript already: its check would find so, and need no timer
            return
        ended = loop_now()
        self._silence_check = asyncio.get_running_loop().call_later(
            self.silent_s, self._check_silence, ctx, began, ended
        )

    def _check_silence(self, ctx: MiddlewareContext, began: float, ended: float) -> None:
        """The speech got no transcript at all: ask the kept audio whether it held words."""
        self._silence_check = None
        if self._last_transcript_at >= began or self.restarts >= self.max_restarts:
            return
        recognizer = _current_stt(ctx)
        # a non-streaming STT answers once the VAD cut the audio: no socket to half-close
        if recognizer is None or not recognizer.capabilities.streaming:
            return
        recovery = ctx.service(WordRecovery)
        if recovery is None:
            return
        recovery.recover_unheard_audio(
            ctx,
            kind=STT_SILENT,
            on_words=functools.partial(self._restart_silent, ctx, recognizer, ended),
        )

    def _restart_silent(
        self, ctx: MiddlewareContext, recognizer: stt.STT[Any], ended: float, words: int
    ) -> None:
        """The kept audio held words the stream never delivered: it is deaf, restart it."""
        if self._last_transcript_at >= ended or self.restarts >= self.max_restarts:
            # the stream answered after all while the audio was re-transcribed: not deaf
            return
        found_at = loop_now()
        ctx.race_detected(
            self,
            STT_SILENT,
            details={
                "after_end_of_speech_s": round(found_at - ended, 3),
                "words": words,
                "stt": recognizer.label,
            },
        )
        self.restarts += 1
        ctx.agent.update_options(stt=recognizer)
        ctx.race_handled(
            self,
            STT_SILENT,
            "restarted_stream",
            details={"restart": self.restarts, "after_end_of_speech_s": round(found_at - ended, 3)},
            counts={"stt_restarts": 1, "stt_silent_streams": 1},
        )

    def _on_reconnect(self, error: stt.STTError, *, given_up: bool = False) -> None:
        """A connection lost mid-stream: the stream goes on, the words it was hearing do not.

        A provider socket closed mid-utterance (Deepgram's plugin reconnects on its own)
        takes the words not finalized yet with it; they are re-transcribed from the kept audio.
        """
        ctx = self._ctx
        if ctx is None or (self._recovered_since_final and not given_up):
            return
        # only when the caller spoke since the last final transcript: a connection refused
        # before the caller said anything lost nothing (and a later failure of the same
        # connection, once they speak, may still cost words)
        if not ctx.state.user_spoke_since(self._final_wall):
            return
        if self.recover_words and not _recover_words(ctx, STT_RECONNECTED):
            return
        self._recovered_since_final = True
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


def _refused_at_connect(error: APIError) -> bool:
    """An HTTP error status (a 429 or 503 answering the upgrade): no connection was opened.

    A socket that closed mid-stream carries its close code (1000 and up) or none.
    """
    return isinstance(error, APIStatusError) and 400 <= error.status_code < 600


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
