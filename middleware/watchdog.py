"""Watchdog: recover a call that stalled, on evidence, with public levers.

Four stalls are watched (see :mod:`.stall_evidence` for the evidence of each): a caller turn the
VAD never ends, an interruptible speech waiting for a silence that does not come, the agent
``thinking`` with nothing to say, and an interrupted speech that is not done. A caller who talks
without a pause keeps producing transcripts and audio energy, and a long tool is not a current
speech, so neither is ever cut off.

Recovery escalates, and each step is logged and reported as a ``race_handled`` event:

* stuck turn: restart the agent's VAD (``Agent.update_options(vad=...)`` gives it a fresh stream
  and livekit ends the speech the old one left open), then switch the audio input off and on
  (``session.input.set_audio_enabled``), which makes livekit end the turn; when the STT's final
  transcript is in, the turn is committed (``session.commit_user_turn``) so livekit answers it
  at once. An interim transcript is never committed: words the STT has not finished are left to
  livekit's own end of turn;
* speech waiting for silence: protect that speech (the "speech" holding it has no words, and
  would cut it again), then end the caller's turn with the same two steps;
* thinking without speech: interrupt the stalled reply and ask for it again
  (``session.generate_reply()``; the caller's message is already in the history); a stalled
  ``say`` cannot be replayed, so it is only reported;
* interrupted speech not done: when the audio output lost its playout report, report it on the
  output's behalf (``AudioOutput.on_playback_finished``); a speech waiting for a running tool is
  only reported (the tool guard owns tools, and livekit's 5 s timeout stays the backstop).

Every recovery counts against ``max_recoveries`` per kind, so a broken component cannot make the
watchdog loop.

A handoff does not pause the watch on the caller's turn: the session's runtime keeps the leaving
agent's chain running while livekit drains its activity, so a stuck turn is still found and
recovered (the VAD is restarted on the draining agent).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import Counter
from typing import Any, NamedTuple

from livekit.agents import stt, utils, vad
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    OptionChecker,
    SpeechInfo,
    get_logger,
    never_waits,
)

from .audio_level import AudioLevelMeter
from .clock import loop_now
from .playout_ledger import PlayoutLedger, playout_ledger_supported
from .session_facts import stt_withheld_for
from .stall_evidence import CAUSE_PLAYOUT, Stall, StallEvidence, StallKind, StallThresholds
from .word_recovery import WordRecovery

__all__ = ["AudioLevelMeter", "Watchdog"]

VAD_CUT_STT_WORDS = "stuck_vad_withheld_words"
"""The race kind the words a stuck VAD kept from a non-streaming STT are recovered under."""

# How long a handoff lets a recovery under way finish (inside aclose's 5 s budget).
_FINISH_RECOVERY_S = 4.0

logger = get_logger("middleware.watchdog")

# A look due within this much of a change, before it, is taken after it: the looks' timers fire
# after the frames and events of their instant (the lab's clock nudges them apart by nanoseconds).
_SAME_INSTANT_S = 1e-4
# The final transcript is in when a turn is committed: livekit need not wait for another one.
_FINAL_IS_IN_S = 0.05
# How many stalls nothing can be done about are remembered, so that each is reported once.
_REPORTED_KEPT = 64


class _LookSchedule(enum.Enum):
    """Where the watch's next look stands.

    A watch that looked every ``check_every_s`` while something could stall found the stalls;
    this one finds the same ones at the same times with the looks that can find or note
    something: the others are skipped, and what they would have noted is noted when the next
    change comes (:meth:`StallEvidence.passed_look`). A look is skipped only while every change
    that could make one find or note something comes with an event the watch hears (the
    session's ``user_state_changed``, ``agent_state_changed``, ``speech_created`` and
    ``user_input_transcribed``, and the line going quiet, from the meter).
    """

    ARMED = "armed"
    """A timer is set for the next look."""
    ASLEEP = "asleep"
    """The last look found the call quiet: the next comes ``check_every_s`` after a change that
    puts the call at risk."""
    PENDING = "pending"
    """A look is due at ``_look_at``, and the call is idle (quiet, with no live speech): that
    look would find it quiet unless something changes first, and is taken only then."""
    DORMANT = "dormant"
    """The caller speaks, with no live speech and no evidence building up: the looks are due
    every ``check_every_s`` from ``_look_at`` on, and none can find or note anything before
    the next change."""


class _Look(NamedTuple):
    """A stall one look found, when, and whether untranscribed speech was livekit's then."""

    stall: Stall
    at: float
    leave_untranscribed: bool


