"""A protected speech never starts over a speaking caller: it waits, bounded, for them to stop.

Since livekit-agents 1.3.11 only interruptible speeches wait for the caller's silence before they
play; a speech that disallows interruptions (``say(..., allow_interruptions=False)``, or a tool's
``ctx.disallow_interruptions()``) starts at once, over a caller who is still talking. Making it
interruptible while it waits is no way out: livekit's VAD would interrupt it, and the hold
message or farewell would be lost.

:class:`WaitForCaller` holds the speech's audio instead, with the public ``AudioOutput.pause()``:
when livekit begins to play a protected speech while the caller is speaking, the output is paused
and resumed when the caller stops (``user_state`` leaves ``speaking``; on a realtime model whose
server detects turns, whose events are no word on the caller, their line carries no voice for
``VOICE_GAP_S``) or after ``wait_s``. Past
the bound, a caller still *saying words* (the session's STT keeps hearing new ones: see
:mod:`.caller_words`) is waited for on, up to ``max_wait_s``; a line that is only loud (noise, a
stuck VAD) is not. Then ``past_bound`` decides: ``"speak"`` plays the speech anyway, ``"skip"``
interrupts it (``force=True``) so the caller's turn is answered instead.

The hold starts on the output's ``playback_started``, the instant the first frame reaches the
sink (RoomIO emits it just before queueing that frame). It cannot start earlier: livekit
reconciles its own false-interruption pause right before forwarding a speech's first frame, and
for a protected speech that means ``resume()``, which would undo an earlier pause.

livekit's false-interruption pause only ever concerns interruptible speeches, with one exit into
protection: a tool's ``ctx.disallow_interruptions()`` on a speech livekit paused for the caller
releases that pause and *resumes* the speech, now protected, over a caller who may still be
talking. The chain asks :meth:`WaitForCaller.decide_resume` right after livekit's own call
(see :mod:`resilient_agent._livekit.speech_gates`), which holds such a speech the same way
(reported with ``"on": "resume"``; a hold at the first frame is ``"on": "start"``). See
docs/first-party-middleware.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from livekit.agents.voice import events as lk_events
from livekit.agents.voice.io import AudioOutput
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    OptionChecker,
    ResumeDecision,
    ResumeRequest,
    SpeechInfo,
    get_logger,
    never_waits,
)

from .audio_level import AudioLevelMeter
from .caller_words import WORDS_RECENT_S, CallerWords
from .clock import loop_now
from .session_facts import stt_is_withheld
from .wait_options import DEFAULT_MAX_WAIT_S, PastBound, WaitOptions, checked_options, checked_tools

__all__ = ["DEFAULT_MAX_WAIT_S", "PastBound", "WaitForCaller", "WaitOptions"]

HoldOn = Literal["start", "resume"]
LISTEN_AHEAD_S = 2.0
"""The STT's listening stream opens this long before ``wait_s`` runs out: evidence of words at
the bound needs the last second of them, and a short hold opens no stream."""
_LOOK_AGAIN_S = 0.1  # past the bound, evidence ages: look again this often
RACE = "protected_speech_over_speaking_caller"
SIMULTANEOUS_START_S = 0.1
"""A caller reported speaking this soon after a protected speech began started with it."""
QUIET_LINE_S = 1.0
"""A caller still reported speaking whose line has been quiet this long has stopped: the VAD is
stuck (a healthy one ends speech after about 0.55 s of silence)."""
_LINE_LOOK_S = 0.05  # the meter measures at most this often
_FLOOR_RMS = 300.0  # the Watchdog's floor: below it, the line counts as quiet

logger = get_logger("middleware.wait_for_caller")


@dataclass
class _Hold:
    handle: SpeechHandle
    output: AudioOutput
    tool: str | None
    wait_s: float
    past_bound: PastBound
    started_at: float
    max_wait_s: float
    on: HoldOn = "start"
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    released: bool = False
    extended: bool = False


class WaitForCaller(Middleware):
    """Holds a protected speech until the caller stops speaking, for at most ``wait_s`` (default).

    Args:
        wait_s: Seconds a protected speech waits for a speaking caller; 0 never waits.
        past_bound: ``"speak"`` (default) plays the speech when the caller is still speaking
            after ``wait_s``; ``"skip"`` interrupts it so the caller's turn is answered instead.
        max_wait_s: Seconds a protected speech waits at most for a caller who is still saying
            words when ``wait_s`` runs out (the session's STT keeps hearing new ones); past it,
            ``past_bound`` applies. At least ``wait_s``; equal to it, the wait never extends.
            Default: 15 s, or ``wait_s`` when that is longer.
        tools: Per tool name, :class:`WaitOptions` for the protected speeches that tool creates
            (a farewell may wait longer, a legal notice may never be skipped).

    Raises:
        MiddlewareError: An option is out of range or unknown, or a ``max_wait_s`` is below the
            ``wait_s`` it applies with.
    """

    name = "WaitForCaller"

    def __init__(
        self,
        *,
        wait_s: float = 3.0,
        past_bound: PastBound = "speak",
        max_wait_s: float | None = None,
        tools: Mapping[str, WaitOptions] | None = None,
    ) -> None:
        check = OptionChecker(self.display_name)
        self.options = checked_options(
            check, wait_s=wait_s, past_bound=past_bound, max_wait_s=max_wait_s
        )
        self.tools: dict[str, WaitOptions] = {}
        # each tool's options in full: a tool's own cap, else the one given here, else default
        self._tool_options: dict[str, WaitOptions] = {}
        if tools is not None:
            self.tools, self._tool_options = checked_tools(
                check, tools, self.options, cap_given=max_wait_s is not None
            )
        self._ctx: MiddlewareContext | None = None
        self._output: AudioOutput | None = None
        self._stop_following_output: tuple[Callable[[], None], ...] = ()
        self._hold: _Hold | None = None
        self._wake: asyncio.Event | None = None
        self._told_cannot_pause = False
        self._meter: AudioLevelMeter | None = None
        self._words = CallerWords()
        # the last protected speech that began over a silent caller, and when
        self._protected_start: tuple[SpeechHandle, float] | None = None
        # the speech whose audio began and has not finished playing
        self._playing: SpeechHandle | None = None
        # after a quiet line released a hold, the line is watched for the caller starting with
        # the speech: a stuck VAD reports no new start
        self._line_watch: asyncio.Task[None] | None = None
        # a hold kept through a handoff, until the caller stops

    def option_tool_names(self) -> Mapping[str, Collection[str]]:
        """The tools ``tools`` names."""
        return {"tools": self.tools.keys()}

    @property
    def wait_s(self) -> float:
        """Seconds a protected speech waits for a speaking caller (tools may override it)."""
        return self.options["wait_s"]

    @property
    def past_bound(self) -> PastBound:
        """What happens when the caller is still speaking after ``wait_s``."""
        return self.options["past_bound"]

    @property
    def max_wait_s(self) -> float:
        """Seconds a protected speech waits at most for a caller still saying words."""
        return self.options["max_wait_s"]

    # -- lifecycle -----------------------------------------------------------------------------
    async def setup(self, ctx: MiddlewareContext) -> None:
        """Watch the session's audio output for protected speech starting."""
        self._ctx = ctx
        self._meter = AudioLevelMeter.of(ctx)
        if self._meter is not None:
            self._meter.track_floor(_FLOOR_RMS)
        self._attach(ctx)

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Release a speech still held and stop watching the output.

        On a handoff the leaving agent's activity has already drained (a speech held for the
        caller stayed held through it, this chain still running), so nothing is held any more.
        """
        hold = self._hold
        if hold is not None:
            if hold.task is not None:
                hold.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hold.task
            self._release(hold, "session_ended" if reason == "session_end" else "handed_over")
        watch = self._line_watch
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        await self._words.aclose()
        self._stop_following()

    @never_waits
    async def on_speech_created(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """Follow the session's audio output if the app replaced it."""
        self._attach(ctx)

    @never_waits
    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        """The caller may have stopped: a held speech looks again.

        A caller whose start of speech is reported within ``SIMULTANEOUS_START_S`` of a protected
        speech's first audio started together with it (the VAD needs a moment to report it):
        the speech waits for them as if they had been speaking first.
        """
        if self._wake is not None:
            self._wake.set()
        started = self._protected_start
        self._protected_start = None
        if ev.new_state != "speaking" or started is None or self._hold is not None:
            return
        handle, began_at = started
        output = self._output
        if (
            output is not None
            and handle is ctx.session.current_speech
            and loop_now() - began_at <= SIMULTANEOUS_START_S
        ):
            self._hold_if_protected(ctx, output, handle, on="start")

    @never_waits
    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """During a hold, new words the session's STT heard are evidence the caller goes on.

        Only while livekit lets the STT hear the caller: while it feeds the STT silence, a
        transcript is of words said before the hold (the listening stream hears the rest).
        """
        if self._hold is not None and not stt_is_withheld(ctx.session):
            self._words.heard(ev.transcript, loop_now())

    # -- decide ------------------------------------------------------------------------------
    def decide_resume(
        self, ctx: MiddlewareContext, request: ResumeRequest
    ) -> ResumeDecision | None:
        """A tool protected a speech livekit had paused for the caller: hold it while they speak.

        livekit releases its pause inside the tool's ``disallow_interruptions()`` and the speech
        would resume, now protected, over the caller; the chain asks right after livekit's call,
        before a frame plays. The tool that protected it decides the options, as for the
        speeches it says.
        """
        output = self._output
        handle = request.speech
        if (
            handle is not self._playing
            or output is None
            or self._hold is not None
            or not ctx.state.caller_speaking
        ):
            return None
        self._hold_if_protected(ctx, output, handle, on="resume", tool=request.tool)
        hold = self._hold
        if hold is None or hold.handle is not handle:
            return None
        return ResumeDecision.hold("the caller is speaking")

    # -- holding -------------------------------------------------------------------------------
    def _attach(self, ctx: MiddlewareContext) -> None:
        output = ctx.session.output.audio
        if output is self._output:
            return
        self._stop_following()
        self._output = output
        self._playing = None
        if output is not None:
            # inside the fault boundary: a failure is reported under this middleware's name
            self._stop_following_output = (
                ctx.listen(output, "playback_started", self._on_playback_started, by=self),
                ctx.listen(output, "playback_finished", self._on_playback_finished, by=self),
            )

    def _stop_following(self) -> None:
        for stop in self._stop_following_output:
            stop()
        self._stop_following_output = ()
        self._output = None

    def _options_for(self, tool: str | None) -> WaitOptions:
        return self._tool_options.get(tool or "", self.options)

    def _on_playback_started(self, _ev: object) -> None:
        # synchronous, inside livekit's audio forwarding: the first frame has just reached the
        # sink, so a pause here holds the speech before the caller hears it
        ctx, output = self._ctx, self._output
        if ctx is None or output is None or self._hold is not None:
            return
        handle = ctx.session.current_speech
        self._playing = handle
        if handle is None:
            return
        if not ctx.state.caller_speaking:
            if not handle.allow_interruptions:
                self._protected_start = (handle, loop_now())
            return
        self._hold_if_protected(ctx, output, handle, on="start")

    def _on_playback_finished(self, _ev: object) -> None:
        self._playing = None

    def _hold_if_protected(
        self,
        ctx: MiddlewareContext,
        output: AudioOutput,
        handle: SpeechHandle,
        *,
        on: HoldOn,
        tool: str | None = None,
    ) -> None:
        if handle.done() or handle.interrupted or handle.allow_interruptions:
            return
        info = ctx.state.speeches.get(handle.id)
        if info is not None and info.cut_in:
            # the app cuts in over the caller on purpose (livekit's user_turn_limit): not a race
            return
        if tool is None:
            tool = info.tool if info is not None else None
        options = self._options_for(tool)
        details: dict[str, Any] = {"speech_id": handle.id, "tool": tool, "on": on}
        if options["wait_s"] <= 0:
            ctx.race_detected(self, RACE, details=details)
            return
        if not output.can_pause:
            ctx.race_detected(
                self, RACE, details={**details, "held": False, "why": "output_cannot_pause"}
            )
            if not self._told_cannot_pause:
                self._told_cannot_pause = True
                logger.warning(
                    "protected_speech_not_held",
                    output=output.label,
                    why=(
                        "the session's audio output cannot pause, so a protected speech starts "
                        "over a speaking caller; use an output with pause capability (RoomIO's "
                        "has it)"
                    ),
                )
            return
        output.pause()
        if self._meter is not None:
            self._meter.want("WaitForCaller", True)
        hold = _Hold(
            handle=handle,
            output=output,
            tool=tool,
            wait_s=options["wait_s"],
            past_bound=options["past_bound"],
            started_at=loop_now(),
            max_wait_s=options["max_wait_s"],
            on=on,
        )
        self._hold = hold
        self._words.forget()
        ctx.race_detected(self, RACE, details={**details, "held": True, "wait_s": hold.wait_s})
        handle.add_done_callback(self._on_held_speech_done)
        hold.task = asyncio.get_running_loop().create_task(
            self._wait_for_caller(ctx, hold), name="resilient_agent.wait_for_caller"
        )

    def _on_held_speech_done(self, _handle: SpeechHandle) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _wait_for_caller(self, ctx: MiddlewareContext, hold: _Hold) -> None:
        # made at the first hold: it is cleared before every wait, so a wake-up before then
        # would not count anyway (most calls hold nothing)
        if self._wake is None:
            self._wake = asyncio.Event()
        deadline = hold.started_at + hold.wait_s
        skipped = False
        while True:
            handle = hold.handle
            if handle.done():
                self._release(hold, "skipped_at_bound" if skipped else "speech_ended")
                return
            timeout: float | None = None
            if handle.interrupted:
                # stay paused until livekit has cleared the speech's audio, or a resume would
                # play what is left of it
                pass
            elif not ctx.state.caller_speaking:
                # the snapshot is the truth: queued user-state hooks may arrive out of order
                self._release(hold, "caller_stopped")
                return
            elif self._line_quiet_for(hold) >= QUIET_LINE_S:
                self._release(hold, "line_quiet")
                return
            elif (remaining := deadline - loop_now()) > 0:
                listen_in = self._listen_ahead(
                    ctx, hold, remaining, partial(self._words.observe, ctx)
                )
                # the meter is read, not waited on: look again soon while it can tell
                timeout = remaining if self._meter is None else min(remaining, 0.1)
                if listen_in > 0:
                    timeout = min(timeout, listen_in)
            elif self._still_saying_words(ctx, hold):
                timeout = _LOOK_AGAIN_S
            elif await self._asked_for_words(hold):
                continue
            elif hold.past_bound == "speak":
                self._release(hold, "spoke_at_bound")
                return
            else:
                # the caller keeps talking: drop the protected speech, answer them instead
                skipped = True
                handle.interrupt(force=True)
                continue
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)

    def _listen_ahead(
        self,
        ctx: MiddlewareContext,
        hold: _Hold,
        remaining: float,
        source: Callable[[], bool],
    ) -> float:
        """Open the STT's listening stream shortly before the bound; seconds until it opens.

        Only a hold that may extend needs it (see :meth:`.CallerWords.listen_if_withheld`).
        """
        if hold.max_wait_s <= hold.wait_s:
            return 0.0
        if remaining > LISTEN_AHEAD_S:
            return remaining - LISTEN_AHEAD_S
        self._words.listen_if_withheld(ctx.session, ctx.agent, source)
        return 0.0

    def _still_saying_words(self, ctx: MiddlewareContext, hold: _Hold) -> bool:
        """Past ``wait_s``: whether the caller is still saying words, within ``max_wait_s``.

        The caller's ``user_state`` is ``speaking`` and their line is not quiet (both checked
        before this); the STT heard new words within ``WORDS_RECENT_S``.
        """
        now = loop_now()
        if now >= hold.started_at + hold.max_wait_s or not self._words.saying_words(now):
            return False
        if not hold.extended:
            hold.extended = True
            ctx.race_handled(
                self,
                RACE,
                "extended_wait",
                details={
                    "speech_id": hold.handle.id,
                    "tool": hold.tool,
                    "on": hold.on,
                    "why": "caller_still_saying_words",
                    "wait_s": hold.wait_s,
                    "max_wait_s": hold.max_wait_s,
                },
            )
        return True

    async def _asked_for_words(self, hold: _Hold) -> bool:
        """Past ``wait_s``, with no recent words: whether a non-streaming STT, asked, heard some.

        Such an STT reports nothing while the caller talks on (see :mod:`.caller_words`): it
        is asked once each time the evidence runs out, the speech held meanwhile, and an
        answer that comes later than the evidence would last counts for nothing.
        """
        if (
            not self._words.can_look
            or hold.max_wait_s <= hold.wait_s
            or loop_now() >= hold.started_at + hold.max_wait_s
        ):
            return False
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._words.look(), timeout=WORDS_RECENT_S)
        return self._words.saying_words(loop_now())

    def _watch_line_after_release(self, hold: _Hold) -> None:
        """Hold the speech again if the line wakes within ``SIMULTANEOUS_START_S`` of its resume.

        The VAD that kept the caller "speaking" over a quiet line is stuck, so it reports no new
        start: a caller who starts with the resumed speech is heard only on the line, as a
        healthy VAD's report within the window holds the speech again (:meth:`on_user_state`).
        """
        meter, ctx = self._meter, self._ctx
        if meter is None or ctx is None:
            return
        if self._line_watch is not None:
            self._line_watch.cancel()
        meter.want("WaitForCaller.line_watch", True)
        self._line_watch = asyncio.get_running_loop().create_task(
            self._hold_again_if_line_wakes(ctx, meter, hold, loop_now()),
            name="resilient_agent.wait_for_caller.line_watch",
        )

    async def _hold_again_if_line_wakes(
        self, ctx: MiddlewareContext, meter: AudioLevelMeter, hold: _Hold, released_at: float
    ) -> None:
        handle = hold.handle
        try:
            # the window plus one measure: a start at its end is measured up to a look later
            while loop_now() - released_at < SIMULTANEOUS_START_S + _LINE_LOOK_S:
                await asyncio.sleep(_LINE_LOOK_S)
                if handle.done() or self._hold is not None or not ctx.state.caller_speaking:
                    return
                if meter.loud_at(_FLOOR_RMS) > released_at:
                    self._hold_if_protected(ctx, hold.output, handle, on="start", tool=hold.tool)
                    return
        finally:
            meter.want("WaitForCaller.line_watch", False)
            if self._line_watch is asyncio.current_task():
                self._line_watch = None

    def _line_quiet_for(self, hold: _Hold) -> float:
        """Seconds the caller's line has been quiet during the hold (0 without a meter)."""
        if self._meter is None:
            return 0.0
        return loop_now() - max(hold.started_at, self._meter.loud_at(_FLOOR_RMS))

    def _release(self, hold: _Hold, action: str) -> None:
        if hold.released:
            return
        hold.released = True
        self._words.stop()
        if self._meter is not None:
            self._meter.want("WaitForCaller", False)
        if self._hold is hold:
            self._hold = None
        held_s = round(loop_now() - hold.started_at, 3)
        handle = hold.handle
        # a speech made interruptible meanwhile is livekit's to pause and resume: while the
        # caller speaks, livekit's own false-interruption pause holds it (agent "listening")
        livekit_paused = (
            handle.allow_interruptions
            and not handle.done()
            and self._ctx is not None
            and self._ctx.session.agent_state == "listening"
        )
        if not livekit_paused:
            hold.output.resume()
            if action == "caller_stopped" and not handle.done():
                # a caller who pauses just past the VAD's silence and goes on speaking is
                # reported speaking again a moment after the speech resumed: held again then
                self._protected_start = (handle, loop_now())
            elif action == "line_quiet" and not handle.done() and self._meter is not None:
                self._watch_line_after_release(hold)
        if self._ctx is not None:
            self._ctx.race_handled(
                self,
                RACE,
                action,
                details={
                    "speech_id": handle.id,
                    "tool": hold.tool,
                    "on": hold.on,
                    "held_s": held_s,
                    **({"extended": True} if hold.extended else {}),
                },
            )
