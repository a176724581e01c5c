"""Every hang-up the app asks for goes through the chain's ``decide_shutdown``.

While a ``ResilientAgent`` with a ``decide_shutdown`` hook is in a session, ``session.shutdown``,
``session.aclose`` and ``job_ctx.shutdown`` are shadowed on the instances (see
:mod:`resilient_agent._livekit.interception`). How a call is told apart (docs/hang-up.md has the
table):

* ``session.shutdown()`` and ``job_ctx.shutdown()`` are the app's hang-up, wherever they are
  called from (a tool body, a speech-done callback, a task of the app, livekit's
  ``EndCallTool``): they become a :class:`ShutdownRequest`, and the original runs only if the
  chain lets it. livekit itself never calls them on a session that is still open.
* Once the session is closing or closed, every call passes through at once: livekit's
  ``EndCallTool`` shuts the job down from the ``close`` event, and a job shut down from outside
  closes the session through ``session.aclose()``.
* ``session.aclose()`` passes through, except inside a tool body, where awaiting it deadlocks
  (the close waits for the tool): there it becomes a request and returns at once.
* A close livekit starts itself (the caller left, a fatal error, the job's own shutdown
  callback) does not go through any of these methods, so nothing can hold it; a decision still
  pending then stops waiting and hangs up at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession, get_job_context
from livekit.agents.voice.speech_handle import SpeechHandle

from .._engine.chain import ChainDecisions
from .._engine.log import get_logger
from .._engine.requests import ShutdownDecision, ShutdownRequest, ShutdownSource, SpeechInfo
from .._session.report import SHUTDOWN_REQUEST
from .._session.tools import current_tool, outside_tools
from .compat import session_closing
from .interception import Interceptor

__all__ = ["ShutdownGate"]

logger = get_logger("shutdown")

Proceed = Callable[[], Awaitable[Any] | None]

# A tool that asks to hang up this long after its farewell ended has been sleeping.
_SLEEP_HINT_AFTER_S = 1.0
# A request made this soon after a speech finished comes from that speech's done callback (or a
# task that awaited it): that speech is the farewell.
_JUST_FINISHED_S = 0.25
_warned_about_sleeping = False

CALL_GOES_ON = (
    "The call was not ended ({reason}): the caller is still on the line and the call goes on. "
    "Answer the caller; end the call only if they say goodbye again."
)
"""What the model reads after a vetoed hang-up."""


class ShutdownGate:
    """Routes the app's hang-ups in one session through ``decide_shutdown``.

    Args:
        chain: Asked through ``decide_shutdown``.
        farewell_of: Returns the last speech a tool created.
        speech_done_at: When a speech finished, by id, if it did.
        bound_s: A decision that keeps waiting for a speech gives up waiting after this long
            and hangs up, as the app asked.
    """

    def __init__(
        self,
        chain: ChainDecisions,
        farewell_of: Callable[[str | None], SpeechInfo | None],
        *,
        speech_done_at: Callable[[str], float | None] = lambda _id: None,
        bound_s: float = 30.0,
    ) -> None:
        self._chain = chain
        self._ctx = chain.ctx
        self._farewell_of = farewell_of
        self._speech_done_at = speech_done_at
        self._bound_s = bound_s
        self._session: AgentSession[Any] = chain.ctx.session
        self._pending: asyncio.Task[None] | None = None
        self._closing = False
        self._session_closed = False
        # made only when a decision waits (most calls never have one to wait on)
        self._closed: asyncio.Event | None = None
        self._live: dict[str, SpeechInfo] = {}
        self._last_done: tuple[SpeechInfo, float] | None = None
        self._installed = True
        self.decisions: list[tuple[ShutdownRequest, ShutdownDecision]] = []

    @property
    def closing(self) -> bool:
        """Whether the session is closing or closed: every call then passes through."""
        if not self._closing and session_closing(self._session):
            self._closing = True
        return self._closing

    def install(self, interceptor: Interceptor) -> None:
        """Shadow ``session.shutdown``, ``session.aclose`` and ``job_ctx.shutdown``.

        The session's events reach the gate through the runtime's listeners
        (:meth:`speech_created`, :meth:`session_closed`): livekit inspects the signature of
        every listener at every emit, so each listener of its own would cost per event. The
        owner's ``interceptor.restore_all()`` removes the gate.
        """
        session = self._session
        interceptor.on_restore(self._uninstalled)

        def shadow_shutdown(original: Callable[..., None]) -> Callable[..., None]:
            def shutdown(*, drain: bool = True) -> None:
                if self.closing:
                    original(drain=drain)
                    return
                self.request("session.shutdown", lambda: original(drain=drain))

            return shutdown

        def shadow_aclose(original: Callable[[], Awaitable[None]]) -> Callable[[], Any]:
            async def aclose() -> None:
                if current_tool() is None or self.closing:
                    self._closing = True
                    await original()
                    return
                # awaiting the close from inside a tool deadlocks: the close waits for the tool
                self.request("session.aclose", original)

            return aclose

        interceptor.install("AgentSession.shutdown", session, shadow_shutdown)
        interceptor.install("AgentSession.aclose", session, shadow_aclose)
        try:
            job: Any = get_job_context()
        except RuntimeError:
            return

        def shadow_job_shutdown(original: Callable[..., None]) -> Callable[..., None]:
            def job_shutdown(reason: str = "user requested") -> None:
                if self.closing:
                    original(reason)
                    return
                self.request("job.shutdown", lambda: original(reason))

            return job_shutdown

        interceptor.install("JobContext.shutdown", job, shadow_job_shutdown)

    def _uninstalled(self) -> None:
        """Stop following the session (the interceptor restores the methods)."""
        self._installed = False

    def session_closed(self) -> None:
        """The session emitted ``close``: every call from now on passes through."""
        self._closing = True
        self._session_closed = True
        if self._closed is not None:
            self._closed.set()

    def speech_created(self, info: SpeechInfo) -> None:
        """The runtime noted a new speech: follow it until it is done (a farewell candidate)."""
        if not self._installed:
            return
        self._live[info.id] = info
        # a bound method, not a closure per speech: livekit keeps its done callbacks
        info.handle.add_done_callback(self._speech_finished)

    def _speech_finished(self, handle: SpeechHandle) -> None:
        info = self._live.pop(handle.id, None)
        if info is not None:
            self._last_done = (info, time.time())

    def request(
        self, source: ShutdownSource, proceed: Proceed, *, farewell: SpeechInfo | None = None
    ) -> bool:
        """Start deciding a shutdown; False if one is already being decided (idempotent)."""
        if self._pending is not None and not self._pending.done():
            logger.info("shutdown_already_requested", source=source, action="ignored")
            return False
        tool = current_tool()
        if farewell is None and tool is not None:
            farewell = self._farewell_of(tool)
            self._warn_about_sleeping(tool, farewell)
        elif farewell is None:
            farewell = self._farewell_outside_tools()
        request = ShutdownRequest(
            source=source, tool=tool, farewell=farewell, requested_at=time.time()
        )
        # the decision outlives the tool: its task must not inherit the tool's context
        with outside_tools():
            self._pending = asyncio.get_running_loop().create_task(
                self._decide(request, proceed), name="resilient_agent.shutdown"
            )
        return True

    def _farewell_outside_tools(self) -> SpeechInfo | None:
        """The speech a request made outside tool bodies says goodbye with, on evidence.

        A speech that finished this instant (the request comes from its done callback, or from
        a task that awaited it), else the speech still playing (the app hangs up after it),
        else none: the request is judged from the moment it was made.
        """
        for info in list(self._live.values()):
            if info.handle.done():
                return info  # its done callbacks are running: this request is one of them
        if self._last_done is not None:
            info, done_at = self._last_done
            if time.time() - done_at <= _JUST_FINISHED_S:
                return info
        current = self._session.current_speech
        if current is not None and not current.done():
            return self._live.get(current.id)
        return None

    def _warn_about_sleeping(self, tool: str | None, farewell: SpeechInfo | None) -> None:
        """Once per process: a tool that sleeps after its farewell delays every hang-up."""
        global _warned_about_sleeping
        if _warned_about_sleeping or tool is None or farewell is None:
            return
        done_at = self._speech_done_at(farewell.id)
        if done_at is None or time.time() - done_at < _SLEEP_HINT_AFTER_S:
            return
        _warned_about_sleeping = True
        logger.warning(
            "hang_up_after_sleep",
            tool=tool,
            waited_s=round(time.time() - done_at, 2),
            fix=(
                "return from the tool instead of sleeping: resilient_agent.end_call_tool() or "
                "agent.hang_up_after_farewell() hang up as soon as the farewell has played"
            ),
        )

    def _report(self, request: ShutdownRequest, decision: ShutdownDecision, action: str) -> None:
        self._ctx.race_handled(
            "ShutdownGate",
            SHUTDOWN_REQUEST,
            action,
            details={"source": request.source, "tool": request.tool, "reason": decision.reason},
        )

    def _ask(self, request: ShutdownRequest) -> ShutdownDecision:
        answer = self._chain.decide("decide_shutdown", request)
        if isinstance(answer, ShutdownDecision):
            return answer
        return ShutdownDecision.now("no middleware objected")

    async def _decide(self, request: ShutdownRequest, proceed: Proceed) -> None:
        decision = await self._decision(request)
        if decision.action == "now" and decision.tail_pad_s > 0 and not self.closing:
            await self._until_closed(asyncio.sleep(decision.tail_pad_s))
            # the caller may have started speaking during the pad: the line is still open
            again = self._ask(request) if not self.closing else decision
            if again.action == "veto":
                decision = again
        self.decisions.append((request, decision))
        if decision.action == "veto":
            self._report(request, decision, "kept_call")
            await self._tell_the_model_the_call_goes_on(decision)
            return
        self._report(request, decision, "hung_up")
        # the call is ending: what the hang-up calls (shutdown, then the job's) passes through
        self._closing = True
        result = proceed()
        if result is not None:
            await result

    async def _tell_the_model_the_call_goes_on(self, decision: ShutdownDecision) -> None:
        """Note in the agent's context that the hang-up did not happen.

        Otherwise the context ends in the end-call tool's output and the goodbye, and a model
        may take the call for ended (and never hang up again, or answer as if nobody listened).
        """
        agent = self._ctx.agent
        context = agent.chat_ctx.copy()
        context.add_message(role="system", content=CALL_GOES_ON.format(reason=decision.reason))
        try:
            await agent.update_chat_ctx(context)
        except RuntimeError as exc:  # the agent left the session meanwhile (a handoff)
            logger.info("call_goes_on_not_noted", error=repr(exc))

    async def _decision(self, request: ShutdownRequest) -> ShutdownDecision:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._bound_s
        while True:
            if self.closing:
                # livekit is closing the session (the caller left, the job shuts down, an
                # error): nobody is left to keep the call for; the app's hang-up goes through
                return ShutdownDecision.now("the session is closing")
            decision = self._ask(request)
            speech = decision.wait_for
            if decision.action != "wait" or speech is None:
                return decision
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ShutdownDecision.now("waited for the farewell too long")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._until_closed(_speech_done(speech)), remaining)

    async def _until_closed(self, aw: Awaitable[None]) -> None:
        """Await ``aw``, or stop as soon as the session closes."""
        if self._closed is None:
            self._closed = asyncio.Event()
            if self._session_closed:
                self._closed.set()
        work = asyncio.ensure_future(aw)
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({work, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, closed):
                task.cancel()


async def _speech_done(handle: SpeechHandle) -> None:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _mark(_: SpeechHandle) -> None:
        if not done.done():
            done.set_result(None)

    handle.add_done_callback(_mark)
    await done
