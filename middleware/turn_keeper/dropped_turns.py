"""Answering a dropped turn: words the caller said that no livekit turn will carry to the LLM.

livekit skips a user turn that ends while an uninterruptible speech is current, and a turn is
gone with the activity of an agent that handed off. The TurnKeeper's pending words are then
answered with ``session.generate_reply(user_input=...)`` as soon as nothing blocks a reply: the
caller is silent, no recovery is in progress, no uninterruptible speech is current, and livekit's
own end-of-turn delay (plus a margin) has passed, so livekit and the keeper never both answer the
same words.

When is a question (:meth:`DroppedTurnAnswerer.when_to_answer`, a :class:`WhenToAnswer` value);
acting on it is a step of its own: the replies queued behind a protected speech before the caller
spoke are interrupted (:meth:`DroppedTurnAnswerer.interrupt_stale_replies`), then the caller is
answered in their place (:meth:`DroppedTurnAnswerer.answer`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from livekit.agents import llm

from resilient_agent import MiddlewareContext, get_logger, interrupt_queued_speeches
from resilient_agent._engine.pending_words import Fragment, PendingWords, typed_extra

from ..clock import loop_now
from ..session_facts import (
    between_group_tasks,
    handoff_under_way,
    livekit_min_interruption_words,
    livekit_turn_delay,
    stt_is_withheld,
)
from .merging import merge_into
from .options import TurnKeeperOptions
from .turn_answer import answer_as_user_turn

__all__ = [
    "APP_STEP_S",
    "GRACE_MARGIN_S",
    "DroppedTurnAnswerer",
    "WhenToAnswer",
    "app_line_just_ended",
]

# the TurnKeeper's records: one logger for everything the keeper does
logger = get_logger("middleware.turn_keeper")

GRACE_MARGIN_S = 0.3
"""Margin after livekit's own end-of-turn delay before the keeper answers dropped words itself."""

APP_STEP_S = 0.01
"""How long the app code whose protected line just ended (a tool, an ``on_enter``) gets to take
its next step before the words said over the line are answered: enough for the steps it takes
without waiting on anything (an awaited ``AgentTask`` becomes the current agent in its first)."""


@dataclass(frozen=True)
class WhenToAnswer:
    """When the pending words may be answered (a decision; computing it changes nothing).

    Attributes:
        wait_s: Seconds of livekit's turn delay left (0: now); None while something blocks a
            reply.
        replacing_stale_replies: The words wait behind a protected speech livekit skipped their
            turn for: they are answered now only if replies queued before the caller spoke are
            interrupted for them, and else wait for the speech to end.
    """

    wait_s: float | None
    replacing_stale_replies: bool = False


_BLOCKED = WhenToAnswer(None)


