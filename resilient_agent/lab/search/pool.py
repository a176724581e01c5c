"""Judging a search's calls in worker processes (``--jobs J``), the verdicts in order."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["Here", "JudgePool"]

W = TypeVar("W")
V = TypeVar("V")


@dataclass(frozen=True)
class Here(Generic[V]):
    """A call this process judges itself.

    A call on the app's own tools carries the app's callables (its mocks), which a worker
    process cannot be sent.

    Attributes:
        judge: Judges the call.
    """

    judge: Callable[[], V]


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
        self, work: Sequence[W | Here[V]], judge: Callable[[W], V], *, chunksize: int = 1
    ) -> Iterator[V]:
        """The verdict on each of ``work``, in order.

        Args:
            work: The calls: each described by a value a worker process can be sent, or
                :class:`Here`.
            judge: Judges a described call: a module-level function (a worker imports it by
                name).
            chunksize: Calls sent to a worker at once.
        """
        sent = [w for w in work if not isinstance(w, Here)]
        remote: Iterator[V] = map(judge, sent)
        if self._executor is not None and sent:
            remote = self._executor.map(judge, sent, chunksize=chunksize)
        for w in work:
            yield w.judge() if isinstance(w, Here) else next(remote)
