"""``bench_bytecodes --under``: what runs inside a function is found through the callers."""

from __future__ import annotations

import sys
from types import FrameType

from benchmarks.bench_bytecodes import _Root, _root_above


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
