"""The lab's search engine: the shrinkers and the judging pool, on pure functions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence

from resilient_agent.lab.search import (
    Here,
    JudgePool,
    PartSet,
    descend,
    fewer_parts,
    shrink_parts,
)


def _double(n: int) -> int:
    return 2 * n


def test_descend_keeps_the_first_simpler_call_that_still_fails() -> None:
    tried: list[int] = []

    def simpler(n: int) -> Iterator[int]:
        yield from (n - 3, n - 1)

    def fails(n: int) -> str | None:
        tried.append(n)
        return f"fails at {n}" if n >= 5 else None

    assert descend(10, simpler, fails, budget=100) == (5, "fails at 5")
    assert tried == [7, 4, 6, 3, 5, 2, 4]


def test_descend_stops_at_its_budget_counting_trials_spent_before() -> None:
    tried: list[int] = []

    def fails(n: int) -> int | None:
        tried.append(n)
        return n

    best, verdict = descend(100, lambda n: [n - 1], fails, budget=5, spent=2)

    assert (best, verdict) == (97, 97) and len(tried) == 3


def test_descend_with_nothing_failing_returns_the_start_without_a_verdict() -> None:
    assert descend(3, lambda n: [n - 1, n - 2], lambda n: None, budget=10) == (3, None)


def test_delta_debugging_finds_the_two_parts_that_fail_together() -> None:
    parts = [("llm", i) for i in range(8)] + [("tts", i) for i in range(8)]
    culprits = {("llm", 5), ("tts", 2)}
    trials: list[Sequence[tuple[str, int]]] = []

    def fails(keep: Sequence[tuple[str, int]]) -> str | None:
        trials.append(keep)
        return "broken" if culprits <= set(keep) else None

    kept, verdict = shrink_parts(parts, fails, budget=160, group=lambda part: part[0])

    assert set(kept) == culprits and verdict == "broken"
    # each source alone first: neither holds both culprits
    assert trials[:2] == [tuple(parts[:8]), tuple(parts[8:])]


def test_delta_debugging_tries_complements_only_with_more_than_two_chunks() -> None:
    simpler: Callable[[PartSet[int]], Iterator[PartSet[int]]] = fewer_parts()
    first = list(simpler(PartSet((1, 2, 3, 4))))
    assert [c.parts for c in first[:2]] == [(1, 2), (3, 4)]
    assert [c.parts for c in first[2:6]] == [(1,), (2,), (3,), (4,)]
    assert [c.parts for c in first[6:]] == [(2, 3, 4), (1, 3, 4), (1, 2, 4), (1, 2, 3)]
    assert {c.granularity for c in first[6:]} == {3}


def test_a_pool_gives_the_verdicts_in_order_with_some_judged_here() -> None:
    work: list[int | Here[int]] = [1, Here(functools.partial(_double, 2)), 3, 4, 5]
    with JudgePool(2) as pool:
        judged = list(pool.verdicts(work, _double, chunksize=2))
    with JudgePool(1) as alone:
        here = list(alone.verdicts(work, _double))

    assert judged == here == [2, 4, 6, 8, 10]
