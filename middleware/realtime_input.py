"""The caller's words over a protected speech reach a realtime model: held, then sent.

On a speech-to-speech model (OpenAI Realtime, Gemini Live) livekit feeds the model silence in
place of the caller's audio while a protected speech plays (a tool's
``ctx.disallow_interruptions()``, a handle made uninterruptible). The model never hears what was
said meanwhile, and a caller who began a sentence just before is answered on its first words:
the server's VAD takes the silence for the end of the turn. Word recovery cannot help, as there
is no STT to re-transcribe with.

:class:`RealtimeInputHold` holds the model's input for exactly as long as livekit withholds the
caller's audio from it (the same test livekit makes, on each frame as it passes): nothing reaches
the model, so its VAD hears neither an end of turn nor a barge-in that would cut the protected
line, and the caller's own audio is kept. When livekit stops withholding (the speech ended or
was interrupted) the kept audio is sent to the model, then the live audio goes on: the model
hears every word, late by the rest of the protected line, and answers them.

The race is reported only on evidence: when the caller's line carried a voice while held
(``ConversationState.caller_voiced_at``, which the session's runtime keeps on a realtime model;
``caller_audio_withheld_from_model``, handled as ``sent_to_model``). On a pipeline session
(no realtime model) the middleware leaves the chain at setup.

AEC warm-up, when livekit also withholds the caller's audio, is not held: that audio carries the
agent's own echo, which the model would hear as a barge-in.

At a handoff (a tool hands the call over while its protected speech plays) the leaving agent's
model closes with its agent: audio still held, or sent to it and not answered before the
handoff, would never be answered. The leaving chain carries it (``ctx.carry``) and the next
agent's ``RealtimeInputHold`` sends it to its own model as it enters, before the live audio
(``sent_to_next_agent``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from livekit import rtc

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    MiddlewareNotUsed,
    OptionChecker,
    SpeechInfo,
    get_logger,
    never_waits,
)

from .session_facts import stt_is_withheld

__all__ = ["CARRY_KEY", "RACE", "RealtimeInputHold"]

RACE = "caller_audio_withheld_from_model"
CARRY_KEY = "RealtimeInputHold.audio"

logger = get_logger("middleware.realtime_input")


@dataclass(frozen=True)
class _CarriedAudio:
    """The caller's audio a leaving agent's model never answered, for the next agent's model.

    Attributes:
        sent: Sent to the leaving model at its last release, not answered since.
        sent_to: The model session ``sent`` went to.
        held: Still held at the handoff: no model heard it.
    """

    sent: tuple[rtc.AudioFrame, ...]
    sent_to: object | None
    held: tuple[rtc.AudioFrame, ...]

    def for_session(self, session: object | None) -> list[rtc.AudioFrame]:
        """What ``session`` has not heard: livekit may hand the leaving session on unchanged."""
        if self.sent_to is not None and session is self.sent_to:
            return list(self.held)
        return [*self.sent, *self.held]


class RealtimeInputHold(Middleware):
    """Holds a realtime model's input while livekit withholds the caller, then sends it all.

    Args:
        max_hold_s: Seconds of caller audio kept at most in one hold; audio past it is not
            kept (and that is logged), so a protected speech that never ends cannot grow the
            buffer without bound.

    Raises:
        OptionError: ``max_hold_s`` is not a number of seconds in range.
    """

    name = "RealtimeInputHold"

    def __init__(self, *, max_hold_s: float = 60.0) -> None:
        check = OptionChecker(self.display_name)
        self.max_hold_s = check.number("max_hold_s", max_hold_s, gt=0, le=600)
        self._ctx: MiddlewareContext | None = None
        self._held_at: float | None = None
        # time.time() of the hold's start, the clock of ConversationState.caller_voiced_at
        self._held_since = 0.0
        self._kept_s = 0.0
        self._dropped_s = 0.0
        self._reported = False
        # audio sent to the model at the last release, until the model answers something
        self._unanswered: list[rtc.AudioFrame] = []
        self._unanswered_to: object | None = None

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Watch the caller's audio, on a session whose active agent runs a realtime model."""
        model_input = ctx.model_input
        if model_input is None or not model_input.available:
            raise MiddlewareNotUsed
        if not ctx.observe_audio(self._on_frame):
            raise MiddlewareNotUsed
        self._ctx = ctx
        carried: _CarriedAudio | None = ctx.take(CARRY_KEY)
        if carried is not None:
            frames = carried.for_session(model_input.session)
            if frames:
                self._send_carried(ctx, frames)

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Stop watching; at a handoff, carry the caller's unanswered audio to the next agent.

        The model held is the leaving agent's (a handoff) or the ending call's: it closes with
        this chain, and has no turn left to answer the audio with. At a handoff the audio still
        held, and the audio sent at the last release that the model has not answered, go to the
        next agent's model; at the end of the call they are dropped (and that logged).
        """
        ctx.stop_observing_audio(self._on_frame)
        held: list[rtc.AudioFrame] = []
        if self._held_at is not None:
            held = self._kept_frames(ctx)
            self._release(ctx, asyncio.get_running_loop().time(), send=False, why=reason)
        carried = _CarriedAudio(tuple(self._unanswered), self._unanswered_to, tuple(held))
        self._unanswered, self._unanswered_to = [], None
        if reason == "handoff" and (carried.sent or carried.held):
            ctx.carry(CARRY_KEY, carried, on_untaken=_dropped_at_handoff)
        self._ctx = None

    @never_waits
    async def on_speech_created(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """The model answers: the audio it was sent is no longer unanswered."""
        self._unanswered, self._unanswered_to = [], None

    @never_waits
    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """The protected speech is over: a hold still on ends, even with no frame to show it."""
        if self._held_at is not None and not stt_is_withheld(ctx.session):
            self._release(ctx, asyncio.get_running_loop().time())

    # -- the audio, frame by frame -------------------------------------------------------------
    def _on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        # shown each frame just before livekit passes it on: livekit's own test, same frame
        ctx = self._ctx
        model_input = ctx.model_input if ctx is not None else None
        if ctx is None or model_input is None:
            return
        if stt_is_withheld(ctx.session):
            if self._held_at is None:
                if not model_input.hold():
                    return
                self._start_hold(now)
            self._keep(ctx, frame, now)
            return
        if self._held_at is not None:
            self._release(ctx, now)

    def _send_carried(self, ctx: MiddlewareContext, frames: list[rtc.AudioFrame]) -> None:
        """The leaving agent's unanswered audio reaches this agent's model, before the live."""
        model_input = ctx.model_input
        if model_input is None or not model_input.hold():
            _dropped_frames(frames)
            return
        for frame in frames:
            model_input.keep(frame)
        seconds = round(sum(f.duration for f in frames), 3)
        if stt_is_withheld(ctx.session):
            # livekit withholds the caller from this agent too: the carried audio waits with
            # what this hold keeps, and goes out at its release
            self._start_hold(asyncio.get_running_loop().time())
            self._kept_s = seconds
            return
        model_input.release()
        ctx.race_handled(self, RACE, "sent_to_next_agent", details={"sent_s": seconds})

    def _start_hold(self, now: float) -> None:
        self._held_at = now
        self._held_since = time.time()
        self._kept_s = self._dropped_s = 0.0
        self._reported = False

    def _keep(self, ctx: MiddlewareContext, frame: rtc.AudioFrame, now: float) -> None:
        model_input = ctx.model_input
        assert model_input is not None and self._held_at is not None
        if self._kept_s + frame.duration > self.max_hold_s:
            # a protected speech this long is the app's choice; the caller is not held forever
            self._dropped_s += frame.duration
            return
        model_input.keep(frame)
        self._kept_s += frame.duration
        if not self._reported and self._caller_heard(ctx):
            self._reported = True
            ctx.race_detected(self, RACE, details=self._details(ctx))

    def _release(
        self, ctx: MiddlewareContext, now: float, *, send: bool = True, why: str = ""
    ) -> None:
        model_input = ctx.model_input
        held_at, self._held_at = self._held_at, None
        if model_input is None or held_at is None:
            return
        voiced = self._reported or self._caller_heard(ctx)
        kept = self._kept_frames(ctx) if send else []
        sent_to = model_input.session
        sent = model_input.release(send=send)
        self._unanswered, self._unanswered_to = kept, sent_to
        details: dict[str, Any] = {
            "held_s": round(now - held_at, 3),
            "sent_s": round(self._kept_s if sent else 0.0, 3),
        }
        if self._dropped_s:
            details["dropped_s"] = round(self._dropped_s, 3)
        if not voiced:
            return
        if not self._reported:
            ctx.race_detected(self, RACE, details=self._details(ctx))
        if not send:
            lost_s = self._kept_s + self._dropped_s
            lost_why = f"the model held closed with its agent ({why}) before it could hear it"
        else:
            lost_s = self._dropped_s
            lost_why = (
                f"a protected speech held the caller longer than max_hold_s "
                f"({self.max_hold_s:g} s): the audio past it was not kept"
            )
        if lost_s:
            logger.warning("caller_audio_dropped", seconds=round(lost_s, 3), why=lost_why)
        if send:
            ctx.race_handled(self, RACE, "sent_to_model", details=details)

    @staticmethod
    def _kept_frames(ctx: MiddlewareContext) -> list[rtc.AudioFrame]:
        model_input = ctx.model_input
        return model_input.kept() if model_input is not None else []

    def _caller_heard(self, ctx: MiddlewareContext) -> bool:
        return ctx.state.caller_voiced_at >= self._held_since

    def _details(self, ctx: MiddlewareContext) -> dict[str, Any]:
        speech = ctx.session.current_speech
        info = ctx.state.speeches.get(speech.id) if speech is not None else None
        return {
            "speech_id": speech.id if speech is not None else None,
            "tool": info.tool if info is not None else None,
        }


def _dropped_at_handoff(carried: _CarriedAudio) -> None:
    _dropped_frames([*carried.sent, *carried.held])


def _dropped_frames(frames: list[rtc.AudioFrame]) -> None:
    seconds = round(sum(f.duration for f in frames), 3)
    logger.warning(
        "caller_audio_dropped",
        seconds=seconds,
        why="the next agent has no realtime model input to send it to",
    )
