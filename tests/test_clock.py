from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from livekit.agents.llm import ChatMessage

from resilient_agent.testing import clock
from resilient_agent.testing.clock import VirtualTimeLoop, run_virtual, virtual_time

TOL = 1e-6
# patched clock reads are nudged 1 microsecond apart within one tick
READ_TOL = 1e-4


def test_run_virtual_uses_a_virtual_loop_starting_at_zero_and_returns_result() -> None:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        return isinstance(loop, VirtualTimeLoop), loop.time()

    is_virtual, start = run_virtual(main())
    assert is_virtual
    assert start == 0.0


def test_sleep_advances_clock_by_exactly_the_slept_amount() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        stamps = [loop.time()]
        for delay in (1.5, 0.01, 3600.0, 0.25):
            await asyncio.sleep(delay)
            stamps.append(loop.time())
        return stamps

    stamps = run_virtual(main())
    deltas = [b - a for a, b in itertools.pairwise(stamps)]
    assert deltas == pytest.approx([1.5, 0.01, 3600.0, 0.25], abs=TOL)


def test_concurrent_long_sleeps_end_at_the_longest() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(asyncio.sleep(600.0 * i) for i in range(1, 7)))
        return loop.time()

    assert run_virtual(main()) == pytest.approx(3600.0, abs=TOL)


def test_concurrent_sleepers_wake_at_their_own_virtual_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        woke: list[tuple[str, float]] = []

        async def sleeper(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            woke.append((name, loop.time()))

        await asyncio.gather(sleeper("c", 3.0), sleeper("a", 1.0), sleeper("b", 2.0))
        return woke

    woke = run_virtual(main())
    assert [name for name, _ in woke] == ["a", "b", "c"]
    assert [t for _, t in woke] == pytest.approx([1.0, 2.0, 3.0], abs=TOL)


def test_timers_due_at_the_same_instant_fire_in_scheduling_order() -> None:
    async def main() -> tuple[list[int], list[float]]:
        loop = asyncio.get_running_loop()
        fired: list[int] = []
        times: list[float] = []
        done = loop.create_future()
        when = loop.time() + 1.0
        n = 64

        def fire(i: int) -> None:
            fired.append(i)
            times.append(loop.time())
            if len(fired) == n:
                done.set_result(None)

        # mix call_at and call_later: both must keep scheduling order at the same instant
        for i in range(n):
            if i % 2:
                loop.call_at(when, fire, i)
            else:
                loop.call_later(1.0, fire, i)
        await done
        return fired, times

    fired, times = run_virtual(main())
    assert fired == list(range(64))
    assert times == pytest.approx([1.0] * 64, abs=TOL)


def test_wait_for_times_out_at_the_virtual_deadline() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout=3.0)
        return loop.time()

    assert run_virtual(main()) == pytest.approx(3.0, abs=TOL)


def test_time_reads_inside_the_loop_follow_the_virtual_clock() -> None:
    async def main() -> tuple[float, float, float, float]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(12.5)
        return time.time(), time.perf_counter(), time.monotonic(), loop.time()

    wall, perf, mono, now = run_virtual(main())
    assert now == pytest.approx(12.5, abs=TOL)
    assert wall == pytest.approx(clock._EPOCH + 12.5, abs=READ_TOL)
    assert perf == pytest.approx(12.5, abs=READ_TOL)
    assert mono == pytest.approx(12.5, abs=READ_TOL)


def test_reads_in_one_tick_are_strictly_increasing_but_stay_at_the_instant() -> None:
    async def main() -> list[float]:
        await asyncio.sleep(2.0)
        return [time.time() for _ in range(100)]

    reads = run_virtual(main())
    assert all(b > a for a, b in itertools.pairwise(reads))
    assert reads[0] == pytest.approx(clock._EPOCH + 2.0, abs=READ_TOL)
    assert reads[-1] - reads[0] < 1e-3


def test_time_reads_off_the_loop_are_real() -> None:
    with virtual_time():
        # no running loop: real time, not the virtual epoch
        assert abs(time.time() - clock._real_time()) < 60.0
        assert abs(time.time() - clock._EPOCH) > 1_000.0
        assert abs(time.perf_counter() - clock._real_perf_counter()) < 60.0
        assert abs(time.monotonic() - clock._real_monotonic()) < 60.0


