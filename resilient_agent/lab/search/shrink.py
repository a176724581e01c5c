"""Shrinking a failing call: greedy descent, and delta debugging over a call's parts.

A mode says what is simpler than a call (``simpler``) and whether a call still fails
(``fails``: its verdict, or None); :func:`descend` keeps the first simpler call that still fails
until none does or the trial budget is spent. A call made of parts (the explorer's late
deliveries) is shrunk by delta debugging (Zeller's ddmin): :func:`fewer_parts` is its
``simpler``, :func:`shrink_parts` the whole search.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["PartSet", "descend", "fewer_parts", "shrink_parts"]

C = TypeVar("C")
P = TypeVar("P", bound=Hashable)
V = TypeVar("V")


def descend(
    start: C,
    simpler: Callable[[C], Iterable[C]],
    fails: Callable[[C], V | None],
    *,
    budget: int,
    spent: int = 0,
) -> tuple[C, V | None]:
    """The simplest failing call found from ``start``, and its verdict (None if none failed).

    Greedy: tries each of ``simpler(best)`` in turn, biggest simplification first, and keeps
    the first that still fails, until none does or ``budget`` trials (``spent`` of them already
    before this search) are run.
    """
    best, found, trials = start, None, spent
    while trials < budget:
        for candidate in simpler(best):
            trials += 1
            verdict = fails(candidate)
            if verdict is not None:
                best, found = candidate, verdict
                break
            if trials >= budget:
                return best, found
        else:
            return best, found
    return best, found


@dataclass(frozen=True)
class PartSet(Generic[P]):
    """Some of a failing call's parts, as delta debugging narrows them.

    Attributes:
        parts: The parts kept, in the call's order.
        granularity: How many chunks the next split makes.
        grouped: Whether each group was tried alone already (done once, first).
    """

    parts: tuple[P, ...]
    granularity: int = 2
    grouped: bool = False


def fewer_parts(
    group: Callable[[P], Hashable] | None = None,
) -> Callable[[PartSet[P]], Iterator[PartSet[P]]]:
    """Delta debugging's smaller part sets of a failing one, in the order ddmin tries them.

    With ``group``, each group's parts alone come first, once: a bug between two sources of a
    call (or within one) is then found in a trial or two.
    """

    def simpler(current: PartSet[P]) -> Iterator[PartSet[P]]:
        keys = current.parts
        if group is not None and not current.grouped:
            for name in dict.fromkeys(map(group, keys)):
                alone = tuple(key for key in keys if group(key) == name)
                if len(alone) < len(keys):
                    yield PartSet(alone, grouped=True)
        chunks = current.granularity
        while len(keys) >= 2:
            size = -(-len(keys) // chunks)
            chunked = [keys[i : i + size] for i in range(0, len(keys), size)]
            for chunk in chunked:
                yield PartSet(chunk, grouped=True)
            # with two chunks each complement is the other chunk, tried already
            if len(chunked) > 2:
                for dropped in map(set, chunked):
                    rest = tuple(key for key in keys if key not in dropped)
                    yield PartSet(rest, max(chunks - 1, 2), grouped=True)
            if chunks >= len(keys):
                return
            chunks = min(chunks * 2, len(keys))

    return simpler


def shrink_parts(
    parts: Sequence[P],
    fails: Callable[[Sequence[P]], V | None],
    *,
    budget: int,
    group: Callable[[P], Hashable] | None = None,
    spent: int = 0,
) -> tuple[tuple[P, ...], V | None]:
    """The fewest of ``parts`` found that still fail, and their verdict (None if none failed).

    ``parts`` themselves must fail; ``spent`` trials count against ``budget`` already.
    """
    found, verdict = descend(
        PartSet(tuple(parts)),
        fewer_parts(group),
        lambda candidate: fails(candidate.parts),
        budget=budget,
        spent=spent,
    )
    return found.parts, verdict
