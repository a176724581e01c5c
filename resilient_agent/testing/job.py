"""A job context stand-in that records hang-ups instead of ending a real job."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
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
        shutdowns: Loop seconds and reason of every ``shutdown()`` call.
        room_deletions: Loop seconds of every ``delete_room()`` call.
    """

    clock: Callable[[], float]
    shutdowns: list[tuple[float, str]] = field(default_factory=list)
    room_deletions: list[float] = field(default_factory=list)
    session: AgentSession[Any] | None = None

    @property
    def hung_up_at(self) -> float | None:
        """When the call was first ended through the job, if it was."""
        times = [t for t, _ in self.shutdowns] + self.room_deletions
        return min(times) if times else None


@contextlib.contextmanager
def recorded_job_context(recorder: JobRecorder) -> Iterator[JobContext]:
    """Install a fake job context whose ``shutdown``/``delete_room`` are recorded.

    A real job closes its session when shut down (the session registers a shutdown callback);
    the stand-in does the same by closing ``recorder.session``.
    """
    with fake_job_context() as job_ctx:
        closing: list[asyncio.Task[None]] = []

        def shutdown(reason: str = "user requested") -> None:
            recorder.shutdowns.append((recorder.clock(), reason))
            if recorder.session is not None and not closing:
                closing.append(asyncio.ensure_future(recorder.session.aclose()))

        def delete_room(room_name: str | None = None) -> asyncio.Future[api.DeleteRoomResponse]:
            recorder.room_deletions.append(recorder.clock())
            done = asyncio.get_running_loop().create_future()
            done.set_result(api.DeleteRoomResponse())
            return done

        # instance attributes shadow the methods: app code calls them as usual
        job_ctx.shutdown = shutdown  # type: ignore[method-assign]
        job_ctx.delete_room = delete_room  # type: ignore[method-assign]
        yield job_ctx
