"""A virtual clock for running real ``AgentSession`` timelines in a fraction of a second.

``VirtualTimeLoop`` is an asyncio event loop whose clock jumps straight to the next timer whenever
there is nothing ready to run, so ``asyncio.sleep(5)`` costs no wall time. livekit-agents also reads
the wall clock directly (``time.time()`` in endpointing, ``time.perf_counter()`` in metrics,
``Field(default_factory=time.time)`` on chat items), so :func:`virtual_time` points those reads at
the running loop's clock while it is active. Reads from any other thread or loop see real time.
livekit stamps some spans with ``time.time()`` and the OpenTelemetry SDK stamps the rest (and
every span event) with the ``time_ns`` it imported, so that binding is pointed at the same clock
while the SDK is loaded: a traced call's spans all read on one clock.

Work handed to an executor thread is waited for in real time while the virtual clock stands
still: a thread's result arrives at the same virtual instant on every run, which keeps runs
deterministic even when a real model (the embedded VAD) runs in a thread.

livekit names speeches, chat items and requests with ``uuid.uuid4()``; on a virtual loop those
ids come from the loop's own seeded stream (the n-th loop of a process draws from seed n), so
a run's records (ids included) are the same bytes every time it is run, and a failure found by
the lab replays exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import selectors
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from typing_extensions import override

__all__ = [
    "SAME_INSTANT_S",
    "VirtualTimeLoop",
    "run_virtual",
    "virtual_time",
    "virtual_wall_time",
]

_T = TypeVar("_T")

# Two stamps of one event taken in one loop tick (livekit's and a recorder's, nudged apart by
# _READ_NUDGE per read) are the same instant when they differ by less than this.
SAME_INSTANT_S = 1e-3

# Patched wall-clock reads look like a real epoch; only differences between them matter.
_EPOCH = 1_800_000_000.0
# Reads within one loop tick are nudged apart so items created in the same tick keep their order
# (ChatContext inserts by created_at).
_READ_NUDGE = 1e-6
# Timers due at the same virtual instant fire in the order they were scheduled, as real time would.
_TIMER_NUDGE = 1e-9
# A thread that does not answer within this much real time is not worth freezing the clock for.
_EXECUTOR_REAL_WAIT_S = 5.0

_real_time = time.time
_real_perf_counter = time.perf_counter
_real_monotonic = time.monotonic
_real_time_ns = time.time_ns
_real_uuid4 = uuid.uuid4
# numbers the virtual loops of a process in the order they start: the seed of each one's ids
_LOOP_NUMBERS = itertools.count()
# the OpenTelemetry SDK's own binding of time.time_ns (``from time import time_ns``)
_OTEL_SDK_TRACE = "opentelemetry.sdk.trace"


class _JumpingSelector(selectors.BaseSelector):
    """Polls real file descriptors without blocking and jumps the clock instead of sleeping."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop
        self._real = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            return self._real.select(None)
        if self._loop.executor_jobs_in_flight:
            # A thread is working for the loop: its answer must land at this virtual instant.
            ready = self._real.select(_EXECUTOR_REAL_WAIT_S)
            if ready:
                return ready
        self._loop.advance(timeout)
        return []

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock only moves when every task is waiting for a timer."""

    def __init__(self) -> None:
        self._now = 0.0
        self._last_read = 0.0
        self._timer_seq = 0
        self._executor_jobs = 0
        # livekit names speeches, items and requests with uuid4: drawn from this loop's own
        # stream, a call's ids are the same on every run of the process, so its records replay
        # byte for byte; each loop of a process draws a stream of its own, so two calls never
        # share an id (middleware instances shared by sessions keep state by id)
        self._ids = random.Random(next(_LOOP_NUMBERS))
        super().__init__(selector=_JumpingSelector(self))
        self._clock_resolution = 1e-12

    @property
    def executor_jobs_in_flight(self) -> int:
        """Executor jobs started by this loop that have not finished yet."""
        return self._executor_jobs

    @override
    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward; called by the selector when the loop would sleep."""
        if seconds > 0:
            self._now += seconds

    def new_uuid(self) -> uuid.UUID:
        """A version-4 UUID from this loop's own seeded stream."""
        return uuid.UUID(int=self._ids.getrandbits(128), version=4)

    def read(self) -> float:
        """Seconds since the loop started, strictly increasing across calls."""
        self._last_read = max(self._now, self._last_read + _READ_NUDGE)
        return self._last_read

    @override
    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        self._timer_seq += 1
        return super().call_at(
            when + self._timer_seq * _TIMER_NUDGE, callback, *args, context=context
        )

    @override
    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        future = super().run_in_executor(executor, func, *args)
        # A job counts until its result is on the loop, not merely until the thread returns: the
        # thread hands the result over with a later wake-up, and the clock must not move between.
        self._executor_jobs += 1
        future.add_done_callback(self._executor_job_done)
        return future

    def _executor_job_done(self, _future: Any) -> None:
        self._executor_jobs -= 1


