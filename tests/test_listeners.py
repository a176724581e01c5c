"""Listeners the library registers carry their signature for livekit's event emitter."""

from __future__ import annotations

import inspect

from livekit.rtc import EventEmitter

from resilient_agent import event_listener


def test_listener_passes_the_event_and_answers_inspect_from_its_signature() -> None:
    seen: list[object] = []
    listener = event_listener(seen.append)
    emitter: EventEmitter[str] = EventEmitter()
    emitter.on("ev", listener)
    emitter.emit("ev", "first", "extra argument livekit would drop")
    assert seen == ["first"]
    assert list(inspect.signature(listener).parameters) == ["event"]
    assert inspect.signature(listener) is inspect.signature(event_listener(print))
