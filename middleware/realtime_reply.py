"""A realtime model's reply that never comes: found on evidence, asked for again, once heard.

On a speech-to-speech model livekit stays ``listening`` until a reply's first audio, so a model
that hangs after the caller's turn (the server accepted the turn, or even created a response, and
then sends nothing) leaves the caller in silence, and nothing in livekit notices.

:class:`RealtimeReplyWatch` reads the evidence the same way on every provider: the caller's own
line carried a voice and words were transcribed (interim or final) after the agent last began to
speak, and then, for ``no_reply_s``, the caller's line was quiet, the agent did not speak, and no
tool ran. The server's own turn events are not needed (Gemini Live ends a turn only once its
reply is done, so a hung reply leaves ``user_state`` at ``speaking``).

Recovery: on OpenAI the session is interrupted (the hung reply's handle, and the server's
response, ``response.cancel``), then a reply is asked for again (``session.generate_reply()``:
the caller's words are in the model's conversation); a reply that arrives late is the
interrupted one: livekit drops its audio, so the caller does not hear the answer twice. A model
whose server drives its own turns (Gemini Live: ``auto_tool_reply_generation`` with server turn
detection) ignores ``interrupt()``, and its plugin routes a new reply into the generation still
open: there the watch asks the model's session itself (``generate_reply()`` of the agent's
``realtime_llm_session``, its future dropped), and the answer plays in the hung reply's own
handle, without livekit's 5 s interruption timeout. A model still silent after
``max_attempts`` is reported (``not_recovered``) and left alone. A slow model that answers within
``no_reply_s`` raises nothing.

A reply cut by the model's server: an error close mid-reply (Gemini Live's ``1011``, "Internal
error encountered.") ends the reply's audio stream where the socket went; the plugin reports a
recoverable ``error`` and reconnects, the caller hears the first part of the answer and then
nothing. The evidence is the reply's own: its audio stream from the model ran out at a
recoverable error of the model (within ``CUT_WITHIN_S``; the session's :class:`ModelAudio` notes
when), it said something (a reply that said nothing is a silent turn, ``SilentTurnGuard``'s), and
it played out without being interrupted. Once it is done, the reply is asked for again, the
model told why (:data:`CUT_INSTRUCTIONS`: its conversation ends in the part it said)
(``realtime_reply_cut``, ``asked_again``), at most ``max_attempts`` times in a row. A reply whose
stream ended before the error (the server had finished it) raises nothing. Replies the app asked
for itself (``generate_reply(...)``, a greeting with its instructions) are left alone: asking
again without their instructions would not say the same.

A goodbye that never comes after livekit's ``EndCallTool`` is not asked for again (the caller
wanted to leave): the tool hangs up from the done callback of the goodbye's handle, so that
handle is ended (``realtime_goodbye_missing``), and the hang-up it then asks for is let through
(``decide_shutdown``) while the caller stays silent. On a pipeline session the middleware leaves
the chain (the Watchdog's ``thinking`` stall covers a hanging LLM there).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from livekit.agents import Agent, llm
from livekit.agents.beta.tools import EndCallTool
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    MiddlewareNotUsed,
    ModelAudio,
    OptionChecker,
    ShutdownDecision,
    ShutdownRequest,
    SpeechInfo,
    ToolCall,
    ToolOutcome,
    get_logger,
    never_waits,
)

from .clock import loop_now, on_loop_clock

__all__ = [
    "CUT_INSTRUCTIONS",
    "CUT_RACE",
    "CUT_WITHIN_S",
    "GOODBYE_RACE",
    "RACE",
    "RealtimeReplyWatch",
]

RACE = "realtime_reply_missing"
GOODBYE_RACE = "realtime_goodbye_missing"
CUT_RACE = "realtime_reply_cut"
CUT_WITHIN_S = 0.25
CUT_INSTRUCTIONS = (
    "Your last reply was cut off by a connection error before the caller heard all of it. "
    "Give your answer to the caller's last turn again, in full."
)
"""A reply's audio stream that ran out this close to a model error was cut by it (the plugin
ends the stream as the socket goes, and reports the error right after)."""

logger = get_logger("middleware.realtime_reply")

_NEVER = float("-inf")


class RealtimeReplyWatch(Middleware):
    """Asks a realtime model again for a reply it never sent (on by default).

    Args:
        no_reply_s: Seconds after the caller's last voice and words (and the agent's last
            speech, and the last tool) with no reply audio before the reply counts as missing.
        max_attempts: Replies asked for again per caller turn before giving up.
        check_every_s: How often the watch looks while a reply is owed.

    Raises:
        OptionError: An option out of range.
    """

    name = "RealtimeReplyWatch"

    def __init__(
        self, *, no_reply_s: float = 5.0, max_attempts: int = 2, check_every_s: float = 0.25
    ) -> None:
        check = OptionChecker(self.display_name)
        self.no_reply_s = check.number("no_reply_s", no_reply_s, gt=0, le=120)
        self.max_attempts = int(check.number("max_attempts", max_attempts, ge=1, le=10))
        self.check_every_s = check.number("check_every_s", check_every_s, gt=0, le=5)
        self._ctx: MiddlewareContext | None = None
        self._look_timer: asyncio.TimerHandle | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._spoke_at = _NEVER  # the agent last began to speak
        self._quiet_from = _NEVER  # the agent last stopped speaking, a tool last ran, or asked
        self._words_at = _NEVER  # the last transcript with words
        self._attempts = 0
        # the hung reply's handle, interrupted: the reply asked again plays only once it is done
        self._cut: SpeechHandle | None = None
        self._end_call_at = _NEVER  # livekit's EndCallTool last ran: a goodbye is owed
        # a goodbye given up on: its handle, and time.time() then (the clock of caller_voiced_at)
        self._abandoned: tuple[SpeechHandle, float] | None = None
        self._audio: ModelAudio | None = None
        self._model_error_at = _NEVER  # the model's last recoverable error (it reconnects)
        self._cut_retries = 0  # cut replies asked for again in a row
        self._asked: set[str] = set()  # the replies this watch asked for, not yet done

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Watch, on a session whose active agent runs a realtime model."""
        model_input = ctx.model_input
        if model_input is None or not model_input.available:
            raise MiddlewareNotUsed
        self._ctx = ctx
        self._audio = ModelAudio.of(ctx)
        ctx.listen(ctx.session, "error", self._on_error, by=self)

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Stop watching (the next agent's watch takes over at a handoff)."""
        self._ctx = None
        self._stop_looking()
        if self._recovery is not None:
            self._recovery.cancel()

    @never_waits
    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Words of the caller: a reply is owed if they came after the agent last spoke."""
        if ev.transcript.strip():
            self._words_at = loop_now()
            self._cut_retries = 0
            self._look_soon()

    @never_waits
    async def on_agent_state(
        self, ctx: MiddlewareContext, ev: lk_events.AgentStateChangedEvent
    ) -> None:
        """The agent's audio is the reply (or its end starts the wait for the next one)."""
        now = loop_now()
        if ev.new_state == "speaking":
            self._spoke_at = now
            self._attempts = 0
            self._stop_looking()
        elif ev.old_state == "speaking":
            self._quiet_from = now
            self._look_soon()

    @never_waits
    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A reply made after the caller's words that played out is their answer.

        One that played out with no audio is a silent turn, which ``SilentTurnGuard`` answers:
        it is not a reply that never came, and is not asked for twice. One cut by the model's
        error is asked for again at once.
        """
        ended = self._audio.take(speech.id) if self._audio is not None else None
        asked = speech.id in self._asked
        self._asked.discard(speech.id)
        if self._cut_by_model_error(speech, ended, asked=asked):
            assert ended is not None
            self._ask_after_cut(ctx, speech, ended)
            return
        if speech.handle.interrupted or not speech.created_at:
            return
        if ended is not None:
            self._cut_retries = 0  # a reply whose audio came whole
        created = on_loop_clock(speech.created_at)
        if created >= self._words_at:
            self._spoke_at = max(self._spoke_at, created)
            self._attempts = 0

    @never_waits
    async def on_tool_exit(
        self, ctx: MiddlewareContext, call: ToolCall, outcome: ToolOutcome
    ) -> None:
        """An ``EndCallTool`` of livekit ran: what is owed now is its goodbye, then the hang-up."""
        if _is_livekit_end_call(ctx.agent, call.name):
            self._end_call_at = self._quiet_from = loop_now()
            self._look_soon()

    def decide_shutdown(
        self, ctx: MiddlewareContext, request: ShutdownRequest
    ) -> ShutdownDecision | None:
        """The hang-up of a goodbye that never came goes through while the caller is silent."""
        abandoned = self._abandoned
        if abandoned is None or request.farewell is None:
            return None
        handle, since = abandoned
        if request.farewell.handle is not handle or ctx.state.user_spoke_since(since):
            return None  # the caller spoke: ConditionalHangup keeps the call as usual
        ctx.race_handled(self, GOODBYE_RACE, "hung_up", details={"speech_id": handle.id})
        return ShutdownDecision.now("the goodbye never came; the caller asked to end the call")

    # -- a reply cut by the model's error -------------------------------------------------------
    def _on_error(self, ev: lk_events.ErrorEvent) -> None:
        error = ev.error
        if isinstance(error, llm.RealtimeModelError) and error.recoverable:
            self._model_error_at = loop_now()

    def _cut_by_model_error(self, speech: SpeechInfo, ended: float | None, *, asked: bool) -> bool:
        """The reply's audio ran out at a model error, after it said something, uninterrupted."""
        handle = speech.handle
        if ended is None or handle.interrupted or (speech.user_initiated and not asked):
            return False
        if abs(self._model_error_at - ended) > CUT_WITHIN_S:
            return False
        # a reply that said nothing is a silent turn: SilentTurnGuard asks for it again
        return any(
            item.type == "message" and item.role == "assistant" for item in handle.chat_items
        )

    def _ask_after_cut(self, ctx: MiddlewareContext, speech: SpeechInfo, ended: float) -> None:
        details: dict[str, Any] = {
            "speech_id": speech.id,
            "error_after_s": round(self._model_error_at - ended, 3),
        }
        ctx.race_detected(self, CUT_RACE, details=details)
        if self._cut_retries >= self.max_attempts:
            ctx.race_handled(self, CUT_RACE, "not_recovered", details=details)
            return
        try:
            # the model's conversation ends in the part it said: told why, it answers again
            handle = ctx.session.generate_reply(instructions=CUT_INSTRUCTIONS)
        except RuntimeError as exc:
            # the session is closing or the agent leaving: no reply can be asked for now
            logger.warning("realtime_reply_cut_not_asked_again", error=str(exc))
            ctx.race_handled(self, CUT_RACE, "not_recovered", details=details)
            return
        self._cut_retries += 1
        self._asked.add(handle.id)
        details["attempt"] = self._cut_retries
        logger.info(
            "realtime_reply_asked_again",
            cut=speech.id,
            why="the model's server ended the reply with an error mid-way; it reconnects",
        )
        ctx.race_handled(self, CUT_RACE, "asked_again", details=details)

    # -- the watch -------------------------------------------------------------------------------
    def _owed(self, ctx: MiddlewareContext) -> bool:
        """The caller spoke words after the agent last began to speak."""
        return self._words_at > self._spoke_at and self._voiced_at(ctx) > self._spoke_at

    def _voiced_at(self, ctx: MiddlewareContext) -> float:
        # ConversationState keeps the caller's voice on time.time(); the watch runs on loop time
        return on_loop_clock(ctx.state.caller_voiced_at)

    def _look_soon(self) -> None:
        if self._look_timer is None and self._ctx is not None:
            self._look_timer = asyncio.get_running_loop().call_later(self.check_every_s, self._look)

    def _stop_looking(self) -> None:
        if self._look_timer is not None:
            self._look_timer.cancel()
            self._look_timer = None

    def _look(self) -> None:
        self._look_timer = None
        ctx = self._ctx
        if ctx is None or not self._owed(ctx):
            return
        if self._recovery is not None and not self._recovery.done():
            return
        now = loop_now()
        state = ctx.state
        cut_pending = self._cut is not None and not self._cut.done()
        if (
            state.agent_state == "speaking"
            or state.tools_in_flight
            or state.caller_speaking
            or cut_pending
        ):
            # not silent (or the reply asked for again still waits behind the hung one): the wait
            # starts again once the agent, the tool and the caller are quiet
            self._quiet_from = now
            self._look_soon()
            return
        waited = now - max(self._words_at, self._voiced_at(ctx), self._quiet_from)
        if waited < self.no_reply_s - 1e-9:
            self._look_timer = asyncio.get_running_loop().call_later(
                min(self.check_every_s, self.no_reply_s - waited), self._look
            )
            return
        if self._end_call_at > self._spoke_at:
            if self._abandoned is None:
                self._give_up_goodbye(ctx, round(waited, 3))
            return
        if self._attempts >= self.max_attempts:
            self._attempts += 1
            if self._attempts == self.max_attempts + 1:
                ctx.race_handled(
                    self, RACE, "not_recovered", details={"attempts": self.max_attempts}
                )
            return
        self._recovery = asyncio.get_running_loop().create_task(
            self._ask_again(ctx, round(waited, 3)), name="resilient_agent.realtime_reply"
        )

    async def _ask_again(self, ctx: MiddlewareContext, waited: float) -> None:
        self._attempts += 1
        details: dict[str, Any] = {"waited_s": waited, "attempt": self._attempts}
        ctx.race_detected(self, RACE, details=details)
        session = ctx.session
        current = session.current_speech
        model = _server_driven_session(ctx.agent)
        if model is not None:
            # the interrupt would do nothing and leave the hung generation holding livekit's
            # handle for its 5 s interruption timeout; the server answers a new request into the
            # generation still open, so its handle plays the reply. The request's future is not
            # the reply's (livekit would wait on it for a generation that never opens).
            model.generate_reply().cancel()
            interrupted = None
        else:
            # the hung reply's handle goes, and the server's response with it (response.cancel)
            session.interrupt(force=True)
            self._cut = current
            session.generate_reply()
            interrupted = current.id if current is not None else None
        self._quiet_from = loop_now()
        logger.info(
            "realtime_reply_asked_again",
            waited_s=waited,
            interrupted=interrupted,
            why=(
                "the caller spoke and nothing answered: no reply audio, no tool, a quiet line "
                f"for {self.no_reply_s:g} s"
            ),
        )
        ctx.race_handled(self, RACE, "asked_again", details=details)
        self._look_soon()

    def _give_up_goodbye(self, ctx: MiddlewareContext, waited: float) -> None:
        """End the goodbye's handle: livekit's EndCallTool hangs up once it is done."""
        current = ctx.session.current_speech
        if current is None or current.done():
            return
        self._abandoned = (current, time.time())
        ctx.race_detected(self, GOODBYE_RACE, details={"waited_s": waited, "speech_id": current.id})
        logger.info(
            "realtime_goodbye_abandoned",
            waited_s=waited,
            speech_id=current.id,
            why=(
                "livekit's EndCallTool hangs up when its goodbye is done, and the goodbye never "
                f"came ({self.no_reply_s:g} s of a quiet line): it is ended so the hang-up goes on"
            ),
        )
        ctx.session.interrupt(force=True)


def _server_driven_session(agent: Agent) -> llm.RealtimeSession[Any] | None:
    """The agent's realtime session if its server drives its own turns, as Gemini Live's does.

    A model that answers tool results on its own (``auto_tool_reply_generation``) and detects
    the caller's turns itself ignores the client's ``interrupt()``: only its activity detection
    ends a generation, and a new request is answered into the generation still open.
    """
    try:
        model = agent.realtime_llm_session
    except RuntimeError:
        return None  # the agent is leaving, or runs no realtime model
    capabilities = model.capabilities
    if capabilities.turn_detection and capabilities.auto_tool_reply_generation:
        return model
    return None


def _is_livekit_end_call(agent: Agent, tool: str) -> bool:
    """Whether ``tool`` is one of the agent's livekit ``EndCallTool`` tools."""
    for toolset in agent.tools:
        # a ResilientAgent runs the app's toolsets wrapped, the app's own one as ``inner``
        toolset = getattr(toolset, "inner", toolset)
        if isinstance(toolset, EndCallTool) and any(t.id == tool for t in toolset.tools):
            return True
    return False
