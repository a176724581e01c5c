"""The session's close returns only once the chain has stopped (#20, the Python 3.13 failure).

livekit emits ``close`` synchronously and awaits none of its listeners, so the bridge's stop
(``on_session_end``, every middleware's ``aclose``, the call summary) runs in a task of its own.
Before the fix the close returned with that task still pending: a caller that ended its loop
right then (``asyncio.run`` after ``await session.aclose()``, a job process after its shutdown
callbacks) cancelled the stop or never ran it. On Python 3.10/3.11 ``asyncio.wait_for`` ran the
close in a task of its own, and the extra loop turns it took usually let the stop finish; since
3.12 it runs the close inline, and the lab's calls lost their ``aclose`` and ``call_summary``.
Each test looks at the chain the moment the close returns, with no loop turn in between.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from livekit.agents import AgentSession
from livekit.agents.testing import fake_job_context
from livekit.agents.voice.events import CloseEvent
from structlog.testing import capture_logs

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent
from resilient_agent.testing import run_virtual

Closer = Callable[[AgentSession[Any]], Awaitable[None]]


class Recorder(Middleware):
    """Writes down, in order, what the chain told it at the end of the session."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_session_end(self, ctx: MiddlewareContext, ev: CloseEvent) -> None:
        assert isinstance(ev, CloseEvent)
        self.seen.append("on_session_end")

    async def aclose(self) -> None:
        await asyncio.sleep(0)  # a real aclose awaits something (a flush, a socket)
        self.seen.append("aclose")


async def _awaited(session: AgentSession[Any]) -> None:
    await session.aclose()


async def _through_wait_for(session: AgentSession[Any]) -> None:
    # inline since Python 3.12: the caller resumes the moment the close returns
    await asyncio.wait_for(session.aclose(), timeout=30)


async def _after_shutdown(session: AgentSession[Any]) -> None:
    # the app hung up; whoever owns the loop then waits for the close to be over
    session.shutdown()
    await session.aclose()


async def _call(middleware: list[Middleware], close: Closer) -> list[str]:
    recorder = Recorder()
    session: AgentSession[Any] = AgentSession()
    await session.start(ResilientAgent(instructions="x", middleware=[*middleware, recorder]))
    await asyncio.sleep(1.0)
    await close(session)
    return list(recorder.seen)


@pytest.mark.parametrize("close", [_awaited, _through_wait_for, _after_shutdown])
@pytest.mark.parametrize("loop", ["virtual", "asyncio"])
def test_the_chain_has_stopped_when_the_sessions_close_returns(close: Closer, loop: str) -> None:
    with capture_logs() as logs:
        call = _call([], close)
        seen = run_virtual(call) if loop == "virtual" else asyncio.run(call)
    assert seen == ["on_session_end", "aclose"]
    assert [e for e in logs if e.get("event") == "call_summary"]


def test_the_jobs_shutdown_waits_for_the_chain_to_stop() -> None:
    """A job process ends once its shutdown callbacks (the session's close among them) return."""
    recorder = Recorder()

    async def job() -> list[str]:
        with fake_job_context() as job_ctx:
            callbacks: list[Callable[[str], Coroutine[None, None, None]]] = []
            register = job_ctx.add_shutdown_callback

            def add_shutdown_callback(callback: Callable[..., Any]) -> None:
                register(callback)
                takes_reason = len(inspect.signature(callback).parameters) >= 1
                callbacks.append(callback if takes_reason else lambda _reason: callback())

            job_ctx.add_shutdown_callback = add_shutdown_callback  # type: ignore[method-assign]
            session: AgentSession[Any] = AgentSession()
            agent = ResilientAgent(instructions="x", middleware=[recorder])
            await session.start(agent, record=False)
            await asyncio.sleep(1.0)
            # what livekit's job process does at shutdown: every callback at once, then exit
            assert callbacks, "the session registers its own close as a shutdown callback"
            await asyncio.gather(*(callback("job ended") for callback in callbacks))
            return list(recorder.seen)

    assert run_virtual(job()) == ["on_session_end", "aclose"]


class HangsInAclose(Middleware):
    hook_budget_s = 0.5

    async def aclose(self) -> None:
        await asyncio.Event().wait()


class ClosesTheSessionItself(Middleware):
    """Calls ``session.aclose()`` from the hooks the stop itself waits for."""

    async def on_session_end(self, ctx: MiddlewareContext, ev: CloseEvent) -> None:
        await ctx.session.aclose()

    async def aclose(self) -> None:
        session = self.session
        await session.aclose()

    async def setup(self, ctx: MiddlewareContext) -> None:
        self.session = ctx.session


@pytest.mark.parametrize(
    ("middleware", "at_most_s"),
    [
        # a hung aclose holds the close for its budget only, and is named
        (HangsInAclose, HangsInAclose.hook_budget_s + 0.1),
        # no wait on itself: the stop's own tasks are not held (no 5 s drain bound either)
        (ClosesTheSessionItself, 0.1),
    ],
)
def test_the_wait_never_outlives_the_stops_own_bounds(
    middleware: type[Middleware], at_most_s: float
) -> None:
    async def timed() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        started: list[float] = []

        async def close(session: AgentSession[Any]) -> None:
            started.append(loop.time())
            await session.aclose()

        seen = await _call([middleware()], close)
        return seen, loop.time() - started[0]

    with capture_logs() as logs:
        seen, took = run_virtual(timed())
    assert seen == ["on_session_end", "aclose"]
    assert took <= at_most_s
    errors = [e for e in logs if e.get("event") == "middleware_error"]
    if middleware is HangsInAclose:
        assert [(e["middleware"], e["hook"]) for e in errors] == [("HangsInAclose", "aclose")]
    else:
        assert errors == []
