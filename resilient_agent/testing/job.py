"""A job context stand-in that records hang-ups instead of ending a real job."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from livekit import api
from livekit.agents import AgentSession
from livekit.agents.job import JobContext
from livekit.agents.testing import fake_job_context

__all__ = ["JobRecorder", "recorded_job_context"]


@dataclass
class JobRecorder:
    """What the app asked of its job.

    Attributes:
        shutdowns: Call seconds and reason of every ``shutdown()`` call.
        room_deletions: Call seconds of every ``delete_room()`` call (the app's own, or one a
            shutdown callback made, as livekit's ``EndCallTool`` registers it).
        session_closed_at: Call seconds of the session's ``close`` event.
    """

    clock: Callable[[], float]
    shutdowns: list[tuple[float, str]] = field(default_factory=list)
    room_deletions: list[float] = field(default_factory=list)
    session: AgentSession[Any] | None = None
    session_closed_at: float | None = None

    @property
    def hung_up_at(self) -> float | None:
        """When the call was first ended through the job, if it was."""
        times = [t for t, _ in self.shutdowns] + self.room_deletions
        return min(times) if times else None


@contextlib.contextmanager
def recorded_job_context(recorder: JobRecorder) -> Iterator[JobContext]:
    """Install a fake job context whose ``shutdown``/``delete_room`` are recorded.

    A real job, when shut down, closes its session and then runs its shutdown callbacks (with
    the reason); the stand-in does the same with ``recorder.session`` and the callbacks
    registered through ``add_shutdown_callback``.
    """
    with fake_job_context() as job_ctx:
        closing: list[asyncio.Task[None]] = []
        callbacks: list[Callable[[str], Awaitable[None]]] = []
        register = job_ctx.add_shutdown_callback
        if recorder.session is not None:
            recorder.session.on("close", lambda _ev: _closed(recorder))

        def add_shutdown_callback(callback: Callable[..., Coroutine[None, None, None]]) -> None:
            register(callback)  # livekit's own bookkeeping (and its argument check)
            takes_reason = len(inspect.signature(callback).parameters) >= 1
            callbacks.append(callback if takes_reason else lambda _reason: callback())

        async def shut_down(reason: str) -> None:
            if recorder.session is not None:
                await recorder.session.aclose()
            for callback in callbacks:
                await callback(reason)

        def shutdown(reason: str = "user requested") -> None:
            recorder.shutdowns.append((recorder.clock(), reason))
            if not closing:
                closing.append(asyncio.ensure_future(shut_down(reason)))

        def delete_room(room_name: str | None = None) -> asyncio.Future[api.DeleteRoomResponse]:
            recorder.room_deletions.append(recorder.clock())
            done = asyncio.get_running_loop().create_future()
            done.set_result(api.DeleteRoomResponse())
            return done

        # instance attributes shadow the methods: app code calls them as usual
        job_ctx.shutdown = shutdown  # type: ignore[method-assign]
        job_ctx.delete_room = delete_room  # type: ignore[method-assign]
        job_ctx.add_shutdown_callback = add_shutdown_callback  # type: ignore[method-assign]
        yield job_ctx


def _closed(recorder: JobRecorder) -> None:
    if recorder.session_closed_at is None:
        recorder.session_closed_at = recorder.clock()
