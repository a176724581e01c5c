"""A short line for the caller when the LLM fails attempt after attempt, instead of silence.

An LLM that times out on every attempt leaves the caller in silence: livekit retries inside each
request (``conn_options.max_retry``), the Watchdog asks again when a reply thinks for 6 s without
a sound, and the caller hears nothing for half a minute. :class:`LlmFallback` counts the failed
attempts of the current turn, on evidence only:

* each ``error`` event the LLM reports (one per failed provider attempt, retries included),
  except an attempt refused within ``stalled_s`` of its start that livekit retries (a 429 or a
  503 answered at once: the retry comes 0.1 to 2 s later, and the caller has not waited);
* an inference that ended without a single token, by raising, or abandoned (the Watchdog's
  re-ask, or a cancel) after ``stalled_s`` while the caller stayed silent.

After ``after_failed_attempts`` of them the caller hears ``line`` (a plain ``session.say``), a
reply still thinking without a sound is cut (it never made one), and further inferences for the
same turn are skipped until the caller speaks again. An error livekit does not retry (its last
attempt failed, or the error is not retryable) says the line at once: nothing else answers the
turn. The first token of any inference, or a new turn of the caller, starts the count over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from livekit.agents import llm
from livekit.agents.voice import events as lk_events

from resilient_agent import (
    InferenceNext,
    InferenceRequest,
    Middleware,
    MiddlewareContext,
    OptionChecker,
    get_logger,
    speak_line,
)

from .clock import loop_now

__all__ = ["DEFAULT_FALLBACK_LINE", "LlmFallback"]

logger = get_logger("middleware.llm_fallback")

LLM_KEEPS_FAILING = "llm_keeps_failing"
"""The race kind the failed attempts and the fallback are reported under."""

DEFAULT_FALLBACK_LINE = "Sorry, I'm having trouble right now. Could you say that again in a moment?"


class LlmFallback(Middleware):
    """Says a short line after ``after_failed_attempts`` failed LLM attempts (on by default).

    Args:
        line: What the caller hears.
        after_failed_attempts: Failed attempts of one turn before the line is said.
        stalled_s: An inference abandoned without a token counts as failed only after this long
            (a cancel sooner is livekit's own business: a new turn, a preemptive reply).
    """

    name = "LlmFallback"

    def __init__(
        self,
        *,
        line: str = DEFAULT_FALLBACK_LINE,
        after_failed_attempts: int = 2,
        stalled_s: float = 3.0,
    ) -> None:
        check = OptionChecker(self.display_name)
        self.line = check.text("line", line)
        self.after_failed_attempts = check.count(
            "after_failed_attempts", after_failed_attempts, ge=1, le=20
        )
        self.stalled_s = check.number("stalled_s", stalled_s, ge=0.5, le=60.0)
        self.fallbacks_said = 0
        self._ctx: MiddlewareContext | None = None
        self._failed = 0
        self._first_failure_at: float | None = None
        self._turn: str | None = None
        self._said_this_turn = False
        # done once this turn's fallback line is decided: its replies still waiting for a first
        # token end with nothing to say (made when first needed, on the session's loop)
        self._give_up: asyncio.Future[None] | None = None
        self._provider_errors = 0
        # when the provider attempt under way began (an inference's start, or the last error)
        self._attempt_began: float | None = None

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Listen for the LLM's error events."""
        self._ctx = ctx
        ctx.listen(ctx.session, "error", self._on_error, by=self)

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        """Watch the inference for its first token; skip it when the turn already got the line."""
        turn = _last_user_message_id(request)
        if turn != self._turn:
            # the caller spoke again: the LLM gets a fresh chance
            self._turn = turn
            self._said_this_turn = False
            self._give_up = None
            self._reset()
        if self._said_this_turn:
            logger.info(
                "llm_request_skipped",
                why="the LLM failed this turn and the caller heard the fallback line",
            )
            return None
        result = await call_next(request)
        if isinstance(result, AsyncIterable) and not isinstance(result, str):
            return self._watch(ctx, result)
        return result

    async def _watch(
        self, ctx: MiddlewareContext, stream: AsyncIterable[Any]
    ) -> AsyncIterator[Any]:
        started, started_wall = loop_now(), time.time()
        self._attempt_began = started
        errors_before = self._provider_errors
        give_up = self._turn_given_up()
        iterator = aiter(stream)
        produced = False
        failure: str | None = None
        try:
            # until the first token, the turn's fallback may end the wait: the caller is about
            # to hear the line, and this reply has not made a sound
            while not produced:
                got, chunk = await _next_unless(iterator, give_up)
                if not got:
                    return
                produced = _has_output(chunk)
                yield chunk
            self._reset()
            async for chunk in iterator:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            failure = "abandoned"
            raise
        except Exception:
            failure = "raised"
            raise
        finally:
            # a failure the provider reported was counted when its error event came
            reported = self._provider_errors > errors_before
            if not produced and failure is not None and not reported:
                stalled = loop_now() - started >= self.stalled_s
                caller_spoke = ctx.state.user_spoke_since(started_wall)
                if failure == "raised" or (stalled and not caller_spoke):
                    self._count_failure(ctx, failure)

    def _on_error(self, ev: lk_events.ErrorEvent) -> None:
        if not isinstance(ev.error, llm.LLMError) or self._ctx is None:
            return
        self._provider_errors += 1
        now, began = loop_now(), self._attempt_began
        self._attempt_began = now
        if ev.error.recoverable and began is not None and now - began < self.stalled_s:
            # refused at once and retried by livekit within seconds: not a stall the caller
            # waited through, and the retry may well answer
            logger.info(
                "llm_attempt_refused_and_retried",
                after_s=round(now - began, 3),
                error=str(ev.error.error),
            )
            return
        self._count_failure(self._ctx, "provider_error", given_up=not ev.error.recoverable)

    def _count_failure(self, ctx: MiddlewareContext, how: str, *, given_up: bool = False) -> None:
        now = loop_now()
        if self._first_failure_at is None:
            self._first_failure_at = now
        self._failed += 1
        ctx.race_detected(
            self,
            LLM_KEEPS_FAILING,
            details={"failed_attempts": self._failed, "how": how, "given_up": given_up},
        )
        enough = given_up or self._failed >= self.after_failed_attempts
        if enough and not self._said_this_turn:
            self._said_this_turn = True
            # replies of this turn still waiting for a first token end with nothing to say
            turn_given_up = self._turn_given_up()
            if not turn_given_up.done():
                turn_given_up.set_result(None)
            asyncio.get_running_loop().call_soon(self._say_fallback, ctx, now)

    def _say_fallback(self, ctx: MiddlewareContext, decided_at: float) -> None:
        speak_line(ctx.session, self.line, what="LlmFallback's line")
        self.fallbacks_said += 1
        first = self._first_failure_at if self._first_failure_at is not None else decided_at
        ctx.race_handled(
            self,
            LLM_KEEPS_FAILING,
            "said_fallback_line",
            details={
                "failed_attempts": self._failed,
                "since_first_failure_s": round(decided_at - first, 3),
            },
            counts={"llm_fallback_lines": 1},
        )

    def _turn_given_up(self) -> asyncio.Future[None]:
        """Done once this turn's fallback line is decided (see ``_give_up``)."""
        if self._give_up is None:
            self._give_up = asyncio.get_running_loop().create_future()
        return self._give_up

    def _reset(self) -> None:
        self._failed = 0
        self._first_failure_at = None


def _last_user_message_id(request: InferenceRequest) -> str | None:
    for item in reversed(request.chat_ctx.items):
        if item.type == "message" and item.role == "user":
            return item.id
    return None


async def _next_unless(
    iterator: AsyncIterator[Any], give_up: asyncio.Future[None]
) -> tuple[bool, Any]:
    """``(True, chunk)``; ``(False, None)`` at the end of the stream or once ``give_up`` is done."""
    if give_up.done():
        return False, None
    next_chunk = asyncio.ensure_future(anext(iterator))
    try:
        # a future, waited on as it is: an Event would need a task of its own to wait on it,
        # cancelled at every reply's first token
        await asyncio.wait((next_chunk, give_up), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not next_chunk.done():
            next_chunk.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_chunk
    if next_chunk.cancelled():
        return False, None
    try:
        return True, next_chunk.result()
    except StopAsyncIteration:
        return False, None


def _has_output(chunk: Any) -> bool:
    if isinstance(chunk, str):
        return bool(chunk)
    if isinstance(chunk, llm.ChatChunk):
        delta = chunk.delta
        return delta is not None and bool(delta.content or delta.tool_calls)
    return False
