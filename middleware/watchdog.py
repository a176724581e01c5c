"""Watchdog: recover when the VAD never ends the caller's turn.

A VAD that swallows END_OF_SPEECH, sticks in speech or whose stream stops leaves livekit's
``user_state`` at ``speaking``: the caller's words are never answered, and every interruptible
speech waits for a silence that never comes. The watchdog acts on evidence, not on a timer
alone: the caller is "speaking", yet for ``quiet_s`` the STT has produced nothing and the caller's
audio has been quiet. A caller who talks without a pause keeps producing transcripts and audio
energy, so a long monologue is never cut off.

Recovery uses public levers and escalates, each step logged and reported as a ``race_handled``
event: first the agent's VAD is restarted (``Agent.update_options(vad=...)`` gives it a fresh
stream, and livekit ends the speech the old stream left open), then, if the caller still shows as
speaking, the audio input is switched off and on (``session.input.set_audio_enabled``), which
makes livekit end the turn. After each step the pending transcript is committed
(``session.commit_user_turn``) so livekit answers it and clears it; words the STT never heard
are recovered by the turn keeper.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import utils, vad
from livekit.agents.voice import events as lk_events

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    MiddlewareError,
    RaceDetectedEvent,
    RaceHandledEvent,
)
from resilient_agent.errors import require_in_range
from resilient_agent.log import get_logger

__all__ = ["AudioLevelMeter", "Watchdog"]

logger = get_logger("middleware.watchdog")


class AudioLevelMeter:
    """Remembers when the caller's audio was last louder than a floor (fed by the observer)."""

    def __init__(self, *, floor_rms: float) -> None:
        self._floor_sum_squares = floor_rms * floor_rms
        self._measured_at = float("-inf")
        self.last_loud_at = 0.0
        self.metering = False

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Measure a frame now and then, only while the caller shows as speaking."""
        # against a quiet period of seconds, a look every 50 ms is plenty
        if not self.metering or now - self._measured_at < 0.05:
            return
        self._measured_at = now
        samples = np.frombuffer(frame.data, dtype=np.int16).astype(np.float32)
        if (
            samples.size
            and float(np.dot(samples, samples)) > self._floor_sum_squares * samples.size
        ):
            self.last_loud_at = now


class Watchdog(Middleware):
    """Ends a user turn the VAD never ends (on by default).

    Args:
        quiet_s: Seconds with no transcript and quiet audio while the caller shows as speaking
            before the watchdog acts.
        escalate_after_s: Seconds a recovery step gets before the next one.
        max_recoveries: Recoveries allowed per session (each may take every step).
        floor_rms: Audio level (int16 RMS) below which the caller counts as quiet.
        check_every_s: How often the watchdog looks.
    """

    name = "Watchdog"
    position = "last"

    def __init__(
        self,
        *,
        quiet_s: float = 2.0,
        escalate_after_s: float = 1.0,
        max_recoveries: int = 5,
        floor_rms: float = 300.0,
        check_every_s: float = 0.25,
    ) -> None:
        for option, value, low, high in (
            ("quiet_s", quiet_s, 0.5, 60.0),
            ("escalate_after_s", escalate_after_s, 0.1, 30.0),
            ("max_recoveries", max_recoveries, 1, 100),
            ("floor_rms", floor_rms, 1.0, 10_000.0),
            ("check_every_s", check_every_s, 0.05, 5.0),
        ):
            require_in_range("Watchdog", option, value, low, high)
        if check_every_s >= quiet_s:
            raise MiddlewareError(
                "Watchdog",
                f"check_every_s={check_every_s} is not below quiet_s={quiet_s}",
                fix="check more often than the quiet period you wait for",
                hook="check_every_s",
            )
        self.quiet_s = quiet_s
        self.escalate_after_s = escalate_after_s
        self.max_recoveries = max_recoveries
        self.floor_rms = floor_rms
        self.check_every_s = check_every_s
        self._meter: AudioLevelMeter | None = None
        self._speaking_since: float | None = None
        self._last_transcript_at = 0.0
        self._recoveries = 0
        self._task: asyncio.Task[None] | None = None
        self._ctx: MiddlewareContext | None = None
        self._speaking = asyncio.Event()
        self.recovery_log: list[dict[str, Any]] = []

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Meter the caller's audio and start watching."""
        self._ctx = ctx
        self._speaking = asyncio.Event()
        meter = AudioLevelMeter(floor_rms=self.floor_rms)
        if ctx.observe_audio(meter.on_frame):
            self._meter = meter
        self._task = asyncio.get_running_loop().create_task(
            self._watch(ctx), name="resilient_agent.watchdog"
        )

    async def aclose(self) -> None:
        """Stop watching and hand the audio input back."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        """Note when the caller started speaking; watch only while they do."""
        speaking = ev.new_state == "speaking"
        self._speaking_since = _now() if speaking else None
        if self._meter is not None:
            self._meter.metering = speaking
        if speaking:
            self._speaking.set()

    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Transcripts are evidence the caller is really talking."""
        self._last_transcript_at = _now()

    async def _watch(self, ctx: MiddlewareContext) -> None:
        while True:
            if ctx.state.user_state != "speaking":
                self._speaking.clear()
                await self._speaking.wait()
            await asyncio.sleep(self.check_every_s)
            if self._stuck_for(ctx) >= self.quiet_s and self._recoveries < self.max_recoveries:
                self._recoveries += 1
                await self._recover(ctx)

    def _stuck_for(self, ctx: MiddlewareContext) -> float:
        """Seconds the caller has shown as speaking with no sign of speech; 0 if not stuck."""
        if ctx.state.user_state != "speaking" or self._speaking_since is None:
            return 0.0
        last_sign = max(self._speaking_since, self._last_transcript_at)
        if self._meter is not None:
            last_sign = max(last_sign, self._meter.last_loud_at)
        return _now() - last_sign

    async def _recover(self, ctx: MiddlewareContext) -> None:
        detected_at = _now()
        quiet_for = round(self._stuck_for(ctx), 2)
        ctx.emit(
            RaceDetectedEvent(
                kind="user_turn_stuck",
                middleware=self.display_name,
                details={"quiet_s": quiet_for},
            )
        )
        logger.warning("user_turn_stuck", quiet_s=quiet_for, action="ending_the_turn")
        for action in ("restarted_vad", "forced_end_of_speech"):
            if action == "restarted_vad" and not _restart_vad(ctx):
                continue
            if action == "forced_end_of_speech":
                ctx.session.input.set_audio_enabled(False)
                ctx.session.input.set_audio_enabled(True)
            # the turn livekit just ended still holds its transcript: commit it, so livekit
            # answers it and clears it (the words must not come back in the next turn)
            with contextlib.suppress(RuntimeError):
                # quiet_s without a transcript passed already: no final is still on its way
                ctx.session.commit_user_turn(transcript_timeout=0.2, stt_flush_duration=0.2)
            await asyncio.sleep(self.escalate_after_s)
            recovered = ctx.state.user_state != "speaking"
            record = {
                "action": action,
                "recovered": recovered,
                "after_s": round(_now() - detected_at, 2),
            }
            self.recovery_log.append(record)
            ctx.emit(
                RaceHandledEvent(
                    kind="user_turn_stuck",
                    action=action,
                    middleware=self.display_name,
                    details={"recovered": recovered, "quiet_s": quiet_for},
                )
            )
            if recovered:
                return
        logger.error("user_turn_stuck_unrecovered", steps=len(self.recovery_log))


def _now() -> float:
    # loop time: the clock the shared audio observer stamps frames with
    return asyncio.get_running_loop().time()


def _restart_vad(ctx: MiddlewareContext) -> bool:
    """Give the agent's VAD a fresh stream; livekit ends the speech the old one left open."""
    agent_vad = getattr(ctx.agent, "vad", None)
    current = agent_vad if utils.is_given(agent_vad) and agent_vad is not None else ctx.session.vad
    if not isinstance(current, vad.VAD):
        return False
    ctx.agent.update_options(vad=current)
    return True
