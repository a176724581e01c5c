"""No lost words: what the caller said reaches the LLM, exactly once.

livekit drops a caller's words silently in several windows: a turn that ends while the current
speech is uninterruptible is committed and dropped; the STT hears silence while uninterruptible
speech is current and during AEC warm-up; turns are dropped while a handoff pauses scheduling; and
``StopResponse`` or an exception in ``on_user_turn_completed`` drops the message.

:class:`TurnKeeper` keeps every final transcript as a *fragment* until it reaches the LLM:

* words livekit withheld from the STT are recovered from the audio (see :mod:`.withheld_audio`)
  and replace the partial transcript of that speech window;
* when livekit commits the next user turn, undelivered fragments are merged in front of it, in the
  order they were said, as one plain user message (the LLM is not told they came in while it was
  speaking: it answers them as it would any turn);
* when no next turn comes (the turn was dropped), the fragments are answered with
  ``session.generate_reply(user_input=...)`` as soon as nothing blocks a reply: the caller is
  silent, no uninterruptible speech is current, and livekit's own end-of-turn delay has passed,
  so livekit and the keeper never both answer the same words;
* a non-forced ``session.interrupt()`` while the current speech is protected defers to that speech
  instead of raising (``decide_interrupt``, see :mod:`resilient_agent.speech_gates`), so a chat
  message typed meanwhile (RoomIO's default text input interrupts, then asks for a reply) is
  answered after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from livekit.agents import StopResponse, llm, stt
from livekit.agents.voice import events as lk_events

from resilient_agent import (
    DEFAULT_HOOK_BUDGET_S,
    InferenceNext,
    InferenceRequest,
    InterruptDecision,
    InterruptRequest,
    Middleware,
    MiddlewareContext,
    SpeechInfo,
    UserTurn,
    UserTurnNext,
    get_logger,
    interrupt_queued_speeches,
)
from resilient_agent.options import OptionChecker

from . import handover
from .handover import Fragment, TapFeed, feed_tap
from .session_facts import livekit_turn_delay, session_recognizer
from .transcript_match import normalized, remove_heard, without_repeats
from .withheld_audio import WithheldAudioTap, stt_is_withheld, transcribe

__all__ = ["TurnKeeper"]

logger = get_logger("middleware.turn_keeper")

# Audio before the VAD's start of speech that belongs to the first word.
_ONSET_PAD_S = 0.3
# A VAD reports speech only after this much of it (Silero's min_speech_duration) and ends it only
# after more silence still; a shorter "speaking" window is a programmatic turn claim (typed text
# pins the state while the text callback runs), not the caller's voice.
_SHORTEST_VOICE_WINDOW_S = 0.05
# How long after words were final livekit may still commit them (VAD silence, STT finalising).
_END_OF_SPEECH_SLACK_S = 1.0
# Margin after livekit's own end-of-turn delay before the keeper answers dropped words itself.
_GRACE_MARGIN_S = 0.3
_WITHHELD = "speech_withheld_from_stt"
# How much earlier than the input they preceded merged words are stamped.
_BEFORE_INPUT_S = 1e-3


def _now() -> float:  # loop time: the clock the shared audio observer stamps frames with
    return asyncio.get_running_loop().time()


class TurnKeeper(Middleware):
    """Keeps the caller's words until they reach the LLM (on by default).

    Args:
        merge: Merge undelivered words into the next turn and answer dropped turns; off, the
            keeper only logs what livekit dropped.
        recover_withheld_audio: Re-transcribe speech livekit withheld from the STT.
        max_fragments: How many undelivered fragments are kept; older ones are logged and dropped.
        max_age_s: Fragments older than this are logged and dropped instead of answered.
        keep_audio_s: Seconds of caller audio kept for recovery.
        recovery_timeout_s: How long a user turn waits for a recovery in progress.
        keep_text_input: Make a non-forced ``session.interrupt()`` defer to a protected current
            speech instead of raising, so text typed meanwhile is answered after it (RoomIO's
            default text input interrupts first); ``force=True`` still cuts the speech.
        merge_format: How undelivered words and the turn they join become one user message:
            ``{fragments}`` (required) and ``{turn}`` (empty when no turn came), e.g.
            ``"(said while you were speaking: {fragments}) {turn}"`` to tell the LLM.
    """

    name = "TurnKeeper"

    def __init__(
        self,
        *,
        merge: bool = True,
        recover_withheld_audio: bool = True,
        max_fragments: int = 8,
        max_age_s: float = 60.0,
        keep_audio_s: float = 20.0,
        recovery_timeout_s: float = 2.0,
        keep_text_input: bool = True,
        merge_format: str = "{fragments} {turn}",
    ) -> None:
        check = OptionChecker(self.display_name)
        self.merge_format = check.format_string(
            "merge_format",
            merge_format,
            {"fragments": "my account number is", "turn": "four two seven"},
            required=("fragments",),
            example="{fragments} {turn}",
        )
        self.merge = check.flag("merge", merge)
        self.recover_withheld_audio = check.flag("recover_withheld_audio", recover_withheld_audio)
        self.max_fragments = check.count("max_fragments", max_fragments, ge=1, le=100)
        self.max_age_s = check.number("max_age_s", max_age_s, ge=1.0, le=3600.0)
        self.keep_audio_s = check.number("keep_audio_s", keep_audio_s, ge=2.0, le=300.0)
        self.recovery_timeout_s = check.number(
            "recovery_timeout_s", recovery_timeout_s, ge=0.1, le=30.0
        )
        # wrap_user_turn may wait this long for a recovery before calling call_next
        self.hook_budget_s = max(DEFAULT_HOOK_BUDGET_S, self.recovery_timeout_s + 1.0)
        self.keep_text_input = check.flag("keep_text_input", keep_text_input)
        # (when, message) merged into inferences that were not user turns, until the next turn
        self._merged_into_inferences: deque[tuple[float, llm.ChatMessage]] = deque(
            maxlen=max_fragments
        )
        self._fragments: deque[Fragment] = deque()
        self._tap: WithheldAudioTap | None = None
        self._own_answers: deque[str] = deque(maxlen=self.max_fragments)
        self._feed: TapFeed | None = None
        self._speech_started_at: float | None = None
        self._last_activity = 0.0
        # the queued replies were just interrupted for the answer about to be made
        self._queued_replies_replaced = False
        self._made_before_caller_spoke: set[str] = set()
        self._recoveries: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._ctx: MiddlewareContext | None = None
        self._session_ended = False
        # a deferred interrupt: RoomIO's text input (and livekit's DTMF workflow) interrupts, then
        # asks for a reply to its input; the next inference is that reply
        self._input_reply_expected = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def setup(self, ctx: MiddlewareContext) -> None:
        """Tap the caller's audio, take over words a previous agent left, answer dropped turns."""
        self._ctx = ctx
        self._wake = asyncio.Event()
        self._session_ended = False
        carried = handover.take(ctx.session)
        if carried is not None and carried.feed is not None and self.recover_withheld_audio:
            # the previous agent's tap goes on, with the audio of the handoff in it
            self._tap, self._feed = carried.tap, carried.feed
        elif self.recover_withheld_audio:
            tap = WithheldAudioTap(ctx.session, keep_seconds=self.keep_audio_s)
            if ctx.observe_audio(tap.on_frame):
                self._tap = tap
        if carried is not None:
            self._take_over(ctx, carried)
        if self.merge:
            self._loop_task = asyncio.get_running_loop().create_task(
                self._answer_dropped_turns(ctx), name="resilient_agent.turn_keeper"
            )

    async def aclose(self) -> None:
        """Stop, and log words that never reached the LLM."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        if self._recoveries:
            # words being recovered are handed on too; a recovery is bounded in time
            await asyncio.wait(set(self._recoveries), timeout=self.recovery_timeout_s)
        for task in list(self._recoveries):
            task.cancel()
        lost = [f for f in self._undelivered()]
        ctx = self._ctx
        if ctx is not None and not self._session_ended:
            # a handoff: the next agent in this session answers the words, and recovers those
            # of a speech window still open from the audio kept until it starts (livekit may
            # play a protected speech to its end first, withholding the caller's words)
            feed = None if self._tap is None else feed_tap(ctx.session, self._tap, self._feed)
            left = handover.Handover(ctx.session, lost, self._tap, feed, self._speech_started_at)
            if self.merge and self.keep_text_input:
                left.hold_input(ctx)  # text typed during the handoff goes to the next agent
            handover.leave(ctx.session, left)
            if lost:
                logger.info("user_words_carried_over", fragments=len(lost))
            return
        if lost:
            logger.warning(
                "user_words_lost",
                fragments=len(lost),
                words=sum(len(f.text.split()) for f in lost),
                why="the session ended before they could be answered",
            )

    def _take_over(self, ctx: MiddlewareContext, carried: handover.Handover) -> None:
        """Take the words, audio and speech windows the previous agent left."""
        # the previous agent's activity is gone, and its turn with it: livekit cannot answer
        # these words any more, so they are answered as soon as nothing blocks a reply
        for fragment in carried.fragments:
            self._add(fragment)
        if carried.last_heard_at is not None:
            # words heard as the next activity started may still become its turn: livekit first
            self._last_activity = max(self._last_activity, carried.last_heard_at)
        if self._tap is not None and carried.tap is not None and self._tap is not carried.tap:
            self._tap.take_over(carried.tap)
        for window in carried.windows:
            if window.end is None and ctx.session.user_state == "speaking":
                self._speech_started_at = window.start
            else:
                # the caller spoke while no agent was listening: no livekit turn holds the words
                end = window.end if window.end is not None else _now()
                self._close_speech_window(ctx, window.start, end, livekit_may_answer=False)

    async def on_session_end(self, ctx: MiddlewareContext, ev: lk_events.CloseEvent) -> None:
        """The session is over: pending words can no longer be carried to another agent."""
        self._session_ended = True

    # -- what the caller said ------------------------------------------------------------------
    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        """Track speech windows; recover a window that livekit withheld from the STT."""
        now = _now()
        if ev.new_state == "speaking":
            self._speech_started_at = now
            if not self._undelivered():
                # the replies made before the caller began: their words can only be newer
                self._made_before_caller_spoke = set(ctx.state.speeches)
        elif ev.old_state == "speaking":
            started = self._speech_started_at or now
            self._speech_started_at = None
            self._close_speech_window(ctx, started, now)
        self._wake.set()

    def _close_speech_window(
        self, ctx: MiddlewareContext, started: float, now: float, *, livekit_may_answer: bool = True
    ) -> None:
        if livekit_may_answer:
            self._last_activity = now
        tap, onset = self._tap, started - _ONSET_PAD_S
        if (
            tap is not None
            and now - started >= _SHORTEST_VOICE_WINDOW_S
            and tap.withheld_within(onset, now)
        ):
            frames = [f.frame for f in tap.window(onset, now)]
            self._start_recovery(ctx, started, now, frames, livekit_may_answer)

    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Keep every final transcript until it is delivered."""
        if self._tap is not None:
            self._tap.note_transcript(final=ev.is_final, now=_now())
        if ev.is_final and ev.transcript.strip():
            self._add(Fragment(ev.transcript.strip(), _now()))
            self._last_activity = _now()
            self._wake.set()

    async def on_conversation_item(
        self, ctx: MiddlewareContext, ev: lk_events.ConversationItemAddedEvent
    ) -> None:
        """A user message in the history delivers the fragments it contains."""
        item = ev.item
        if item.type == "message" and item.role == "user":
            said = normalized(item.text_content or "")
            for fragment in self._undelivered():
                if normalized(fragment.text) in said:
                    fragment.delivered = True

    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A blocking speech may have ended: look again."""
        self._last_activity = max(self._last_activity, _now())
        self._wake.set()

    async def on_agent_state(
        self, ctx: MiddlewareContext, ev: lk_events.AgentStateChangedEvent
    ) -> None:
        """The agent's state may unblock an answer."""
        self._wake.set()

    def decide_interrupt(
        self, ctx: MiddlewareContext, request: InterruptRequest
    ) -> InterruptDecision | None:
        """With ``keep_text_input``, an interrupt defers to the protected speech it meets."""
        if not self.keep_text_input:
            return None
        why = (
            "session.interrupt() without force while the current speech is protected: it plays "
            "to the end, and a reply asked for next is queued after it"
        )
        ctx.race_handled(
            self,
            "protected_speech_interrupt",
            "deferred_to_protected_speech",
            details={"speech_id": request.speech.id, "why": why},
        )
        self._input_reply_expected = True
        return InterruptDecision.defer(why)

    # -- merging into the next turn -----------------------------------------------------------
    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, call_next: UserTurnNext
    ) -> None:
        """Put undelivered words in front of this turn; keep the words if the app's hook fails."""
        if self._recoveries:
            await asyncio.wait(set(self._recoveries), timeout=self.recovery_timeout_s)
        await self._forget_merged_words_livekit_commits(ctx, turn)
        if self.merge:
            merged = self._merge_into(turn.text)
            if merged != turn.text:
                ctx.race_handled(self, "dropped_user_words", "merged_into_next_turn")
                turn = turn.override(text=merged)
        try:
            await call_next(turn)
        except StopResponse:
            # the app declined to answer; the words still belong in the history
            await _keep_in_history(ctx, turn.text)
            raise
        except Exception as exc:
            # the app's own traceback, which livekit would have logged had it propagated
            logger.error("app_user_turn_hook_raised", exc_info=exc)
            ctx.race_handled(
                self,
                "user_turn_hook_failed",
                "answered_anyway",
                details={"error": type(exc).__name__},
            )

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        """Give the words still pending to an inference that is not a user turn.

        A caller who spoke over a protected tool preamble would otherwise wait for the tool's
        protected reply to play before being answered; this way the reply takes them in. The
        reply to an input that interrupted a protected speech (a typed chat message) takes in
        the words said before it, in front of it, instead of answering them after it.
        """
        input_reply, self._input_reply_expected = self._input_reply_expected, False
        items = [i for i in request.chat_ctx.items if i.type in ("message", "function_call_output")]
        last = items[-1] if items else None
        follows_user = isinstance(last, llm.ChatMessage) and last.role == "user"
        if not self.merge or self._recoveries or not self._undelivered():
            return await call_next(request)
        if not follows_user:
            # one message, stamped now, at the end of the inference's context
            await self._merge_into_inference(ctx, request, created_at=None)
        elif input_reply and isinstance(last, llm.ChatMessage):
            # stamped just before the input, so every record holds the words in the order said
            await self._merge_into_inference(
                ctx,
                request,
                created_at=last.created_at - _BEFORE_INPUT_S,
                input_text=last.text_content,
            )
        return await call_next(request)

    async def _merge_into_inference(
        self,
        ctx: MiddlewareContext,
        request: InferenceRequest,
        *,
        created_at: float | None,
        input_text: str | None = None,
    ) -> None:
        """Put the pending words in the inference, the agent's context and livekit's transcript.

        Words the input itself already says (a turn livekit committed from the same speech)
        stay pending, so the LLM never reads them twice.
        """
        said = normalized(input_text or "")
        pending = [f for f in self._undelivered() if not said or normalized(f.text) not in said]
        if not pending:
            return
        for fragment in pending:
            fragment.delivered = True
        text = self.merge_format.format(fragments=" ".join(without_repeats(pending)), turn="")
        message = llm.ChatMessage(role="user", content=[text.strip()])
        if created_at is not None:
            message.created_at = created_at
        # session.history is the session's live ChatContext
        request.chat_ctx.insert(message)
        context = ctx.agent.chat_ctx.copy()
        context.insert(message)
        await ctx.agent.update_chat_ctx(context)
        ctx.session.history.insert(message)
        self._merged_into_inferences.append((_now(), message))
        action = "merged_into_inference" if created_at is None else "merged_before_input"
        ctx.race_handled(self, "dropped_user_words", action)

    async def _forget_merged_words_livekit_commits(
        self, ctx: MiddlewareContext, turn: UserTurn
    ) -> None:
        """When livekit commits words a tool reply already took in, keep livekit's message.

        A word too short to interrupt can be final before a tool ends, taken in by the tool
        reply, and then committed by livekit as a turn of its own, which interrupts that reply
        and is answered. The merged copy is removed from this reply's context, the agent's
        context and ``session.history``, so each holds the words once.
        """
        # only the turn livekit still had open when the words were merged can carry them again
        open_for = livekit_turn_delay(ctx.session) + _GRACE_MARGIN_S + _END_OF_SPEECH_SLACK_S
        recent = [m for at, m in self._merged_into_inferences if _now() - at <= open_for]
        self._merged_into_inferences.clear()
        said = normalized(turn.text)
        committed = [m for m in recent if said and normalized(m.text_content or "") in said]
        if not committed:
            return
        ids = {m.id for m in committed}
        for message in committed:
            for record in (turn.turn_ctx, ctx.session.history):
                if record.get_by_id(message.id) is not None:
                    record.remove(message.id)
        context = ctx.agent.chat_ctx.copy()
        context.items = [i for i in context.items if i.id not in ids]
        await ctx.agent.update_chat_ctx(context)
        logger.info(
            "merged_user_words_committed_by_livekit",
            messages=len(committed),
            action="kept livekit's message, removed the merged copy",
        )

    def _merge_into(self, text: str) -> str:
        pending = self._undelivered()
        for fragment in pending:
            fragment.delivered = True
        fragments = " ".join(without_repeats(pending))
        if not fragments:
            return text
        turn = text.strip()
        if normalized(turn) in normalized(fragments):
            turn = ""  # the turn says nothing the fragments do not: never the same words twice
        elif turn:
            # a real recognizer may hear the live turn a little differently from the recovered
            # window: the fragments keep only what the turn does not already say
            fragments = remove_heard(fragments, turn)
        return self.merge_format.format(fragments=fragments, turn=turn).strip()

    # -- answering dropped turns ---------------------------------------------------------------
    async def _answer_dropped_turns(self, ctx: MiddlewareContext) -> None:
        while True:
            self._wake.clear()
            delay = self._seconds_until_answer(ctx)
            if delay is None:
                await self._wake.wait()
                continue
            if delay > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            self._answer(ctx)

    def _seconds_until_answer(self, ctx: MiddlewareContext) -> float | None:
        """None while something blocks an answer, else seconds left of livekit's turn delay."""
        self._expire()
        if not self._undelivered() or self._recoveries:
            return None
        if ctx.state.user_state == "speaking":
            return None
        current = ctx.session.current_speech
        if current is not None and not current.allow_interruptions and not current.done():
            # livekit's turn ends while this speech is current: it skips the turn
            left = self._last_activity + livekit_turn_delay(ctx.session) - _now()
            if left > 0:
                return left
            # answered at once, in the place of the replies interrupted, after the protected one
            return 0.0 if self._interrupt_stale_replies(ctx) else None
        if stt_is_withheld(ctx.session):
            return None
        if any(s.handle.interrupted and not s.handle.done() for s in ctx.state.speeches.values()):
            # livekit's own turn waits for the interrupted speech to end, then delivers the words
            return None
        delay = livekit_turn_delay(ctx.session) + _GRACE_MARGIN_S
        return max(0.0, self._last_activity + delay - _now())

    def _interrupt_stale_replies(self, ctx: MiddlewareContext) -> bool:
        """Interrupt the replies queued behind a protected speech before the caller spoke.

        Had the current speech been interruptible, the caller's words would have interrupted
        it, and the replies queued behind it would never have played before their answer;
        livekit skips the caller's turn instead. A reply queued before the caller began the
        pending words was made without them, so it is interrupted, as livekit's interrupt
        does, and the caller is answered when the protected speech ends, not after a reply
        that no longer fits. A reply made while they spoke (to a typed message) plays.
        livekit adds the user message of an interrupted scheduled reply to the history, so no
        word goes with it.
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
        self._queued_replies_replaced = bool(interrupted)
        return self._queued_replies_replaced

    def _answer(self, ctx: MiddlewareContext) -> None:
        replaced_queued, self._queued_replies_replaced = self._queued_replies_replaced, False
        pending = self._undelivered()
        text = self._merge_into("")
        if not text:
            return
        ctx.race_detected(self, "dropped_user_turn")
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
            answer = session.generate_reply(user_input=text)
        except RuntimeError as exc:
            for fragment in pending:
                fragment.delivered = False  # kept: answered when a reply can be made
            logger.warning("dropped_turn_not_answered", action="kept_the_words", exc_info=exc)
            return
        self._own_answers.append(answer.id)
        ctx.race_handled(
            self,
            "dropped_user_turn",
            "answered_instead_of_stale_reply" if stale or replaced_queued else "answered",
            counts={"dropped_turns_answered": 1},
        )

    # -- recovery ------------------------------------------------------------------------------
    def recover_unheard_audio(self, ctx: MiddlewareContext, *, kind: str) -> bool:
        """Re-transcribe the caller's audio since the last final transcript (an STT lost it).

        The words join the caller's next turn, or are answered on their own, like any words
        livekit dropped (``SttRecovery`` calls this after restarting a dead STT stream).

        Args:
            ctx: The session's context.
            kind: The race kind the recovered words are reported under.

        Returns:
            False when no audio is kept (``recover_withheld_audio`` off, or no audio input).
        """
        if self._tap is None or session_recognizer(ctx.agent, ctx.session) is None:
            return False
        now = _now()
        # a final transcript is stamped as it arrives, after its words: audio from then on is
        # what the STT never finished
        heard = max((f.heard_at for f in self._fragments), default=now - self.keep_audio_s)
        window = self._tap.window(heard, now)
        if not window:
            return False
        # the earlier fragments are not in the re-transcribed audio: keep them out of its window
        frames = [f.frame for f in window]
        self._start_recovery(ctx, heard + _ONSET_PAD_S + 1e-3, now, frames, True, kind)
        return True

    def _start_recovery(
        self,
        ctx: MiddlewareContext,
        started: float,
        ended: float,
        frames: list[Any],
        livekit_may_answer: bool,
        kind: str = _WITHHELD,
    ) -> None:
        recognizer = session_recognizer(ctx.agent, ctx.session)
        if recognizer is None:
            return
        if kind == _WITHHELD:
            # a middleware that asks for a recovery (SttRecovery) reports its own race
            ctx.race_detected(self, kind, details={"seconds": round(ended - started, 2)})
        task = asyncio.get_running_loop().create_task(
            self._recover(ctx, recognizer, started, ended, frames, livekit_may_answer, kind)
        )
        self._recoveries.add(task)
        task.add_done_callback(self._recovery_done)

    def _recovery_done(self, task: asyncio.Task[None]) -> None:
        self._recoveries.discard(task)
        self._wake.set()

    async def _recover(
        self,
        ctx: MiddlewareContext,
        recognizer: stt.STT[Any],
        started: float,
        ended: float,
        frames: list[Any],
        livekit_may_answer: bool,
        kind: str,
    ) -> None:
        try:
            text = await transcribe(recognizer, frames)
        except Exception as exc:  # a failed recovery must not break the call
            logger.warning("withheld_audio_not_recovered", exc_info=exc)
            return
        # the partial transcripts of this window: what the STT heard of the words recovered
        # (words of another window, recovered or heard, are never replaced)
        recovered = set(normalized(text).split())
        in_window = [
            f
            for f in self._fragments
            if started - _ONSET_PAD_S <= f.heard_at <= ended + 0.5
            and not f.recovered
            and set(normalized(f.text).split()) <= recovered
        ]
        delivered = " ".join(f.text for f in in_window if f.delivered)
        for fragment in in_window:
            if not fragment.delivered:
                fragment.superseded = True
        if delivered:
            text = remove_heard(text, delivered)
        if text.strip():
            self._add(Fragment(text.strip(), ended, recovered=True))
            words = len(text.split())
            ctx.race_handled(
                self,
                kind,
                "recovered_words",
                details={"words": words},
                counts={"words_recovered": words},
            )
        if livekit_may_answer:
            self._last_activity = max(self._last_activity, _now())

    # -- bookkeeping ---------------------------------------------------------------------------
    def _add(self, fragment: Fragment) -> None:
        self._fragments.append(fragment)
        while len(self._fragments) > self.max_fragments * 4:
            old = self._fragments.popleft()
            if not old.delivered and not old.superseded:
                logger.warning(
                    "user_words_dropped", words=len(old.text.split()), why="too many pending"
                )
        pending = self._undelivered()
        for extra in pending[: max(0, len(pending) - self.max_fragments)]:
            extra.superseded = True
            logger.warning(
                "user_words_dropped", words=len(extra.text.split()), why="max_fragments reached"
            )

    def _expire(self) -> None:
        cutoff = _now() - self.max_age_s
        for fragment in self._undelivered():
            if fragment.heard_at < cutoff:
                fragment.superseded = True
                logger.warning(
                    "user_words_dropped",
                    words=len(fragment.text.split()),
                    why="older than max_age_s",
                )

    def _undelivered(self) -> list[Fragment]:
        return [f for f in self._fragments if not f.delivered and not f.superseded]

    @property
    def pending_words(self) -> int:
        """Words heard but not yet delivered to the LLM."""
        return sum(len(f.text.split()) for f in self._undelivered())

    @property
    def buffered_fragments(self) -> int:
        """Fragments held in memory (bounded)."""
        return len(self._fragments)


async def _keep_in_history(ctx: MiddlewareContext, text: str) -> None:
    agent = ctx.agent
    history = agent.chat_ctx.copy()
    history.add_message(role="user", content=text)
    await agent.update_chat_ctx(history)