class Watchdog(Middleware):
    """Recovers stalled calls (on by default).

    Args:
        quiet_s: Seconds of a quiet line, after the caller's voice was heard, while they still
            show as speaking and no final transcript came after their words, before their turn
            counts as stuck. With the final transcript in, the VAD's own silence window plus
            ``stuck_margin_s`` is enough.
        speech_wait_s: Seconds an interruptible speech may wait for a caller who "speaks" words
            the STT does not hear before it is played, protected.
        thinking_s: Seconds the agent may be ``thinking`` with a current speech, no running tool
            and a silent caller before the reply is asked for again.
        interrupted_done_s: Seconds an interrupted speech may take to be done before the
            watchdog looks at why (livekit gives up at 5 s).
        escalate_after_s: Seconds a recovery step gets before the next one.
        max_recoveries: Recoveries allowed per kind of stall and session.
        floor_rms: Kept so existing code runs; no longer used: a quiet line is judged against
            the caller's own voice in the turn, at any line gain (an absolute floor took a
            low-gain line for silence).
        check_every_s: How often the watchdog looks.
        vad_silence_s: The VAD's silence window before it ends speech, used when the VAD does
            not say (livekit's ``inference.VAD`` has a public ``min_silence_duration``).
        stuck_margin_s: Quiet beyond the VAD's silence window, with the final transcript in,
            before a turn counts as stuck.
        noise_turn_s: Seconds without a word after the caller's final transcript, while the
            VAD still hears them (noise on a loud line), before their turn is ended.
    """

    name = "Watchdog"
    position = "last"

    def __init__(
        self,
        *,
        quiet_s: float = 1.2,
        speech_wait_s: float = 3.0,
        thinking_s: float = 6.0,
        interrupted_done_s: float = 1.0,
        escalate_after_s: float = 1.0,
        max_recoveries: int = 5,
        floor_rms: float = 300.0,
        check_every_s: float = 0.25,
        vad_silence_s: float = 0.55,
        stuck_margin_s: float = 0.25,
        noise_turn_s: float = 2.0,
    ) -> None:
        check = OptionChecker(self.display_name)
        quiet_s = check.number("quiet_s", quiet_s, ge=0.5, le=60.0)
        speech_wait_s = check.number("speech_wait_s", speech_wait_s, ge=0.5, le=120.0)
        thinking_s = check.number("thinking_s", thinking_s, ge=1.0, le=120.0)
        # livekit force-cancels an interrupted speech at 5 s; look before it does
        interrupted_done_s = check.number("interrupted_done_s", interrupted_done_s, ge=0.2, le=4.5)
        escalate_after_s = check.number("escalate_after_s", escalate_after_s, ge=0.1, le=30.0)
        max_recoveries = check.count("max_recoveries", max_recoveries, ge=1, le=100)
        floor_rms = check.number("floor_rms", floor_rms, ge=1.0, le=10_000.0)
        check_every_s = check.number("check_every_s", check_every_s, ge=0.05, le=5.0)
        vad_silence_s = check.number("vad_silence_s", vad_silence_s, ge=0.05, le=10.0)
        stuck_margin_s = check.number("stuck_margin_s", stuck_margin_s, ge=0.1, le=10.0)
        noise_turn_s = check.number("noise_turn_s", noise_turn_s, ge=0.5, le=60.0)
        shortest = min(quiet_s, speech_wait_s, thinking_s, interrupted_done_s)
        if check_every_s >= shortest:
            check.fail(
                "check_every_s",
                check_every_s,
                f"is not below the shortest threshold ({shortest})",
                fix="check more often than the shortest period you wait for",
            )
        self.thresholds = StallThresholds(
            quiet_s=quiet_s,
            speech_wait_s=speech_wait_s,
            thinking_s=thinking_s,
            interrupted_done_s=interrupted_done_s,
            vad_silence_s=vad_silence_s,
            stuck_margin_s=stuck_margin_s,
            noise_turn_s=noise_turn_s,
        )
        self.escalate_after_s = escalate_after_s
        self.max_recoveries = max_recoveries
        self.floor_rms = floor_rms
        self.check_every_s = check_every_s
        self._evidence = StallEvidence(self.thresholds, None)
        self._ledger: PlayoutLedger | None = None
        self._recoveries: Counter[StallKind] = Counter()
        self._reported: dict[tuple[StallKind, str], None] = {}
        self._gave_up: set[StallKind] = set()
        self._task: asyncio.Task[None] | None = None
        self._recovering = False
        self._closing = False
        self._next_look: asyncio.TimerHandle | None = None
        self._found: asyncio.Future[_Look] | None = None
        self._schedule = _LookSchedule.ASLEEP
        self._look_at = 0.0
        self._wait = check_every_s
        self._ctx: MiddlewareContext | None = None
        self.recovery_log: list[dict[str, Any]] = []

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Meter the caller's audio, count playout reports and start watching."""
        self._ctx = ctx
        self._recovering = self._closing = False
        self._found = None
        self._schedule = _LookSchedule.ASLEEP
        # the session's one meter, shared with every middleware that reads the line's level
        meter = AudioLevelMeter.of(ctx)
        self._evidence = StallEvidence(self.thresholds, meter)
        self._evidence.read_vad_silence = lambda: _vad_silence_window(ctx)
        self._evidence.read_leave_untranscribed = lambda: _leave_untranscribed(ctx)
        self._evidence.agent_state_changed(loop_now())
        if meter is not None:
            meter.notify_quiet(self._line_went_quiet)
        self._follow_audio_output(ctx)
        self._task = asyncio.get_running_loop().create_task(
            self._watch(ctx), name="resilient_agent.watchdog"
        )

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Stop watching (the next agent's Watchdog watches from its setup on).

        On a handoff a recovery under way finishes first (it is bounded, and judges its steps
        by the caller's state), is reported, and then the watch ends.
        """
        task = self._task
        if reason == "handoff" and self._recovering and task is not None:
            self._closing = True
            await asyncio.wait({task}, timeout=_FINISH_RECOVERY_S)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._stop_looking()
        if self._evidence.meter is not None:
            self._evidence.meter.stop_notifying_quiet(self._line_went_quiet)
        if self._ledger is not None:
            self._ledger.detach()
            self._ledger = None
        self._ctx = None

    @never_waits
    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        """Note when the caller started speaking."""
        speaking = ev.new_state == "speaking"
        self._evidence.user_state_changed(speaking, loop_now())
        self._changed(ctx, at_risk=speaking)

    @never_waits
    async def on_agent_state(
        self, ctx: MiddlewareContext, ev: lk_events.AgentStateChangedEvent
    ) -> None:
        """Note when the agent started thinking or speaking."""
        self._evidence.agent_state_changed(loop_now())
        # an interrupted speech shows as a change of state too: look again at every change
        self._changed(ctx, at_risk=True)

    @never_waits
    async def on_speech_created(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A live speech can stall."""
        self._changed(ctx, at_risk=True)

    @never_waits
    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Transcripts are evidence the caller is really talking."""
        self._evidence.transcript(loop_now(), final=ev.is_final)
        if ev.is_final:
            # livekit interrupts the current speech on a final transcript; a non-streaming STT's
            # comes after the caller stopped, with the speech already paused: no state changes
            self._changed(ctx, at_risk=self._quiet(ctx) and _speech_to_interrupt(ctx))
        elif self._schedule is _LookSchedule.DORMANT:
            meter = self._evidence.meter
            if meter is not None and meter.quiet_since is not None:
                # a turn's first words can make a quiet line evidence (transcription_timeout)
                self._changed(ctx, at_risk=False)

    def _follow_audio_output(self, ctx: MiddlewareContext) -> None:
        output = ctx.session.output.audio
        if self._ledger is not None and self._ledger.output is output:
            return
        if self._ledger is not None:
            self._ledger.detach()
        # without livekit's segment count the ledger is off, the other stalls are still watched
        supported = output is not None and playout_ledger_supported(output)
        self._ledger = (
            PlayoutLedger(ctx, self, output, loop_now) if output is not None and supported else None
        )

    def _quiet(self, ctx: MiddlewareContext, interrupted_live: bool | None = None) -> bool:
        """Whether nothing can stall right now: every stall needs one of these to hold.

        ``interrupted_live``: whether an interrupted speech is not done, when already known.
        """
        state = ctx.state
        if state.user_state == "speaking" or state.agent_state == "thinking":
            return False
        if interrupted_live is not None:
            return not interrupted_live
        return not any(
            info.handle.interrupted and not info.handle.done() for info in state.speeches.values()
        )

    async def _watch(self, ctx: MiddlewareContext) -> None:
        loop = asyncio.get_running_loop()
        wait = self.check_every_s
        while True:
            # the looks run in timer callbacks, armed and re-armed by the session's events
            # (see _LookSchedule): the task wakes only to recover from a stall
            found: asyncio.Future[_Look] = loop.create_future()
            self._found = found
            if self._quiet(ctx):
                self._schedule = _LookSchedule.ASLEEP
                self._wait = wait
            else:
                self._arm(ctx, loop.time() + wait)
            try:
                look = await found
            finally:
                self._found = None
                self._stop_looking()
            self._recovering = True
            try:
                await self._handle(ctx, look.stall)
            finally:
                self._recovering = False
            if self._closing:
                return  # a handoff waited for this recovery: the next Watchdog goes on
            wait = self._next_wait(ctx, look.at, look.leave_untranscribed)

    def _arm(self, ctx: MiddlewareContext, at: float) -> None:
        found = self._found
        assert found is not None
        self._schedule = _LookSchedule.ARMED
        self._next_look = asyncio.get_running_loop().call_at(at, self._look, ctx, found)

    def _changed(self, ctx: MiddlewareContext, *, at_risk: bool) -> None:
        """Something the looks read changed: arm the look a watch looking all along would take.

        ``at_risk``: the change can start a stall while the call is quiet (the watch looks
        again ``check_every_s`` after it).
        """
        schedule = self._schedule
        if schedule is _LookSchedule.ARMED:
            return
        found = self._found
        if found is None or found.done():
            return  # recovering, or not watching
        now = loop_now()
        at = self._look_at
        if schedule is _LookSchedule.DORMANT:
            # a look at the instant of the change came after it (as the looks' timers do)
            until = now - _SAME_INSTANT_S
            if at < until:
                # looks nothing could come of: each noted the same, so the last one's notes
                # are theirs (the grid stepped as the looks' timers stepped it)
                step = self.check_every_s
                while True:
                    passed = at
                    at += step
                    if at >= until:
                        break
                self._evidence.passed_look(passed)
        elif schedule is _LookSchedule.PENDING and at < now - _SAME_INSTANT_S:
            # that look found the call quiet, and the watch slept until a change put it at risk
            self._evidence.passed_look(at)
            self._schedule = schedule = _LookSchedule.ASLEEP
            self._wait = self.check_every_s
        if schedule is _LookSchedule.ASLEEP:
            if not at_risk:
                return
            at = now + self._wait
        if self._idle(ctx):
            self._schedule = _LookSchedule.PENDING
            self._look_at = at
        elif self._dormant(ctx, ctx.session.current_speech) and self._nothing_building_up():
            # the look due at ``at`` would find nothing, and the watch would go dormant
            self._schedule = _LookSchedule.DORMANT
            self._look_at = at
        else:
            self._arm(ctx, at)

    def _nothing_building_up(self) -> bool:
        """Whether no stuck turn and no noise can be building up (what a look computes)."""
        evidence = self._evidence
        meter = evidence.meter
        return (meter is None or meter.quiet_since is None) and not (
            evidence.interims_heard and evidence.final_transcript_in
        )

    def _line_went_quiet(self) -> None:
        """The meter found the caller's line quiet: a stuck turn's evidence starts building up."""
        ctx = self._ctx
        if self._schedule is not _LookSchedule.DORMANT or ctx is None:
            return
        try:
            self._changed(ctx, at_risk=False)
        except Exception as exc:  # the watch task raises it, as it does a look's
            if self._found is not None and not self._found.done():
                self._found.set_exception(exc)

    def _idle(self, ctx: MiddlewareContext) -> bool:
        """Quiet, with no live speech that could be interrupted without a change of state."""
        return self._quiet(ctx) and _nothing_live(ctx)

    def _dormant(
        self, ctx: MiddlewareContext, speech: SpeechHandle | None, speech_live: bool | None = None
    ) -> bool:
        """Whether no look can find a stall, or note anything, before an event wakes the watch.

        The events are those :class:`_LookSchedule` lists. ``speech_live``: whether a speech of
        the session's is live (created, not done), when already known.
        """
        state = ctx.state
        evidence = self._evidence
        return (
            state.user_state == "speaking"
            and state.agent_state != "thinking"
            and state.agent_state != "speaking"
            and evidence.last_turn_stuck_due is None
            and not (evidence.interims_heard and evidence.final_transcript_in)
            and (speech is None or speech.done())
            and (not speech_live if speech_live is not None else _nothing_live(ctx))
        )

    def _look(self, ctx: MiddlewareContext, found: asyncio.Future[_Look]) -> None:
        """One look for a stall; the next one is due ``check_every_s`` later, or sooner."""
        self._next_look = None
        if found.done():
            return
        try:
            ledger = self._ledger
            if ledger is None or ledger.output is not ctx.session.output.audio:
                self._follow_audio_output(ctx)
            evidence = self._evidence
            state = ctx.state
            evidence.server_turns = state.server_turns
            now = loop_now()
            speech = ctx.session.current_speech
            agent_state = state.agent_state
            if agent_state == "speaking" or stt_withheld_for(ctx.session, speech):
                evidence.stt_deaf_at = now
            stall = evidence.find(now, state, speech, self._ledger)
            if stall is not None:
                found.set_result(_Look(stall, now, _leave_untranscribed(ctx)))
                return
            wait = self._wait_after(now, evidence.last_turn_stuck_due)
            # what find() saw of the live speeches decides the schedule: no second walk of them
            if self._quiet(ctx, evidence.interrupted_live):
                self._schedule = _LookSchedule.ASLEEP
                self._wait = wait
            elif self._dormant(ctx, speech, evidence.speech_live):
                self._schedule = _LookSchedule.DORMANT
                self._look_at = now + wait
            else:
                # call_later's own arithmetic, without its frame: a look runs about every 0.25 s
                self._next_look = asyncio.get_running_loop().call_at(
                    now + wait, self._look, ctx, found
                )
        except Exception as exc:  # the watch task raises it, as it would have in a sleep loop
            found.set_exception(exc)

    def _next_wait(self, ctx: MiddlewareContext, now: float, leave_untranscribed: bool) -> float:
        due = self._evidence.user_turn_stuck_due(ctx.state, leave_untranscribed=leave_untranscribed)
        return self._wait_after(now, due)

    def _wait_after(self, now: float, due: tuple[float, float] | None) -> float:
        """The wait before the next look, given when a stuck turn would be due."""
        wait = self.check_every_s
        if due is not None and due[0] > now:
            # evidence is building up: look again exactly when it will be enough
            wait = min(wait, due[0] - now)
        return wait

    def _stop_looking(self) -> None:
        self._schedule = _LookSchedule.ASLEEP
        if self._next_look is not None:
            self._next_look.cancel()
            self._next_look = None

    async def _handle(
        self, ctx: MiddlewareContext, stall: Stall, evidence: StallEvidence | None = None
    ) -> None:
        evidence = evidence or self._evidence
        actionable = stall.kind != "interrupted_speech_not_done" or stall.cause == CAUSE_PLAYOUT
        if actionable and self._recoveries[stall.kind] >= self.max_recoveries:
            if stall.kind not in self._gave_up:
                self._gave_up.add(stall.kind)
                self._report(ctx, stall)
                logger.error(
                    "watchdog_gave_up",
                    kind=stall.kind,
                    recoveries=self.max_recoveries,
                    why="max_recoveries reached for this kind of stall in this session",
                )
            return
        if not actionable:
            # nothing to do about it: reported once, not at every look
            key = (stall.kind, stall.speech.id if stall.speech is not None else "")
            if key not in self._reported:
                self._reported[key] = None
                if len(self._reported) > _REPORTED_KEPT:
                    del self._reported[next(iter(self._reported))]
                self._report(ctx, stall)
            return
        self._report(ctx, stall)
        self._recoveries[stall.kind] += 1
        if stall.kind == "user_turn_stuck":
            # only the STT's final words are committed, never an interim
            await self._end_user_turn(ctx, stall, evidence, commit=evidence.final_transcript_in)
        elif stall.kind == "turn_held_by_noise":
            # the STT's words are final: commit them, whatever the VAD hears
            await self._end_user_turn(ctx, stall, evidence, commit=True)
        elif stall.kind == "speech_waits_for_silence":
            await self._play_waiting_speech(ctx, stall)
        elif stall.kind == "thinking_without_speech":
            await self._ask_again(ctx, stall)
        else:
            await self._release_playout(ctx, stall)

    def _report(self, ctx: MiddlewareContext, stall: Stall) -> None:
        ctx.race_detected(
            self, stall.kind, details=stall.details(), counts={"watchdog_recoveries": 1}
        )

    def _record(self, ctx: MiddlewareContext, stall: Stall, action: str, recovered: bool) -> None:
        record = {"kind": stall.kind, "action": action, "recovered": recovered}
        self.recovery_log.append(record)
        ctx.race_handled(
            self, stall.kind, action, details={"recovered": recovered, **stall.details()}
        )

    async def _end_user_turn(
        self,
        ctx: MiddlewareContext,
        stall: Stall,
        evidence: StallEvidence,
        *,
        commit: bool,
        speech: SpeechHandle | None = None,
    ) -> None:
        """Restart the VAD, then force the end of speech, until the stall is gone."""
        for action in ("restarted_vad", "forced_end_of_speech"):
            acted_at = loop_now()
            # without a commit, no turn of livekit's carries words recovered at the restart
            if action == "restarted_vad" and not _restart_vad(ctx, words_are_turn=not commit):
                continue
            if action == "forced_end_of_speech":
                ctx.session.input.set_audio_enabled(False)
                ctx.session.input.set_audio_enabled(True)
            if commit:
                # the turn livekit just ended holds the STT's final words: commit it, so livekit
                # answers it now and clears it (the words must not come back in the next turn)
                with contextlib.suppress(RuntimeError):
                    ctx.session.commit_user_turn(
                        transcript_timeout=_FINAL_IS_IN_S, stt_flush_duration=_FINAL_IS_IN_S
                    )
                commit = False
            await asyncio.sleep(self.escalate_after_s)
            if speech is not None:
                recovered = speech.done() or ctx.state.agent_state == "speaking"
            else:
                # a caller who started speaking again since is a new turn the VAD saw begin:
                # cutting it off would lose its words
                started = evidence.speaking_since
                new_turn = started is not None and started >= acted_at
                recovered = ctx.state.user_state != "speaking" or new_turn
            self._record(ctx, stall, action, recovered)
            if recovered:
                return
        logger.error(f"{stall.kind}_unrecovered", **stall.details())

    async def _play_waiting_speech(self, ctx: MiddlewareContext, stall: Stall) -> None:
        speech = stall.speech
        assert speech is not None
        with contextlib.suppress(RuntimeError):
            # whatever holds the speech back has no words, and would cut it again
            speech.allow_interruptions = False
        self._record(ctx, stall, "protected_waiting_speech", speech.done())
        await self._end_user_turn(ctx, stall, self._evidence, commit=False, speech=speech)

    async def _ask_again(self, ctx: MiddlewareContext, stall: Stall) -> None:
        speech = stall.speech
        assert speech is not None
        info = ctx.state.speeches.get(speech.id)
        if info is None or info.source != "generate_reply":
            logger.warning(
                "stalled_speech_left_alone",
                speech_id=speech.id,
                why="a say() cannot be replayed: its text is not public",
            )
            return
        # the stalled reply never played a sound: nothing the caller hears is cut
        speech.interrupt(force=True)
        ctx.session.generate_reply()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(speech.wait_for_playout()), self.escalate_after_s)
        self._record(ctx, stall, "asked_for_the_reply_again", speech.done())

    async def _release_playout(self, ctx: MiddlewareContext, stall: Stall) -> None:
        speech = stall.speech
        assert speech is not None
        released = self._ledger is not None and self._ledger.report_cleared_segment()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(speech.wait_for_playout()), self.escalate_after_s)
        self._record(ctx, stall, "reported_playout_for_output", released and speech.done())


def _session_vad(ctx: MiddlewareContext) -> vad.VAD | None:
    agent_vad = getattr(ctx.agent, "vad", None)
    current = agent_vad if utils.is_given(agent_vad) and agent_vad is not None else ctx.session.vad
    return current if isinstance(current, vad.VAD) else None


def _leave_untranscribed(ctx: MiddlewareContext) -> bool:
    """Speech without a transcript is livekit's when the app asked it to handle it."""
    return ctx.session.options.transcription_timeout is not None


def _vad_silence_window(ctx: MiddlewareContext) -> float | None:
    """The VAD's own silence window, when it says (a public ``min_silence_duration``)."""
    window = getattr(_session_vad(ctx), "min_silence_duration", None)
    return float(window) if isinstance(window, (int, float)) and window > 0 else None


def _restart_vad(ctx: MiddlewareContext, *, words_are_turn: bool) -> bool:
    """Give the agent's VAD a fresh stream; livekit ends the speech the old one left open.

    A non-streaming STT hears through a ``StreamAdapter`` that cuts the caller's audio with a
    VAD stream of its own: that one is as stuck as the agent's, so the STT gets a fresh stream
    too, and the words its stuck VAD never handed over are re-transcribed from the kept audio.
    With ``words_are_turn`` (no turn is committed after the restart) they are the turn livekit
    ends with no transcript, and are answered as it (as the committed turn of a streaming STT
    is: the app's ``on_user_turn_completed`` runs); else the committed turn takes them in.
    """
    current = _session_vad(ctx)
    if current is None:
        return False
    ctx.agent.update_options(vad=current)
    recognizer = _session_stt(ctx)
    if recognizer is not None and not recognizer.capabilities.streaming:
        ctx.agent.update_options(stt=recognizer)
        recovery = ctx.service(WordRecovery)
        if recovery is not None:
            recovery.recover_unheard_audio(ctx, kind=VAD_CUT_STT_WORDS, as_turn=words_are_turn)
    return True


def _session_stt(ctx: MiddlewareContext) -> stt.STT[Any] | None:
    agent_stt = getattr(ctx.agent, "stt", None)
    current = agent_stt if utils.is_given(agent_stt) and agent_stt is not None else ctx.session.stt
    return current if isinstance(current, stt.STT) else None


def _nothing_live(ctx: MiddlewareContext) -> bool:
    """No speech is live: none can be interrupted, wait or become current without an event."""
    speech = ctx.session.current_speech
    return (speech is None or speech.done()) and not any(
        not info.handle.done() for info in ctx.state.speeches.values()
    )


def _speech_to_interrupt(ctx: MiddlewareContext) -> bool:
    """Whether a speech is live that livekit may interrupt: an interruptible one, not done."""
    return any(
        not info.handle.done() and info.handle.allow_interruptions
        for info in ctx.state.speeches.values()
    )
