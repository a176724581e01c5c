"""The session's listeners reach livekit's emitter in runs, called exactly as separate ones.

:class:`resilient_agent._engine.fanout.FanOut` registers listeners added one after another on
the same event as one listener of livekit's emitter (livekit inspects each listener at every
emit). These tests hold it to what separate registrations do: the order of every listener
(the library's and anyone else's), one raising listener logged and the next called, a
``TypeError`` raised, removal, and a run only while it is the emitter's last listener.
"""

from __future__ import annotations

import logging

import pytest
from livekit import rtc

from resilient_agent._engine.fanout import FanOut, Guarded
from resilient_agent._livekit.compat import event_listeners, last_event_listener


def _emitter_keeps_order() -> bool:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    emitter.on("probe", print)
    return last_event_listener(emitter, "probe") is print


# livekit-agents 1.8.0's emitter keeps a set: no order to join a run by, every listener alone
pytestmark = pytest.mark.skipif(
    not _emitter_keeps_order(), reason="this livekit's emitter keeps its listeners unordered"
)


def _fanout() -> FanOut:
    return FanOut(last_event_listener)


def _heard(into: list[str], name: str) -> object:
    return lambda event: into.append(f"{name}:{event}")


def test_listeners_added_one_after_another_are_one_registration_called_in_order() -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []
    first, second, third = (_heard(heard, name) for name in ("a", "b", "c"))
    for listener in (first, second, third):
        fanout.on(emitter, "tick", listener)  # type: ignore[arg-type]
    assert len(event_listeners(emitter, "tick") or []) == 1 and len(fanout) == 3
    emitter.emit("tick", 1)
    assert heard == ["a:1", "b:1", "c:1"]


def test_a_listener_registered_by_someone_else_in_between_keeps_its_place() -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []
    fanout.on(emitter, "tick", _heard(heard, "core"))  # type: ignore[arg-type]
    emitter.on("tick", _heard(heard, "app"))  # type: ignore[arg-type]
    fanout.on(emitter, "tick", _heard(heard, "middleware"))  # type: ignore[arg-type]
    emitter.emit("tick", 1)
    assert heard == ["core:1", "app:1", "middleware:1"]
    assert len(event_listeners(emitter, "tick") or []) == 3


def test_without_the_emitters_order_every_listener_is_registered_alone() -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = FanOut(), []  # it cannot tell which listener is last
    fanout.on(emitter, "tick", _heard(heard, "a"))  # type: ignore[arg-type]
    fanout.on(emitter, "tick", _heard(heard, "b"))  # type: ignore[arg-type]
    emitter.emit("tick", 1)
    assert heard == ["a:1", "b:1"] and len(event_listeners(emitter, "tick") or []) == 2


def test_a_raising_listener_is_logged_as_livekit_logs_it_and_the_next_is_called(
    caplog: pytest.LogCaptureFixture,
) -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []

    def boom(_event: object) -> None:
        raise RuntimeError("listener broke")

    fanout.on(emitter, "tick", boom)
    fanout.on(emitter, "tick", _heard(heard, "after"))  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="livekit"):
        emitter.emit("tick", 1)
    assert heard == ["after:1"]
    assert [r.getMessage() for r in caplog.records] == ["failed to emit event tick"]


def test_a_type_error_ends_the_emit_as_it_does_in_livekit() -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []

    def wrong(_event: object) -> None:
        raise TypeError("wrong call")

    fanout.on(emitter, "tick", wrong)
    fanout.on(emitter, "tick", _heard(heard, "after"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wrong call"):
        emitter.emit("tick", 1)
    assert heard == []


def test_removed_listeners_are_not_called_and_an_empty_run_leaves_the_emitter() -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []
    first, second = _heard(heard, "a"), _heard(heard, "b")
    fanout.on(emitter, "tick", first)  # type: ignore[arg-type]
    fanout.on(emitter, "tick", second)  # type: ignore[arg-type]
    fanout.off(emitter, "tick", first)  # type: ignore[arg-type]
    emitter.emit("tick", 1)
    assert heard == ["b:1"]
    fanout.off(emitter, "tick", second)  # type: ignore[arg-type]
    fanout.off(emitter, "tick", second)  # type: ignore[arg-type]  # again: nothing happens
    assert event_listeners(emitter, "tick") == [] and len(fanout) == 0
    emitter.emit("tick", 2)
    assert heard == ["b:1"]


def test_a_listener_removed_during_an_emit_still_hears_it_as_in_livekit() -> None:
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []
    later = _heard(heard, "later")

    def remove_later(event: object) -> None:
        heard.append(f"first:{event}")
        fanout.off(emitter, "tick", later)  # type: ignore[arg-type]

    fanout.on(emitter, "tick", remove_later)
    fanout.on(emitter, "tick", later)  # type: ignore[arg-type]
    emitter.emit("tick", 1)
    emitter.emit("tick", 2)
    assert heard == ["first:1", "later:1", "first:2"]


def test_each_listener_of_a_run_gets_what_emit_gives_a_one_argument_listener() -> None:
    # the run takes ``*args`` (livekit's emitter passes every argument to it), and hands on
    # the first one only, or none, as emit does for a listener of one parameter
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard = _fanout(), []
    fanout.on(emitter, "tick", lambda *args: heard.append(args))
    fanout.on(emitter, "tick", lambda *args: heard.append(args))
    emitter.emit("tick", 1, "extra")
    emitter.emit("tick", 2)
    emitter.emit("tick")
    assert heard == [(1,), (1,), (2,), (2,), (), ()]
    assert len(event_listeners(emitter, "tick") or []) == 1


class _Guard(Guarded):
    def __init__(self, handler: object, failures: list[str]) -> None:
        super().__init__(handler)  # type: ignore[arg-type]
        self._failures = failures

    def failed(self, exc: Exception) -> None:
        self._failures.append(repr(exc))


def test_a_guarded_listeners_failure_goes_to_its_guard_even_a_type_error() -> None:
    # the run calls a guarded listener's handler itself (no call of the guard per event); what
    # it raises is the guard's to report, a TypeError too, and the next listener is called, as
    # when the guard is called alone
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    fanout, heard, failures = _fanout(), [], []

    def wrong(_event: object) -> None:
        raise TypeError("wrong call")

    fanout.on(emitter, "tick", _Guard(wrong, failures))
    fanout.on(emitter, "tick", _heard(heard, "after"))  # type: ignore[arg-type]
    emitter.emit("tick", 1)
    _Guard(wrong, failures)(2)
    assert heard == ["after:1"]
    assert failures == ["TypeError('wrong call')"] * 2
