"""``bench_bytecodes``: ``--under`` finds what runs inside a function through the callers;
``--per-call`` counts a call apart from its turns."""

from __future__ import annotations

import sys
from collections import Counter
from types import FrameType

import pytest

from benchmarks import bench_bytecodes
from benchmarks.bench_bytecodes import BASE_TURNS, _Root, _root_above


def _inner() -> FrameType:
    return sys._getframe()


def _outer() -> FrameType:
    return _inner()


def test_a_frame_is_inside_the_innermost_root_among_its_callers() -> None:
    frame = _outer()
    assert _root_above(frame, [_Root("_outer")]) == "_outer"
    assert _root_above(frame, [_Root("_outer"), _Root("_inner")]) == "_inner"
    assert _root_above(frame, [_Root("_outer@test_bench_bytecodes")]) == (
        "_outer@test_bench_bytecodes"
    )
    assert _root_above(frame, [_Root("_outer@watchdog")]) is None
    assert _root_above(frame, [_Root("_nowhere")]) is None


def test_a_calls_own_cost_is_the_short_call_less_its_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    # set-up 100 and 4 a turn in one function, 10 a turn in another, 7 once in a third
    counts = {
        BASE_TURNS: Counter({("a", 1, "setup"): 108, ("b", 1, "turn"): 20, ("c", 1, "once"): 7}),
        6: Counter({("a", 1, "setup"): 124, ("b", 1, "turn"): 60, ("c", 1, "once"): 7}),
    }
    monkeypatch.setattr(bench_bytecodes, "_count", lambda cls, turns, frame_s: counts[turns])
    found = bench_bytecodes.per_call(object, 6, 0.05)
    assert found == Counter({("a", 1, "setup"): 100, ("b", 1, "turn"): 0, ("c", 1, "once"): 7})
