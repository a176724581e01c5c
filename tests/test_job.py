from __future__ import annotations

import asyncio
from typing import Any

import pytest
from livekit import api
from livekit.agents import get_job_context

from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.job import JobRecorder, recorded_job_context

TOL = 0.02


class _StubSession:
    """Stands in for an AgentSession: counts aclose() calls and when they ran."""

    def __init__(self) -> None:
        self.closed_at: list[float] = []

    def on(self, event: str, callback: Any) -> None:
        """The recorder listens for ``close``; the stub never emits it."""

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        self.closed_at.append(loop.time())


def test_shutdown_and_delete_room_are_recorded_with_times() -> None:
    async def main() -> tuple[JobRecorder, Any, bool]:
        loop = asyncio.get_running_loop()
        recorder = JobRecorder(clock=loop.time)
        with recorded_job_context(recorder) as job_ctx:
            ctx = get_job_context()
            same = ctx is job_ctx
            await asyncio.sleep(1.5)
            ctx.shutdown(reason="caller said bye")
            await asyncio.sleep(0.5)
            response = await ctx.delete_room()
            await asyncio.sleep(1.0)
            ctx.shutdown()
        return recorder, response, same

    recorder, response, same = run_virtual(main())
    assert same
    assert isinstance(response, api.DeleteRoomResponse)
    assert [reason for _, reason in recorder.shutdowns] == ["caller said bye", "user requested"]
    assert [t for t, _ in recorder.shutdowns] == pytest.approx([1.5, 3.0], abs=TOL)
    assert recorder.room_deletions == pytest.approx([2.0], abs=TOL)
    assert recorder.hung_up_at == pytest.approx(1.5, abs=TOL)


def test_delete_room_alone_sets_hung_up_at() -> None:
    async def main() -> JobRecorder:
        loop = asyncio.get_running_loop()
        recorder = JobRecorder(clock=loop.time)
        with recorded_job_context(recorder):
            await asyncio.sleep(0.7)
            fut = get_job_context().delete_room("ignored-room-name")
            assert fut.done()
        return recorder

    recorder = run_virtual(main())
    assert recorder.shutdowns == []
    assert recorder.room_deletions == pytest.approx([0.7], abs=TOL)
    assert recorder.hung_up_at == pytest.approx(0.7, abs=TOL)


def test_nothing_recorded_means_no_hang_up() -> None:
    async def main() -> JobRecorder:
        recorder = JobRecorder(clock=asyncio.get_running_loop().time)
        with recorded_job_context(recorder):
            await asyncio.sleep(1.0)
        return recorder

    recorder = run_virtual(main())
    assert recorder.shutdowns == []
    assert recorder.room_deletions == []
    assert recorder.hung_up_at is None


def test_job_context_is_only_installed_inside_the_block() -> None:
    async def main() -> tuple[bool, bool, bool]:
        recorder = JobRecorder(clock=asyncio.get_running_loop().time)
        before = get_job_context(required=False) is None
        with recorded_job_context(recorder):
            inside = get_job_context(required=False) is not None
        after = get_job_context(required=False) is None
        return before, inside, after

    assert run_virtual(main()) == (True, True, True)


def test_shutdown_closes_the_session_once() -> None:
    session = _StubSession()

    async def main() -> JobRecorder:
        loop = asyncio.get_running_loop()
        recorder = JobRecorder(clock=loop.time, session=session)  # type: ignore[arg-type]
        with recorded_job_context(recorder):
            await asyncio.sleep(2.0)
            get_job_context().shutdown()
            get_job_context().shutdown(reason="again")
            await asyncio.sleep(1.0)
        return recorder

    recorder = run_virtual(main())
    assert [(round(t, 2), r) for t, r in recorder.shutdowns] == [
        (2.0, "user requested"),
        (2.0, "again"),
    ]
    assert session.closed_at == pytest.approx([2.1], abs=TOL)


def test_recorder_uses_its_clock() -> None:
    async def main() -> JobRecorder:
        recorder = JobRecorder(clock=lambda: 42.0)
        with recorded_job_context(recorder):
            get_job_context().shutdown()
            await get_job_context().delete_room()
        return recorder

    recorder = run_virtual(main())
    assert recorder.shutdowns == [(42.0, "user requested")]
    assert recorder.room_deletions == [42.0]


def test_shutdown_runs_the_shutdown_callbacks_after_the_session_closed() -> None:
    session = _StubSession()
    ran: list[tuple[float, str]] = []

    async def main() -> JobRecorder:
        loop = asyncio.get_running_loop()
        recorder = JobRecorder(clock=loop.time, session=session)  # type: ignore[arg-type]
        with recorded_job_context(recorder) as job_ctx:

            async def delete_the_room() -> None:  # as livekit's EndCallTool registers it
                await job_ctx.delete_room()

            async def with_reason(reason: str) -> None:
                ran.append((loop.time(), reason))

            job_ctx.add_shutdown_callback(delete_the_room)
            job_ctx.add_shutdown_callback(with_reason)
            await asyncio.sleep(1.0)
            job_ctx.shutdown(reason="caller left")
            await asyncio.sleep(1.0)
        return recorder

    recorder = run_virtual(main())
    assert session.closed_at == pytest.approx([1.1], abs=TOL)
    assert recorder.room_deletions == pytest.approx([1.1], abs=TOL)
    assert [reason for _, reason in ran] == ["caller left"]
    assert [t for t, _ in ran] == pytest.approx([1.1], abs=TOL)
