"""Judging a search's calls in worker processes (``--jobs J``), the verdicts in order."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from types import TracebackType
from typing import TypeVar

__all__ = ["JudgePool"]

W = TypeVar("W")
V = TypeVar("V")


def _sent(_work: object) -> bool:
    return False


class JudgePool:
    """``jobs`` processes that judge calls side by side; with one job, this process judges.

    Processes are spawned, not forked: livekit's threads must not be copied mid-flight. A call
    is a pure function of its description, so the verdicts are the same however many processes
    judge them.
    """

    def __init__(self, jobs: int) -> None:
        self._jobs = jobs
        self._executor: Executor | None = None

    def __enter__(self) -> JudgePool:
        if self._jobs > 1:
            context = multiprocessing.get_context("spawn")
            self._executor = ProcessPoolExecutor(max_workers=self._jobs, mp_context=context)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def verdicts(
        self,
        work: Sequence[W],
        judge: Callable[[W], V],
        *,
        here: Callable[[W], bool] = _sent,
        chunksize: int = 1,
    ) -> Iterator[V]:
        """``judge`` of each of ``work``, in order.

        Args:
            work: The calls, each described by a value a worker process can be sent.
            judge: A module-level function (a worker imports it by name).
            here: Which calls this process judges itself: those that carry the app's own
                callables (its mocks), which a worker cannot be sent.
            chunksize: Calls sent to a worker at once.
        """
        sent = [w for w in work if not here(w)]
        if self._executor is None or not sent:
            yield from map(judge, work)
            return
        remote = self._executor.map(judge, sent, chunksize=chunksize)
        for w in work:
            yield judge(w) if here(w) else next(remote)
