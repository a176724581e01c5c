"""A reply the caller heard nothing of is said again, instead of leaving dead air.

Two TTS faults end a reply with no sound and no error the app sees: a synthesis that ends
without a frame (livekit retries it three times, about 5 s, then drops the reply: no assistant
message, the agent back to listening), and one that returns digital silence (played, and
recorded in the history as said in full). Either way the caller waits for an answer that never
comes. :class:`SilentReply` judges each reply once it is done, on evidence only:

* the speech was not interrupted (an interrupted reply is the caller's business);
* its syntheses (the agent's ``tts_node``, observed through :class:`~resilient_agent.ReplyAudio`)
  all ended, had text to say, and not one frame was audible (RMS above ``MIN_AUDIBLE_RMS``,
  about -64 dBFS): a quiet voice is a voice.

The reply's text is then said again (``session.say``; added to the history only when livekit
dropped the reply), unless the caller has spoken since the reply began (their new turn gets its
own answer). A text said again that is silent once more is not repeated, with one exception: a
saying livekit dropped as well (the provider made no frame at all: it refused the connection, or
is down) is said again ``retry_after_s`` later, the wait doubled each time, at most
``max_retries`` times, as long as the caller stays silent: a provider that accepts again is
heard. Never past livekit's budget of consecutive TTS failures
(``conn_options.max_unrecoverable_errors``, 3: one more closes the session, the caller hung up
on): each dropped saying is one, and a saying that could be the one too many is not made. The
count is the session's (:class:`TtsFailureCount`), as livekit's is: a handoff to another agent's
chain does not start it again.
Whenever the words end up not said (given up, or the caller moved on before a saying
made a sound) that is reported with the number of words not said (``words_not_said``), as is
every recovery (race ``silent_reply``). Pipeline sessions only: a realtime model makes its
audio without a ``tts_node``, and nothing is observed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    OptionChecker,
    ReplyAudio,
    SpeechInfo,
    Synthesis,
    get_logger,
    never_waits,
)

from .tts_failure_count import TtsFailureCount

__all__ = ["SILENT_REPLY", "SilentReply"]

SILENT_REPLY = "silent_reply"
"""The race kind a silent reply and its recovery are reported under."""

logger = get_logger("middleware.silent_reply")


@dataclasses.dataclass(frozen=True)
class _Saying:
    """A reply's text said again: what it says, and how many times it was said so far."""

    text: str
    dropped: bool
    times: int = 1


class SilentReply(Middleware):
    """Says a reply again when the caller heard nothing of it (on by default).

    Args:
        max_repeats: Replies said again per session, at most.
        max_retries: Further sayings of a reply whose saying again livekit dropped too (the
            TTS made no frame: refused, or down), at most; each is livekit's own attempts.
        retry_after_s: Seconds to wait before the first further saying, doubled for each next.
    """

    def __init__(
        self, *, max_repeats: int = 3, max_retries: int = 1, retry_after_s: float = 2.0
    ) -> None:
        check = OptionChecker(self.display_name)
        self.max_repeats = check.count("max_repeats", max_repeats, ge=0, le=100)
        self.max_retries = check.count("max_retries", max_retries, ge=0, le=10)
        self.retry_after_s = check.number("retry_after_s", retry_after_s, ge=0.0, le=60.0)
        self.repeated = 0
        self._audio: ReplyAudio | None = None
        self._repeating: dict[str, _Saying] = {}
        self._retries: set[asyncio.TimerHandle] = set()
        self._tts_failures: TtsFailureCount | None = None

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Ask for the session's syntheses to be observed."""
        self._audio = ReplyAudio.of(ctx)
        # livekit's count is the session's, across handoffs: so is the one read here
        self._tts_failures = TtsFailureCount.of(ctx)

    def _may_fail_again(self) -> bool:
        """Whether one more dropped saying leaves the session open (livekit's budget)."""
        return self._tts_failures is None or self._tts_failures.may_fail_again

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Call off the sayings still waiting (the listeners are removed by the core)."""
        for retry in self._retries:
            retry.cancel()
        self._retries.clear()

    @never_waits
    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """Say a finished reply again if nothing of it was audible."""
        if self._audio is None:
            return
        syntheses = self._audio.take(speech.id)
        saying = self._repeating.pop(speech.id, None)
        if speech.handle.interrupted:
            if saying is not None and not any(s.audible for s in syntheses):
                # cut (the caller spoke) before the words said again made a sound: unsaid
                self._not_said(ctx, "interrupted", saying.text, {"speech": speech.id})
            return
        if not _silent(syntheses):
            return
        text = " ".join(s.text.strip() for s in syntheses if s.text.strip())
        dropped = all(s.outcome == "failed" for s in syntheses)
        details = {
            "speech": speech.id,
            "how": "no_audio" if dropped else "silent_audio",
            "audio_s": round(sum(s.audio_s for s in syntheses), 3),
        }
        ctx.race_detected(self, SILENT_REPLY, details=details)
        if saying is not None:
            # dropped again: the provider made no frame; silence played again is not retried
            if dropped and saying.times <= self.max_retries and self._may_fail_again():
                wait = self.retry_after_s * 2 ** (saying.times - 1)
                retry = asyncio.get_running_loop().call_later(
                    wait, self._retry, ctx, saying, time.time()
                )
                self._retries.add(retry)
                return
            self._not_said(ctx, "gave_up", text, {**details, "times": saying.times})
            return
        if ctx.state.user_spoke_since(speech.created_at):
            self._not_said(ctx, "caller_moved_on", text, details)
            return
        if self.repeated >= self.max_repeats or not self._may_fail_again():
            self._not_said(ctx, "gave_up", text, details)
            return
        self.repeated += 1
        # livekit recorded a reply it played (silence) as said; one it dropped, not at all
        again = ctx.session.say(text, add_to_chat_ctx=dropped)
        self._repeating[again.id] = _Saying(text, dropped)
        ctx.race_handled(
            self, SILENT_REPLY, "said_again", details=details, counts={"silent_replies": 1}
        )

    def _retry(self, ctx: MiddlewareContext, saying: _Saying, since: float) -> None:
        """Say a text the TTS made no frame of once more, unless the caller spoke meanwhile."""
        now = asyncio.get_running_loop().time()
        self._retries = {r for r in self._retries if r.when() > now}
        details: dict[str, object] = {"times": saying.times}
        if ctx.state.user_spoke_since(since):
            self._not_said(ctx, "caller_moved_on", saying.text, details)
            return
        if not self._may_fail_again():  # another reply failed meanwhile
            self._not_said(ctx, "gave_up", saying.text, details)
            return
        again = ctx.session.say(saying.text, add_to_chat_ctx=saying.dropped)
        self._repeating[again.id] = dataclasses.replace(saying, times=saying.times + 1)
        ctx.race_handled(self, SILENT_REPLY, "said_again", details={**details, "speech": again.id})

    def _not_said(
        self, ctx: MiddlewareContext, action: str, text: str, details: Mapping[str, object]
    ) -> None:
        """Report that the caller never heard the reply's words (their count, never the text)."""
        words = len(text.split())
        logger.warning("reply_not_said", action=action, words=words)
        ctx.race_handled(self, SILENT_REPLY, action, details={**details, "words_not_said": words})


def _silent(syntheses: list[Synthesis]) -> bool:
    """They all ended, had something to say, and made nothing audible."""
    return (
        bool(syntheses)
        and all(s.outcome in ("finished", "failed") and not s.audible for s in syntheses)
        and any(s.silent for s in syntheses)
    )
