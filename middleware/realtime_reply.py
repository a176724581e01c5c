"""A realtime model's reply that never comes: found on evidence, asked for again, once heard.

On a speech-to-speech model livekit stays ``listening`` until a reply's first audio, so a model
that hangs after the caller's turn (the server accepted the turn, or even created a response, and
then sends nothing) leaves the caller in silence, and nothing in livekit notices.

:class:`RealtimeReplyWatch` reads the evidence the same way on every provider: the caller's own
line carried a voice and words were transcribed (interim or final) after the agent last began to
speak, and then, for ``no_reply_s``, the caller's line was quiet, the agent did not speak, and no
tool ran. The server's own turn events are not needed (Gemini Live ends a turn only once its
reply is done, so a hung reply leaves ``user_state`` at ``speaking``).

Recovery: the session is interrupted (the hung reply's handle, and on OpenAI the server's
response, ``response.cancel``), then a reply is asked for again (``session.generate_reply()``:
the caller's words are in the model's conversation). Gemini's ``interrupt()`` does nothing under
server activity detection; the new request replaces the hung generation there (the plugin
finalises the previous one). A reply that arrives late is the interrupted one: livekit drops its
audio, so the caller does not hear the answer twice. A model still silent after
``max_attempts`` is reported (``not_recovered``) and left alone. A slow model that answers within
``no_reply_s`` raises nothing.

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

from livekit.agents import Agent
from livekit.agents.beta.tools import EndCallTool
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    MiddlewareNotUsed,
    OptionChecker,
    ShutdownDecision,
    ShutdownRequest,
    SpeechInfo,
    ToolCall,
    ToolOutcome,
    get_logger,
)

from .clock import loop_now, on_loop_clock

__all__ = ["GOODBYE_RACE", "RACE", "RealtimeReplyWatch"]

RACE = "realtime_reply_missing"
GOODBYE_RACE = "realtime_goodbye_missing"

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

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Watch, on a session whose active agent runs a realtime model."""
        model_input = ctx.model_input
        if model_input is None or not model_input.available:
            raise MiddlewareNotUsed
        self._ctx = ctx

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Stop watching (the next agent's watch takes over at a handoff)."""
        self._ctx = None
        self._stop_looking()
        if self._recovery is not None:
            self._recovery.cancel()

    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Words of the caller: a reply is owed if they came after the agent last spoke."""
        if ev.transcript.strip():
            self._words_at = loop_now()
            self._look_soon()

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

    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A reply made after the caller's words that played out is their answer.

        One that played out with no audio is a silent turn, which ``SilentTurnGuard`` answers:
        it is not a reply that never came, and is not asked for twice.
        """
        if speech.handle.interrupted or not speech.created_at:
            return
        created = on_loop_clock(speech.created_at)
        if created >= self._words_at:
            self._spoke_at = max(self._spoke_at, created)
            self._attempts = 0

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
        # the hung reply's handle goes (and OpenAI's server response: response.cancel); Gemini
        # ignores the interrupt under server VAD, so its hung generation keeps the handle until
        # livekit's interruption timeout: the new reply is asked for now, and plays after it
        session.interrupt(force=True)
        self._cut = current
        session.generate_reply()
        self._quiet_from = loop_now()
        logger.info(
            "realtime_reply_asked_again",
            waited_s=waited,
            interrupted=current.id if current is not None else None,
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


def _is_livekit_end_call(agent: Agent, tool: str) -> bool:
    """Whether ``tool`` is one of the agent's livekit ``EndCallTool`` tools."""
    for toolset in agent.tools:
        # a ResilientAgent runs the app's toolsets wrapped, the app's own one as ``inner``
        toolset = getattr(toolset, "inner", toolset)
        if isinstance(toolset, EndCallTool) and any(t.id == tool for t in toolset.tools):
            return True
    return False
