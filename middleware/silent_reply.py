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
own answer). A text said again that is silent once more is not repeated: that is reported
(``gave_up``), as is every recovery (race ``silent_reply``). Pipeline sessions only: a realtime
model makes its audio without a ``tts_node``, and nothing is observed.
"""

from __future__ import annotations

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    OptionChecker,
    ReplyAudio,
    SpeechInfo,
    Synthesis,
)

__all__ = ["SILENT_REPLY", "SilentReply"]

SILENT_REPLY = "silent_reply"
"""The race kind a silent reply and its recovery are reported under."""


class SilentReply(Middleware):
    """Says a reply again when the caller heard nothing of it (on by default).

    Args:
        max_repeats: Replies said again per session, at most.
    """

    def __init__(self, *, max_repeats: int = 3) -> None:
        check = OptionChecker(self.display_name)
        self.max_repeats = check.count("max_repeats", max_repeats, ge=0, le=100)
        self.repeated = 0
        self._audio: ReplyAudio | None = None
        self._repeating: set[str] = set()

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Ask for the session's syntheses to be observed."""
        self._audio = ReplyAudio.of(ctx)

    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """Say a finished reply again if nothing of it was audible."""
        if self._audio is None:
            return
        syntheses = self._audio.take(speech.id)
        if speech.handle.interrupted or not _silent(syntheses):
            return
        text = " ".join(s.text.strip() for s in syntheses if s.text.strip())
        dropped = all(s.outcome == "failed" for s in syntheses)
        details = {
            "speech": speech.id,
            "how": "no_audio" if dropped else "silent_audio",
            "audio_s": round(sum(s.audio_s for s in syntheses), 3),
        }
        ctx.race_detected(self, SILENT_REPLY, details=details)
        if speech.id in self._repeating:
            ctx.race_handled(self, SILENT_REPLY, "gave_up", details=details)
            return
        if ctx.state.user_spoke_since(speech.created_at):
            ctx.race_handled(self, SILENT_REPLY, "caller_moved_on", details=details)
            return
        if self.repeated >= self.max_repeats:
            ctx.race_handled(self, SILENT_REPLY, "gave_up", details=details)
            return
        self.repeated += 1
        # livekit recorded a reply it played (silence) as said; one it dropped, not at all
        again = ctx.session.say(text, add_to_chat_ctx=dropped)
        self._repeating.add(again.id)
        ctx.race_handled(
            self, SILENT_REPLY, "said_again", details=details, counts={"silent_replies": 1}
        )


def _silent(syntheses: list[Synthesis]) -> bool:
    """They all ended, had something to say, and made nothing audible."""
    return (
        bool(syntheses)
        and all(s.outcome in ("finished", "failed") and not s.audible for s in syntheses)
        and any(s.silent for s in syntheses)
    )