class DroppedTurnAnswerer:
    """Answers the TurnKeeper's pending words when livekit will not.

    Args:
        options: The keeper's options.
        words: The session's pending words.
        reporter: The name the races are reported under (the keeper's).
        recovering: Whether a recovery of withheld audio is in progress: no answer is made
            meanwhile (the recovered words may join).
    """

    def __init__(
        self,
        options: TurnKeeperOptions,
        words: PendingWords,
        *,
        reporter: str,
        recovering: Callable[[], bool],
    ) -> None:
        self._options = options
        self._words = words
        self._reporter = reporter
        self._recovering = recovering
        self._own_answers: deque[str] = deque(maxlen=options.max_fragments)
        self._made_before_caller_spoke: set[str] = set()
        # stale replies were interrupted for the words pending now
        self._replaced_stale = False
        # the last time livekit saw the caller (speech, a final transcript, a speech ending):
        # its own turn may still come until its end-of-turn delay has passed since
        self._last_activity = 0.0
        self._wake = asyncio.Event()
        # set while the loop waits for livekit's turn delay to pass
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        # recovered words that are a turn livekit ended without them, and their race's kind
        self._turn: tuple[Fragment, str] | None = None
        # answers as a turn under way: the app's hook runs in them, never cancelled
        self._turn_answers: set[asyncio.Task[None]] = set()

    # -- what the keeper tells it --------------------------------------------------------------
    def note_activity(self, at: float) -> None:
        """The caller was seen at ``at``: livekit's own turn may still carry the words."""
        self._last_activity = max(self._last_activity, at)

    def note_speech_done(self, at: float) -> None:
        """A speech ended at ``at``: livekit may now deliver a turn it held behind it.

        Not when the pending words already took the place of the replies queued before the
        caller spoke (those were interrupted for them) and were all recovered from audio
        livekit's STT never had: no turn of livekit's holds them and no reply waits to play,
        so waiting livekit's turn delay again from the speech's end only makes the caller wait.
        """
        pending = self._words.undelivered()
        if self._replaced_stale and pending and all(f.recovered for f in pending):
            return
        self.note_activity(at)

    def note_caller_speaking(self, ctx: MiddlewareContext) -> None:
        """The caller began speaking: remember the replies already made without their words."""
        if not self._words.undelivered():
            # their words can only be newer than every reply made so far
            self._made_before_caller_spoke = set(ctx.state.speeches)

    def note_final_after_speech(self, ctx: MiddlewareContext, speech_ended_at: float) -> None:
        """A final transcript came after the caller's speech ended: replies since lack its words.

        ``speech_ended_at`` is livekit's ``time.time()`` stamp of its ``user_state_changed``
        event. The replies made since (livekit's reply to the turn it committed at the end of that
        speech, with the words it had then) were made without these words, as surely as those
        made before the caller spoke: the words' answer may take their place.
        """
        self._made_before_caller_spoke |= {
            speech_id
            for speech_id, speech in ctx.state.speeches.items()
            if speech.created_at >= speech_ended_at
        }

    def note_turn_without_words(self, fragment: Fragment, kind: str) -> None:
        """``fragment`` holds the words of a turn livekit ended without them: answer it as one.

        Recovered words of a turn a stuck VAD kept from a non-streaming STT: livekit's turn
        ended with no transcript, and none of its turns will carry them. livekit answers a
        committed turn at once and through the agent's ``on_user_turn_completed``; so are
        these, as soon as nothing blocks a reply (:mod:`.turn_answer`). ``kind`` is the race
        they were recovered under.
        """
        self._turn = (fragment, kind)

    def _turn_due(self) -> tuple[Fragment, str] | None:
        """The turn livekit ended without its words, while they are still to be answered."""
        turn = self._turn
        if turn is not None and (turn[0].delivered or turn[0].superseded):
            self._turn = turn = None
        return turn

    def wake(self) -> None:
        """Something changed that may unblock (or block) an answer: look again."""
        if self._timer is None and not self._words.any_undelivered():
            return  # nothing to answer: the loop would only look and wait again
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------------
    def start(self, ctx: MiddlewareContext) -> None:
        """Answer dropped turns in this session until :meth:`stop`."""
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(
            self._answer_dropped_turns(ctx), name="resilient_agent.turn_keeper"
        )

    async def stop(self) -> None:
        """Stop answering (an answer already asked for plays on)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _answer_dropped_turns(self, ctx: MiddlewareContext) -> None:
        # the app's line after whose end the app's next step was waited for once already
        stepped_after: str | None = None
        while True:
            self._wake.clear()
            if not self._words.expire(loop_now()):
                self._replaced_stale = False
            when = self.when_to_answer(ctx)
            if when.wait_s is None:
                await self._wake.wait()
                continue
            if when.replacing_stale_replies and self.interrupt_stale_replies(ctx):
                # at once, not when livekit's turn delay is over: the protected speech may end
                # first, and a stale reply queued behind it would begin to play
                self._replaced_stale = True
            if when.wait_s > 0:
                # a timer that wakes the loop, no more: wait_for would add a task and a waiter
                timer = asyncio.get_running_loop().call_later(when.wait_s, self._wake.set)
                self._timer = timer
                try:
                    await self._wake.wait()
                finally:
                    timer.cancel()
                    self._timer = None
                continue
            if when.replacing_stale_replies and not self._replaced_stale:
                await self._wake.wait()  # nothing to replace: answered after the protected one
                continue
            line = app_line_just_ended(ctx)
            if line is not None and line != stepped_after:
                # the app's code goes on from its line: its next step may await an AgentTask,
                # whose activity must take the words, not this agent's (none of its tools here)
                stepped_after = line
                await asyncio.sleep(APP_STEP_S)  # a wake meanwhile (the line's end) is no step
                self._wake.clear()
                # due as the line ended, the words are answered now unless the step blocked them
                # (a task became the current agent): the line's end is no sign of the caller
                if self.when_to_answer(ctx).wait_s is None:
                    continue
            turn = self._turn_due()
            if turn is not None and not when.replacing_stale_replies:
                self.answer_as_turn(ctx, kind=turn[1])
                continue
            self.answer(ctx, replaced_queued=self._replaced_stale)
            self._replaced_stale = False

    # -- deciding ------------------------------------------------------------------------------
    def when_to_answer(self, ctx: MiddlewareContext) -> WhenToAnswer:
        """When the pending words may be answered, as livekit's turn would have answered them."""
        pending = self._words.undelivered()
        if not pending or self._recovering():
            return _BLOCKED
        if _backchannel(ctx, pending):
            # livekit did not take words under its min_words as an interruption: it keeps them
            # in its transcript for the caller's next turn, by design
            return _BLOCKED
        if ctx.state.user_state == "speaking" or handoff_under_way(ctx):
            # a handoff: livekit refuses replies until the next agent's activity runs
            return _BLOCKED
        if between_group_tasks(ctx):
            # the group's next task answers them, as the caller's turn to it (its start wakes)
            return _BLOCKED
        current = ctx.session.current_speech
        if current is not None and not current.allow_interruptions and not current.done():
            # livekit's turn ends while this speech is current: it skips the turn
            left = self._last_activity + livekit_turn_delay(ctx.session) - loop_now()
            # answered in the place of the replies interrupted, after the protected one
            return WhenToAnswer(max(0.0, left), replacing_stale_replies=True)
        if stt_is_withheld(ctx.session):
            return _BLOCKED
        if any(s.handle.interrupted and not s.handle.done() for s in ctx.state.speeches.values()):
            # livekit's own turn waits for the interrupted speech to end, then delivers the words
            return _BLOCKED
        if self._turn_due() is not None:
            # livekit's turn is over and holds none of these words: as a committed turn, now
            return WhenToAnswer(0.0)
        delay = livekit_turn_delay(ctx.session) + GRACE_MARGIN_S
        return WhenToAnswer(max(0.0, self._last_activity + delay - loop_now()))

    # -- acting --------------------------------------------------------------------------------
    def interrupt_stale_replies(self, ctx: MiddlewareContext) -> bool:
        """Interrupt the replies queued behind a protected speech before the caller spoke.

        Had the current speech been interruptible, the caller's words would have interrupted
        it, and the replies queued behind it would never have played before their answer;
        livekit skips the caller's turn instead. A reply queued before the caller began the
        pending words was made without them, so it is interrupted, as livekit's interrupt
        does, and the caller is answered when the protected speech ends, not after a reply
        that no longer fits. A reply made while they spoke (to a typed message) plays.
        livekit adds the user message of an interrupted scheduled reply to the history, so no
        word goes with it.

        Returns:
            Whether any reply was interrupted.
        """
        made_before = self._made_before_caller_spoke
        interrupted = interrupt_queued_speeches(
            ctx.session,
            why=(
                "the caller spoke over a protected speech; the replies queued behind it before "
                "they began were made without their words"
            ),
            only=lambda speech: speech.id in made_before,
        )
        return bool(interrupted)

    def answer_as_turn(self, ctx: MiddlewareContext, *, kind: str) -> None:
        """Answer the pending words now as the caller's turn: the app's hook runs first.

        Args:
            ctx: The session's context.
            kind: The race the words were recovered under, reported as handled by this answer.
        """
        pending = self._words.undelivered()
        text = merge_into(self._words, "", self._options)
        self._turn = None
        if not text:
            return
        spoken = any(f.modality == "audio" for f in pending)
        task = asyncio.get_running_loop().create_task(
            self._answer_turn(ctx, text, spoken, kind, typed_extra(pending)),
            name="resilient_agent.turn_answer",
        )
        self._turn_answers.add(task)
        task.add_done_callback(self._turn_answers.discard)

    async def _answer_turn(
        self, ctx: MiddlewareContext, text: str, spoken: bool, kind: str, extra: dict[str, Any]
    ) -> None:
        try:
            await answer_as_user_turn(ctx, text, spoken=spoken, extra=extra)
        except RuntimeError as exc:  # the session closed meanwhile: nothing can answer now
            logger.warning("recovered_turn_not_answered", exc_info=exc)
            return
        ctx.race_handled(
            self._reporter,
            kind,
            "answered_as_user_turn",
            counts={"dropped_turns_answered": 1},
        )

    def answer(self, ctx: MiddlewareContext, *, replaced_queued: bool = False) -> None:
        """Answer the pending words now, in place of a current reply made without them.

        Args:
            ctx: The session's context.
            replaced_queued: Queued replies were just interrupted for this answer.
        """
        pending = self._words.undelivered()
        text = merge_into(self._words, "", self._options)
        if not text:
            return
        ctx.race_detected(self._reporter, "dropped_user_turn")
        session = ctx.session
        current = session.current_speech
        stale = (
            current is not None
            and current.id not in self._own_answers
            and current.allow_interruptions
            and not current.done()
            and not current.interrupted
            and session.agent_state != "speaking"
        )
        try:
            if stale and current is not None:
                # a reply made without these words and not heard yet (a tool reply waiting for
                # silence): a livekit turn would interrupt it too; the new one has its context
                current.interrupt()
            # answered as they came in: a modality-aware task (livekit's GetEmailTask) reads
            # spoken words back and has them confirmed, as it does for live voice
            spoken = any(f.modality == "audio" for f in pending)
            # a message of typed and spoken words says which were typed (data only: livekit
            # keeps it in the report, the LLM never sees it)
            extra = typed_extra(pending)
            user_input = (
                llm.ChatMessage(role="user", content=[text], extra=extra) if extra else text
            )
            reply = session.generate_reply(
                user_input=user_input, input_modality="audio" if spoken else "text"
            )
        except RuntimeError as exc:
            self._words.give_back(pending)  # kept: answered when a reply can be made
            logger.warning("dropped_turn_not_answered", action="kept_the_words", exc_info=exc)
            return
        self._own_answers.append(reply.id)
        ctx.race_handled(
            self._reporter,
            "dropped_user_turn",
            "answered_instead_of_stale_reply" if stale or replaced_queued else "answered",
            counts={"dropped_turns_answered": 1},
        )


def app_line_just_ended(ctx: MiddlewareContext) -> str | None:
    """The id of a protected speech that just ended while a tool or an ``on_enter`` runs on.

    livekit still names it the current speech: the code that said it (awaiting it) has not
    taken its next step yet. None when no such speech just ended.
    """
    current = ctx.session.current_speech
    if current is None or not current.done() or current.allow_interruptions:
        return None
    state = ctx.state
    return current.id if state.tools_in_flight or state.entering else None


def _backchannel(ctx: MiddlewareContext, pending: list[Fragment]) -> bool:
    """Spoken words over an interruptible agent speech, fewer than livekit's ``min_words``."""
    min_words = livekit_min_interruption_words(ctx.session)
    return (
        min_words > 0
        and all(f.over_agent_speech and f.modality == "audio" and not f.recovered for f in pending)
        and sum(len(f.text.split()) for f in pending) < min_words
    )