def _running_virtual_loop() -> VirtualTimeLoop | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop if isinstance(loop, VirtualTimeLoop) else None


def _wall_now() -> float:
    loop = _running_virtual_loop()
    return _EPOCH + loop.read() if loop is not None else _real_time()


def _perf_now() -> float:
    loop = _running_virtual_loop()
    return loop.read() if loop is not None else _real_perf_counter()


def _monotonic_now() -> float:
    loop = _running_virtual_loop()
    return loop.read() if loop is not None else _real_monotonic()


def _wall_now_ns() -> int:
    loop = _running_virtual_loop()
    return round((_EPOCH + loop.read()) * 1e9) if loop is not None else _real_time_ns()


def _uuid4() -> uuid.UUID:
    loop = _running_virtual_loop()
    return loop.new_uuid() if loop is not None else _real_uuid4()


def virtual_wall_time(loop_time: float) -> float:
    """What ``time.time()`` reads on a :class:`VirtualTimeLoop` whose clock shows ``loop_time``."""
    return _EPOCH + loop_time


_models_patched = False


def _patch_model_clocks() -> None:
    """Point pydantic ``default_factory=time.time`` fields of livekit models at the virtual clock.

    A module patch cannot reach a factory captured at import, so the field info is updated and
    the model rebuilt. The replacement falls back to real time off the virtual loop, so the patch
    is safe to leave in place for the rest of the process.
    """
    global _models_patched
    if _models_patched:
        return
    from livekit.agents.inference import interruption
    from livekit.agents.llm import chat_context
    from livekit.agents.voice import events
    from pydantic import BaseModel

    replacements: dict[Callable[[], float], Callable[[], float]] = {
        _real_time: _wall_now,
        _real_perf_counter: _perf_now,
    }
    for module in (chat_context, events, interruption):
        for obj in list(vars(module).values()):
            if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
                continue
            changed = False
            for field in obj.model_fields.values():
                factory = field.default_factory
                if factory in replacements:
                    field.default_factory = replacements[factory]
                    changed = True
            if changed:
                obj.model_rebuild(force=True)
    _models_patched = True


@contextlib.contextmanager
def virtual_time() -> Iterator[None]:
    """Route wall-clock reads made on a :class:`VirtualTimeLoop` to its virtual clock."""
    _patch_model_clocks()
    saved = (time.time, time.perf_counter, time.monotonic)
    time.time, time.perf_counter, time.monotonic = _wall_now, _perf_now, _monotonic_now
    uuid.uuid4 = _uuid4
    otel_sdk = sys.modules.get(_OTEL_SDK_TRACE)
    saved_otel = getattr(otel_sdk, "time_ns", None)
    if saved_otel is not None:
        otel_sdk.time_ns = _wall_now_ns  # type: ignore[union-attr]
    try:
        yield
    finally:
        time.time, time.perf_counter, time.monotonic = saved
        uuid.uuid4 = _real_uuid4
        if saved_otel is not None:
            otel_sdk.time_ns = saved_otel  # type: ignore[union-attr]


def run_virtual(main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop` with virtual wall clocks."""
    loop = VirtualTimeLoop()
    try:
        with virtual_time():
            return loop.run_until_complete(main)
    finally:
        with virtual_time():
            _cancel_leftovers(loop)
        loop.close()


def _cancel_leftovers(loop: VirtualTimeLoop) -> None:
    """Cancel what a (possibly deadlocked) run left behind, so nothing leaks into the next run."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        with contextlib.suppress(Exception):
            loop.run_until_complete(
                asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout=30.0)
            )
    with contextlib.suppress(Exception):
        loop.run_until_complete(loop.shutdown_asyncgens())
    with contextlib.suppress(Exception):
        loop.run_until_complete(loop.shutdown_default_executor())
