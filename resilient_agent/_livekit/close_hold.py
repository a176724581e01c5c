"""``session.aclose()`` and the job's shutdown return only once the runtime has stopped.

livekit emits ``close`` synchronously and awaits none of its listeners, so the stop it starts
(``on_session_end``, every ``aclose``, the call summary) runs in a task of its own. A caller that
ends its loop right after the close (``asyncio.run`` returning after ``await session.aclose()``,
a job process after its shutdown callbacks) cancelled it or never ran it; since Python 3.12
``asyncio.wait_for(session.aclose(), t)`` runs the close inline, without the task hop that used
to give the stop a few more loop turns. The wait is as long as the stop, which the hook and
``aclose`` budgets bound.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from livekit.agents import AgentSession, get_job_context

from .interception import Interceptor

__all__ = ["CloseHold", "Stoppable"]


class Stoppable(Protocol):
    """What the hold waits for."""

    @property
    def stop_started(self) -> bool:
        """Whether the stop has begun (or is over)."""
        ...

    async def until_stopped(self) -> None:
        """Return once the stop is over."""
        ...


class CloseHold:
    """Holds the session's close and the job's shutdown until ``runtime`` stopped."""

    def __init__(self, session: AgentSession[Any], runtime: Stoppable) -> None:
        self._session = session
        self._runtime = runtime

    def install(self, interceptor: Interceptor) -> None:
        """Shadow ``session.aclose`` and add a job shutdown callback (when a job runs)."""
        runtime = self._runtime

        def shadow_aclose(original: Callable[[], Awaitable[None]]) -> Callable[[], Any]:
            async def aclose() -> None:
                await original()
                if runtime.stop_started:
                    await runtime.until_stopped()

            return aclose

        if callable(getattr(self._session, "aclose", None)):  # a stand-in session may have none
            interceptor.install("AgentSession.aclose", self._session, shadow_aclose)
        try:
            job = get_job_context()
        except RuntimeError:
            return
        # livekit gathers the shutdown callbacks, the session's own close among them; weak, so a
        # long job keeps no stopped runtime (and its middleware) alive
        held = weakref.ref(runtime)

        async def wait_for_middleware_stop() -> None:
            alive = held()
            if alive is not None:
                await alive.until_stopped()

        job.add_shutdown_callback(wait_for_middleware_stop)