def test_time_reads_on_an_ordinary_loop_are_real() -> None:
    async def main() -> float:
        return time.time()

    with virtual_time():
        loop = asyncio.new_event_loop()
        try:
            wall = loop.run_until_complete(main())
        finally:
            loop.close()
    assert abs(wall - clock._real_time()) < 60.0


def test_virtual_time_restores_the_time_functions() -> None:
    before = (time.time, time.perf_counter, time.monotonic)
    with virtual_time():
        assert time.time is not before[0]
        assert time.perf_counter is not before[1]
        assert time.monotonic is not before[2]
    assert (time.time, time.perf_counter, time.monotonic) == before

    async def main() -> None:
        await asyncio.sleep(1.0)

    run_virtual(main())
    assert (time.time, time.perf_counter, time.monotonic) == before


def test_executor_job_does_not_advance_virtual_time() -> None:
    def slow_job() -> float:
        time.sleep(0.05)  # real time, off the loop
        return time.time()  # off the loop: real

    async def main() -> tuple[float, float, float, list[str]]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        # a pending timer would let a careless clock jump while the thread works
        timer = loop.call_later(0.01, order.append, "timer")
        before = loop.time()
        thread_wall = await loop.run_in_executor(None, slow_job)
        order.append("job")
        after = loop.time()
        await asyncio.sleep(0.02)
        timer.cancel()
        return before, after, thread_wall, order

    before, after, thread_wall, order = run_virtual(main())
    assert after == pytest.approx(before, abs=TOL)
    assert order == ["job", "timer"]
    assert abs(thread_wall - clock._real_time()) < 60.0


def test_executor_results_always_land_at_the_instant_they_were_requested() -> None:
    # regression: the clock used to move between the thread returning and its result
    # reaching the loop, so some results landed a timer later
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        drifts: list[float] = []
        for _ in range(200):
            timer = loop.call_later(0.001, lambda: None)
            before = loop.time()
            await loop.run_in_executor(None, int, "1")
            drifts.append(loop.time() - before)
            timer.cancel()
        return drifts

    drifts = run_virtual(main())
    assert max(drifts) == 0.0


def test_executor_job_count_returns_to_zero() -> None:
    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        idle = loop.executor_jobs_in_flight
        fut = loop.run_in_executor(None, time.sleep, 0.01)
        busy = loop.executor_jobs_in_flight
        await fut
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(None, divmod, 1, 0)
        return idle, busy, loop.executor_jobs_in_flight

    assert run_virtual(main()) == (0, 1, 0)


def test_chat_message_created_in_the_loop_gets_a_virtual_created_at() -> None:
    async def main() -> tuple[float, float]:
        first = ChatMessage(role="user", content=["x"])
        await asyncio.sleep(4.0)
        second = ChatMessage(role="user", content=["x"])
        return first.created_at, second.created_at

    first, second = run_virtual(main())
    assert first == pytest.approx(clock._EPOCH, abs=READ_TOL)
    assert second == pytest.approx(clock._EPOCH + 4.0, abs=READ_TOL)

    # off the loop the patched factory falls back to real time
    outside = ChatMessage(role="user", content=["x"])
    assert abs(outside.created_at - clock._real_time()) < 60.0


def test_chat_messages_created_in_the_same_tick_keep_their_order() -> None:
    async def main() -> list[float]:
        await asyncio.sleep(1.0)
        return [ChatMessage(role="user", content=[str(i)]).created_at for i in range(10)]

    stamps = run_virtual(main())
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 10


def test_run_virtual_cancels_tasks_left_behind() -> None:
    cancelled: list[float] = []

    async def forever() -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(10_000.0)
        except asyncio.CancelledError:
            cancelled.append(loop.time())
            raise

    async def main() -> str:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(1.0)
        return "done"

    assert run_virtual(main()) == "done"
    assert cancelled == pytest.approx([1.0], abs=TOL)
