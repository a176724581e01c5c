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
  instead of raising (``decide_interrupt``, see :mod:`resilient_agent._livekit.speech_gates`), so a
  chat message typed meanwhile (RoomIO's default text input interrupts, then asks for a reply) is
  answered after it.

This module holds the middleware itself (the events it follows, the recovery of withheld audio,
the merge into the next turn); its parts live beside it in this package, each given the one
:class:`~.options.TurnKeeperOptions` value and the session's pending words
(``ctx.state.pending_words``, :mod:`resilient_agent._engine.pending_words`), never the keeper: the
answering of dropped turns in :mod:`.dropped_turns`, the words given to inferences that are not
user turns in :mod:`.inference_merge`, the merge itself in :mod:`.merging`, and what a leaving
keeper hands the next agent's in :mod:`.handover`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from livekit.agents import AgentTask, StopResponse, stt
from livekit.agents.voice import events as lk_events

from resilient_agent import (
    DEFAULT_HOOK_BUDGET_S,
    CloseReason,
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
    never_waits,
)
from resilient_agent._engine.pending_words import Fragment, PendingWords, normalized, typed_extra

from ..clock import loop_now
from ..session_facts import session_recognizer
from ..word_recovery import WordRecovery
from .dropped_turns import DroppedTurnAnswerer
from .handover import CARRY_KEY, CarriedWords, unanswered_messages
from .inference_merge import InferenceMerger
from .merging import merge_into
from .options import TurnKeeperOptions
from .transcript_match import remove_heard
from .withheld_audio import WithheldAudioTap, transcribe

__all__ = ["TurnKeeper"]

logger = get_logger("middleware.turn_keeper")

# Audio before the VAD's start of speech that belongs to the first word.
_ONSET_PAD_S = 0.3
# A VAD reports speech only after this much of it (Silero's min_speech_duration) and ends it only
# after more silence still; a shorter "speaking" window is a programmatic turn claim (typed text
# pins the state while the text callback runs), not the caller's voice.
_SHORTEST_VOICE_WINDOW_S = 0.05
_WITHHELD = "speech_withheld_from_stt"


class _Option:
    """One of the keeper's options, read from (and, set, checked into) its options value."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    def __get__(self, keeper: TurnKeeper | None, owner: type[Any] | None = None) -> Any:
        if keeper is None:
            return self
        return getattr(keeper.options, self.name)

    def __set__(self, keeper: TurnKeeper, value: Any) -> None:
        # an app may set a flag on the live instance before a session (docs/middleware.md):
        # checked as at construction, seen by the parts the next session builds
        keeper.options = keeper.options.changed(keeper.display_name, **{self.name: value})


class TurnKeeper(Middleware, WordRecovery):
    """Keeps the caller's words until they reach the LLM (on by default).

    Args:
        merge: Merge undelivered words into the next turn and answer dropped turns; off, the
            keeper only logs what livekit dropped.
        recover_withheld_audio: Re-transcribe speech livekit withheld from the STT.
        max_fragments: How many undelivered fragments are kept; older ones are logged and dropped.
        max_age_s: Fragments older than this are logged and dropped instead of answered.
        keep_audio_s: Seconds of caller audio kept for recovery.
        recovery_timeout_s: How long a user turn or an inference waits for a recovery in
            progress.
        keep_text_input: Make a non-forced ``session.interrupt()`` defer to a protected current
            speech instead of raising, so text typed meanwhile is answered after it (RoomIO's
            default text input interrupts first); ``force=True`` still cuts the speech.
        merge_format: How undelivered words and the turn they join become one user message:
            ``{fragments}`` (required) and ``{turn}`` (empty when no turn came), e.g.
            ``"(said while you were speaking: {fragments}) {turn}"`` to tell the LLM.
    """

    name = "TurnKeeper"

    merge = _Option()
    recover_withheld_audio = _Option()
    max_fragments = _Option()
    max_age_s = _Option()
    keep_audio_s = _Option()
    recovery_timeout_s = _Option()
    keep_text_input = _Option()
    merge_format = _Option()

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
        self.options = TurnKeeperOptions.checked(
            self.display_name,
            merge=merge,
            recover_withheld_audio=recover_withheld_audio,
            max_fragments=max_fragments,
            max_age_s=max_age_s,
            keep_audio_s=keep_audio_s,
            recovery_timeout_s=recovery_timeout_s,
            keep_text_input=keep_text_input,
            merge_format=merge_format,
        )
        # wrap_user_turn may wait this long for a recovery before calling call_next
        self.hook_budget_s = max(DEFAULT_HOOK_BUDGET_S, self.options.recovery_timeout_s + 1.0)
        self._recoveries: set[asyncio.Task[None]] = set()
        # the session's pending words and the parts that work on them, built again at each
        # setup (a store of its own until then)
        self._build_parts(PendingWords(max_fragments=self.max_fragments, max_age_s=self.max_age_s))
        self._tap: WithheldAudioTap | None = None
        self._release_input: Callable[[], None] | None = None
        self._speech_started_at: float | None = None
        # when the caller's last speech ended: livekit's time.time() stamp of the event, which
        # it emits before the turn it commits then (a reply's created_at is no earlier)
        self._speech_ended_at: float | None = None
        self._claimed_window = False
        self._ctx: MiddlewareContext | None = None
        # a deferred interrupt: RoomIO's text input (and livekit's DTMF workflow) interrupts, then
        # asks for a reply to its input; the next inference is that reply
        self._input_reply_expected = False

    def _build_parts(self, words: PendingWords) -> None:
        """The parts, each given the options value and the words, never the keeper."""
        options = self.options
        self._words = words
        self._answerer = DroppedTurnAnswerer(
            options,
            words,
            reporter=self.display_name,
            # asked at each look: a recovery in flight holds an answer back
            recovering=functools.partial(bool, self._recoveries),
        )
        self._inferences = InferenceMerger(options, words, reporter=self.display_name)

    # -- lifecycle -----------------------------------------------------------------------------
    async def setup(self, ctx: MiddlewareContext) -> None:
        """Tap the caller's audio, take over words a previous agent left, answer dropped turns."""
        self._ctx = ctx
        words = ctx.state.pending_words
        words.limit(max_fragments=self.max_fragments, max_age_s=self.max_age_s)
        self._build_parts(words)
        # SttRecovery asks for it on the context: the agent active then may have no chain
        ctx.provide(WordRecovery, self)
        carried: CarriedWords | None = ctx.take(CARRY_KEY)
        if carried is not None and carried.tap is not None and self.recover_withheld_audio:
            # the previous keeper's tap goes on (still observed), with the handoff's audio in it
            self._tap = carried.tap
        else:
            if carried is not None and carried.tap is not None:
                ctx.stop_observing_audio(carried.tap.on_frame)
                carried.tap.close()
            if self.recover_withheld_audio:
                # the speeches already live: the tap hears of later ones as they are created
                live = [info.handle for info in ctx.state.speeches.values()]
                tap = WithheldAudioTap(
                    ctx.session,
                    keep_seconds=self.keep_audio_s,
                    speeches=live,
                    listen=ctx.listen,
                    display_name=f"{self.display_name}.tap",
                )
                if ctx.observe_audio(tap.on_frame):
                    self._tap = tap
                else:
                    tap.close()
        if carried is not None:
            self._take_over(ctx, carried)
        if self.merge and self.keep_text_input:
            # text livekit refuses while a handoff drains becomes words to answer
            self._release_input = ctx.hold_input_through_handoff(self._keep_refused_text)
        if self.merge:
            self._answerer.start(ctx)

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Stop; on a handoff, carry the words to the next keeper, else log those never heard."""
        await self._answerer.stop()
        release, self._release_input = self._release_input, None
        if release is not None:
            release()
        # words being recovered are handed on too; a recovery is bounded in time
        await self._recoveries_done()
        for task in list(self._recoveries):
            task.cancel()
        lost = self._words.undelivered()
        if reason == "handoff":
            # the next keeper answers the words, and recovers those of a speech window still
            # open from the tap, which goes on being fed until it takes it
            carried = CarriedWords(lost, self._tap, self._speech_started_at)
            tap = self._tap

            def dropped(words: CarriedWords) -> None:
                if tap is not None:
                    ctx.stop_observing_audio(tap.on_frame)
                    tap.close()
                words.dropped()

            ctx.carry(CARRY_KEY, carried, on_untaken=dropped)
            if lost:
                logger.info("user_words_carried_over", fragments=len(lost))
            return
        if self._tap is not None:
            ctx.stop_observing_audio(self._tap.on_frame)
            self._tap.close()
        if lost:
            logger.warning(
                "user_words_lost",
                fragments=len(lost),
                words=sum(len(f.text.split()) for f in lost),
                why="the session ended before they could be answered",
            )

    def _take_over(self, ctx: MiddlewareContext, carried: CarriedWords) -> None:
        """Take the words, and the open speech window, the previous keeper left."""
        # the previous agent's activity is gone, and its turn with it: livekit cannot answer
        # these words (still pending in the session's state) any more, so they are answered as
        # soon as nothing blocks a reply
        if carried.fragments:
            # words heard as the next activity started may still become its turn: livekit first
            self._answerer.note_activity(max(f.heard_at for f in carried.fragments))
        start = carried.open_window_start
        if start is not None and ctx.state.user_state == "speaking":
            self._speech_started_at = start
        elif start is not None:
            # the caller stopped while no keeper followed the session: no livekit turn holds
            # the words, which are recovered from the tap
            self._close_speech_window(ctx, start, loop_now(), livekit_may_answer=False)

    def _keep_refused_text(self, text: str) -> None:
        self._words.add(Fragment(text, loop_now(), modality="text"))
        if self._speech_started_at is not None:
            self._claimed_window = True  # typed while the caller speaks: see on_user_state
        self._answerer.wake()

    # -- what the caller said ------------------------------------------------------------------
    @never_waits
    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        """Track speech windows; recover a window that livekit withheld from the STT."""
        now = loop_now()
        if ev.new_state == "speaking":
            if self._speech_started_at is not None:
                # a window typed input's turn claim left open: the caller's voice in it ended
                # unseen (livekit reports no change of state within a claimed turn)
                self._close_speech_window(
                    ctx, self._speech_started_at, now, livekit_may_answer=False
                )
            self._claimed_window = False
            self._speech_started_at = now
            self._answerer.note_caller_speaking(ctx)
        elif ev.old_state == "speaking" and self._claimed_window:
            # RoomIO's text callback ended its claim on the turn: "listening" then says nothing
            # of the caller, whose voice the VAD may still hear
            self._claimed_window = False
        elif ev.old_state == "speaking":
            started = self._speech_started_at or now
            self._speech_started_at = None
            self._speech_ended_at = ev.created_at
            self._close_speech_window(ctx, started, now)
        self._answerer.wake()

    def _close_speech_window(
        self, ctx: MiddlewareContext, started: float, now: float, *, livekit_may_answer: bool = True
    ) -> None:
        if livekit_may_answer:
            self._answerer.note_activity(now)
        tap, onset = self._tap, started - _ONSET_PAD_S
        if (
            tap is not None
            and now - started >= _SHORTEST_VOICE_WINDOW_S
            and tap.withheld_within(onset, now)
        ):
            frames = [f.frame for f in tap.window(onset, now)]
            self._start_recovery(ctx, started, now, frames, livekit_may_answer)

    @never_waits
    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Note the caller's activity: livekit's own turn may still carry the words."""
        if self._tap is not None:
            self._tap.note_transcript(final=ev.is_final, now=loop_now())
        if ev.is_final and ev.transcript.strip():
            # the session's runtime already added it to the pending words, as livekit told it
            self._answerer.note_activity(loop_now())
            if self._speech_started_at is None and self._speech_ended_at is not None:
                # a final after the caller's speech ended (a non-streaming STT transcribes the
                # VAD's segment then): a turn livekit committed meanwhile lacked these words
                self._answerer.note_final_after_speech(ctx, self._speech_ended_at)
            self._answerer.wake()

    @never_waits
    async def on_conversation_item(
        self, ctx: MiddlewareContext, ev: lk_events.ConversationItemAddedEvent
    ) -> None:
        """Take over what a handoff leaves unanswered (the core delivers words a message holds)."""
        item = ev.item
        if item.type == "agent_handoff" and self.merge:
            # messages the leaving agent took in and never answered, which the next agent's
            # own context does not hold: they are answered like any undelivered words. Not
            # around an awaited task: the agent that awaits it is inside a tool call (its
            # context does not show the call yet) and resumes with the task's turns merged in
            carried = (
                []
                if isinstance(ctx.previous_agent, AgentTask) or isinstance(ctx.agent, AgentTask)
                else unanswered_messages(
                    ctx.previous_agent, ctx.agent.chat_ctx, self._words.undelivered()
                )
            )
            if carried:
                logger.info("unanswered_user_messages_carried_over", messages=len(carried))
                self._words.add_earlier(carried)
            self._answerer.wake()  # the handoff is over: pending words may be answered now

    @never_waits
    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A blocking speech may have ended: look again."""
        self._answerer.note_speech_done(loop_now())
        self._answerer.wake()

    @never_waits
    async def on_agent_state(
        self, ctx: MiddlewareContext, ev: lk_events.AgentStateChangedEvent
    ) -> None:
        """The agent's state may unblock an answer."""
        self._answerer.wake()

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
        await self._recoveries_done()
        await self._inferences.forget_committed(ctx, turn)
        if self.merge:
            pending = self._words.undelivered()
            merged = merge_into(self._words, turn.text, self.options)
            if merged != turn.text:
                ctx.race_handled(self, "dropped_user_words", "merged_into_next_turn")
                # the message says which of its words were typed (data: the LLM never sees it)
                turn.message.extra.update(typed_extra(pending, spoken_turn=bool(turn.text.strip())))
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
        if self.merge:
            # words said before this inference may still be being re-transcribed (a slow STT
            # answer): they go in front of it, not into a reply of their own after it
            await self._recoveries_done()
        if self.merge and not self._recoveries and self._words.undelivered():
            await self._inferences.take_in(ctx, request, input_reply=input_reply)
        return await call_next(request)

    # -- recovery ------------------------------------------------------------------------------
    def recover_unheard_audio(
        self,
        ctx: MiddlewareContext,
        *,
        kind: str,
        on_words: Callable[[int], None] | None = None,
        as_turn: bool = False,
    ) -> bool:
        """Re-transcribe the caller's audio since the last final transcript (an STT lost it).

        The words join the caller's next turn, or are answered on their own, like any words
        livekit dropped (``SttRecovery`` calls this after restarting a dead STT stream); with
        ``as_turn``, as the turn livekit just ended without them (the Watchdog's restart of a
        stuck VAD over a non-streaming STT).

        Args:
            ctx: The session's context.
            kind: The race kind the recovered words are reported under.
            on_words: Called with the number of words recovered, just before they are reported
                (only when the audio held words the STT never delivered).
            as_turn: Answer the words at once as the caller's turn, through the agent's
                ``on_user_turn_completed`` (:mod:`.turn_answer`).

        Returns:
            False when no audio is kept (``recover_withheld_audio`` off, or no audio input).
        """
        if self._tap is None or session_recognizer(ctx.agent, ctx.session) is None:
            return False
        now = loop_now()
        # a final transcript is stamped as it arrives, after its words: audio from then on is
        # what the STT never finished
        heard = max((f.heard_at for f in self._words), default=now - self.keep_audio_s)
        window = self._tap.window(heard, now)
        if not window:
            return False
        # the earlier fragments are not in the re-transcribed audio: keep them out of its window
        frames = [f.frame for f in window]
        self._start_recovery(
            ctx,
            heard + _ONSET_PAD_S + 1e-3,
            now,
            frames,
            True,
            kind,
            on_words=on_words,
            as_turn=as_turn,
        )
        return True

    def _start_recovery(
        self,
        ctx: MiddlewareContext,
        started: float,
        ended: float,
        frames: list[Any],
        livekit_may_answer: bool,
        kind: str = _WITHHELD,
        *,
        on_words: Callable[[int], None] | None = None,
        as_turn: bool = False,
    ) -> None:
        recognizer = session_recognizer(ctx.agent, ctx.session)
        if recognizer is None:
            return
        task = asyncio.get_running_loop().create_task(
            self._recover(
                ctx,
                recognizer,
                started,
                ended,
                frames,
                livekit_may_answer,
                kind,
                on_words,
                as_turn=as_turn,
            )
        )
        self._recoveries.add(task)
        task.add_done_callback(self._recovery_done)

    async def _recoveries_done(self) -> None:
        """Wait, up to ``recovery_timeout_s``, for the recoveries in flight."""
        if self._recoveries:
            await asyncio.wait(set(self._recoveries), timeout=self.recovery_timeout_s)

    def _recovery_done(self, task: asyncio.Task[None]) -> None:
        self._recoveries.discard(task)
        self._answerer.wake()

    async def _recover(
        self,
        ctx: MiddlewareContext,
        recognizer: stt.STT[Any],
        started: float,
        ended: float,
        frames: list[Any],
        livekit_may_answer: bool,
        kind: str,
        on_words: Callable[[int], None] | None = None,
        *,
        as_turn: bool = False,
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
            for f in self._words
            if started - _ONSET_PAD_S <= f.heard_at <= ended + 0.5
            and not f.recovered
            and set(normalized(f.text).split()) <= recovered
        ]
        heard = {word for f in in_window for word in normalized(f.text).split()}
        # when the STT heard every word after all (little of the window was withheld), the
        # caller's words go on as livekit has them: there was nothing to recover
        if not recovered <= heard:
            kept = self._keep_recovered(ctx, text, in_window, (started, ended), kind, on_words)
            if kept is not None and as_turn:
                self._answerer.note_turn_without_words(kept, kind)
            if livekit_may_answer:
                # words livekit's STT never had, which its turn cannot carry: the caller was
                # last seen at the window's end, not when the recognition came back (a
                # provider's request time would otherwise delay the answer past a protected
                # speech's end, where waiting for livekit's turn starts over)
                self._answerer.note_activity(ended)
        elif livekit_may_answer:
            self._answerer.note_activity(loop_now())

    def _keep_recovered(
        self,
        ctx: MiddlewareContext,
        text: str,
        in_window: list[Fragment],
        window: tuple[float, float],
        kind: str,
        on_words: Callable[[int], None] | None = None,
    ) -> Fragment | None:
        """Keep the recovered words as a fragment of their own; the fragment, if any word is new."""
        started, ended = window
        delivered = " ".join(f.text for f in in_window if f.delivered)
        for fragment in in_window:
            if not fragment.delivered:
                fragment.superseded = True
        if delivered:
            text = remove_heard(text, delivered)
        if not text.strip():
            return None
        if kind == _WITHHELD:
            # reported on evidence: audio withheld while the VAD's speech window closed (a
            # protected speech starting in its trailing silence) may hold no words. A
            # middleware that asks for a recovery (SttRecovery) reports its own race.
            ctx.race_detected(self, kind, details={"seconds": round(ended - started, 2)})
        fragment = Fragment(text.strip(), ended, recovered=True, delivered_within=delivered)
        self._words.add(fragment)
        words = len(text.split())
        if on_words is not None:
            on_words(words)
        ctx.race_handled(
            self,
            kind,
            "recovered_words",
            details={"words": words},
            counts={"words_recovered": words},
        )
        return fragment

    # -- what is pending ------------------------------------------------------------------------
    @property
    def recovering(self) -> bool:
        """A recovery of withheld audio is in progress (its words may join the pending ones)."""
        return bool(self._recoveries)

    @property
    def pending_words(self) -> int:
        """Words heard but not yet delivered to the LLM."""
        return self._words.word_count()

    @property
    def buffered_fragments(self) -> int:
        """Fragments held in memory (bounded)."""
        return len(self._words)


async def _keep_in_history(ctx: MiddlewareContext, text: str) -> None:
    agent = ctx.agent
    history = agent.chat_ctx.copy()
    history.add_message(role="user", content=text)
    await agent.update_chat_ctx(history)
