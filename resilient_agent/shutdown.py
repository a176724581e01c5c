"""Every request to end the call goes through the chain's ``decide_shutdown``.

App code written today ends calls from inside tools: ``session.shutdown()``,
``get_job_context().shutdown()`` or ``await session.aclose()``, often in a ``finally`` after a
farewell and a sleep. While a ``ResilientAgent`` with a ``decide_shutdown`` hook is in a session,
those three methods are shadowed on the session and job instances (public names only, restored
when the agent leaves): a call made inside a tool body becomes a :class:`ShutdownRequest`, and
the original method runs only if the chain lets it. Calls made outside tool bodies (livekit's
own, the app's entrypoint, a test harness) pass straight through.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession, get_job_context
from livekit.agents.voice.speech_handle import SpeechHandle

from .chain import MiddlewareChain
from .log import get_logger
from .report import SHUTDOWN_REQUEST
from .requests import ShutdownDecision, ShutdownRequest, ShutdownSource, SpeechInfo
from .state import MiddlewareContext
from .tools import current_tool, outside_tools

__all__ = ["ShutdownGate"]

logger = get_logger("shutdown")

Proceed = Callable[[], Awaitable[Any] | None]

# A tool that asks to hang up this long after its farewell ended has been sleeping.
_SLEEP_HINT_AFTER_S = 1.0
_warned_about_sleeping = False


class ShutdownGate:
    """Shadows the session's and the job's shutdown methods for one session.

    Args:
        chain: Asked through ``decide_shutdown``.
        ctx: The middleware context.
        farewell_of: Returns the last speech a tool created.
        bound_s: A decision that keeps waiting for a speech gives up waiting after this long
            and hangs up, as the app asked.
    """

    def __init__(
        self,
        chain: MiddlewareChain,
        ctx: MiddlewareContext,
        farewell_of: Callable[[str | None], SpeechInfo | None],
        *,
        speech_done_at: Callable[[str], float | None] = lambda _id: None,
        bound_s: float = 30.0,
    ) -> None:
        self._chain = chain
        self._ctx = ctx
        self._farewell_of = farewell_of
        self._speech_done_at = speech_done_at
        self._bound_s = bound_s
        self._session: AgentSession[Any] = ctx.session
        self._job: Any = None
        self._saved_job_shutdown: Any = None
        self._pending: asyncio.Task[None] | None = None
        self.decisions: list[tuple[ShutdownRequest, ShutdownDecision]] = []

    def install(self) -> None:
        """Shadow ``session.shutdown``, ``session.aclose`` and ``job_ctx.shutdown``."""
        session = self._session
        original_shutdown = session.shutdown
        original_aclose = session.aclose

        def shutdown(*args: Any, **kwargs: Any) -> None:
            if current_tool() is None:
                return original_shutdown(*args, **kwargs)
            self.request("session.shutdown", lambda: original_shutdown(*args, **kwargs))
            return None

        async def aclose() -> None:
            if current_tool() is None:
                await original_aclose()
                return None
            # awaiting the close from inside a tool deadlocks: the close waits for the tool
            self.request("session.aclose", original_aclose)
            return None

        session.shutdown = shutdown  # type: ignore[method-assign]
        session.aclose = aclose  # type: ignore[method-assign]
        try:
            self._job = get_job_context()
        except RuntimeError:
            self._job = None
        if self._job is not None:
            job = self._job
            self._saved_job_shutdown = vars(job).get("shutdown")
            original_job_shutdown = job.shutdown

            def job_shutdown(reason: str = "user requested") -> None:
                if current_tool() is None:
                    original_job_shutdown(reason)
                    return
                self.request("job.shutdown", lambda: original_job_shutdown(reason))

            job.shutdown = job_shutdown

    def uninstall(self) -> None:
        """Put the original methods back."""
        for attr in ("shutdown", "aclose"):
            with contextlib.suppress(AttributeError):
                delattr(self._session, attr)
        if self._job is not None:
            if self._saved_job_shutdown is not None:
                self._job.shutdown = self._saved_job_shutdown
            else:
                with contextlib.suppress(AttributeError):
                    del self._job.shutdown

    def request(
        self, source: ShutdownSource, proceed: Proceed, *, farewell: SpeechInfo | None = None
    ) -> bool:
        """Start deciding a shutdown; False if one is already being decided (idempotent)."""
        if self._pending is not None and not self._pending.done():
            logger.info("shutdown_already_requested", source=source, action="ignored")
            return False
        tool = current_tool()
        if farewell is None:
            self._warn_about_sleeping(tool, self._farewell_of(tool))
        request = ShutdownRequest(
            source=source,
            tool=tool,
            farewell=farewell if farewell is not None else self._farewell_of(tool),
            requested_at=time.time(),
        )
        # the decision outlives the tool: its task must not inherit the tool's context
        with outside_tools():
            self._pending = asyncio.get_running_loop().create_task(
                self._decide(request, proceed), name="resilient_agent.shutdown"
            )
        return True

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

    async def _decide(self, request: ShutdownRequest, proceed: Proceed) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._bound_s
        while True:
            answer = self._chain.decide("decide_shutdown", self._ctx, request)
            decision = (
                answer
                if isinstance(answer, ShutdownDecision)
                else ShutdownDecision.now("no middleware objected")
            )
            speech = decision.wait_for
            if decision.action != "wait" or speech is None:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                decision = ShutdownDecision.now("waited for the farewell too long")
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_speech_done(speech), timeout=remaining)
        self.decisions.append((request, decision))
        if decision.action == "veto":
            self._report(request, decision, "kept_call")
            return
        if decision.tail_pad_s > 0:
            await asyncio.sleep(decision.tail_pad_s)
        self._report(request, decision, "hung_up")
        result = proceed()
        if result is not None:
            await result


async def _speech_done(handle: SpeechHandle) -> None:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _mark(_: SpeechHandle) -> None:
        if not done.done():
            done.set_result(None)

    handle.add_done_callback(_mark)
    await done
