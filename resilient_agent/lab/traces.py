"""Every lab call's OpenTelemetry spans, livekit's and the chain's race events, as JSON lines.

``resilient-agent lab --traces PATH`` runs the calls under an SDK tracer provider given to
livekit through its public ``telemetry.set_tracer_provider``, the way an app traces a session.
After each call its finished spans are taken from an in-memory exporter and turned into plain
records: ``name``, ``scope`` (the tracer: ``livekit-agents``), ``span_id``, ``parent_id``,
``start``/``end`` in seconds on the call's clock (the lab's timelines and reports use the same
clock), ``attributes`` and ``events`` (``name``, ``time``, ``attributes``). Nothing is exported
anywhere else.

Each call is also checked: every race the chain reported (``CallOutcome.race_events``) must be
one of the span events (:func:`untraced_races`), so the lab proves what an app sees in its
traces.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livekit.agents.telemetry import set_tracer_provider
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..testing.clock import virtual_wall_time

if TYPE_CHECKING:
    from .run import LabResult

__all__ = ["CallTraces", "RACE_EVENT_PREFIX", "untraced_races", "write_traces"]

RACE_EVENT_PREFIX = "resilient_agent.race_"
_KIND = "resilient_agent.race.kind"
_ACTION = "resilient_agent.race.action"
_NS = 1e9


class CallTraces:
    """Livekit's tracer pointed at an in-memory exporter while the lab runs; spans taken per call.

    Use as a context manager around the calls; :meth:`take` after each call.
    """

    def __init__(self) -> None:
        self._exporter = InMemorySpanExporter()
        self._provider = TracerProvider()
        self._provider.add_span_processor(SimpleSpanProcessor(self._exporter))

    def __enter__(self) -> CallTraces:
        set_tracer_provider(self._provider)
        return self

    def __exit__(self, *exc: object) -> None:
        # livekit's public setter back to the API's global provider: tracing off again, and no
        # OpenTelemetry global was ever set by the lab
        set_tracer_provider(trace.get_tracer_provider())
        self._provider.shutdown()

    def take(self, call_start: float) -> tuple[dict[str, Any], ...]:
        """The spans finished since the last take, as records, in the order they started.

        Args:
            call_start: The loop time the call started at (``CallWorld.t0``).
        """
        spans = self._exporter.get_finished_spans()
        self._exporter.clear()
        origin = virtual_wall_time(call_start)
        ordered = sorted(spans, key=lambda s: (s.start_time or 0, s.name))
        return tuple(span_record(span, origin) for span in ordered)


def span_record(span: ReadableSpan, origin: float) -> dict[str, Any]:
    """``span`` as a plain record, its times in seconds after ``origin`` (wall seconds)."""
    context = span.get_span_context()
    scope = span.instrumentation_scope
    return {
        "name": span.name,
        "scope": scope.name if scope is not None else None,
        "span_id": _hex_id(context.span_id if context is not None else None),
        "parent_id": _hex_id(span.parent.span_id if span.parent is not None else None),
        "start": _seconds(span.start_time, origin),
        "end": _seconds(span.end_time, origin),
        "attributes": _plain(span.attributes),
        "events": [
            {
                "name": event.name,
                "time": _seconds(event.timestamp, origin),
                "attributes": _plain(event.attributes),
            }
            for event in span.events
        ],
    }


def race_span_events(
    spans: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(span, event) for each of the chain's race events in ``spans``."""
    for span in spans:
        for event in span["events"]:
            if event["name"].startswith(RACE_EVENT_PREFIX):
                yield span, event


def untraced_races(
    race_events: Sequence[Mapping[str, Any]], spans: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The reported races that are not a span event of the same event, kind and action."""
    traced = collections.Counter(
        (event["name"], event["attributes"].get(_KIND), event["attributes"].get(_ACTION))
        for _, event in race_span_events(spans)
    )
    missing = []
    for race in race_events:
        key = (f"resilient_agent.{race['event']}", race["kind"], race.get("action"))
        if traced[key] > 0:
            traced[key] -= 1
        else:
            missing.append(race)
    return missing


def write_traces(results: Sequence[LabResult], path: Path) -> int:
    """Write every result's spans to ``path``, one JSON object per line; returns the count.

    Each line names its call (``scenario``, ``agent``, and ``onset_s`` in a sweep) before the
    span's own fields.
    """
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for result in results:
            call: dict[str, Any] = {"scenario": result.scenario.name, "agent": result.agent.path}
            if result.onset is not None:
                call["onset_s"] = result.onset
            for span in result.spans:
                out.write(json.dumps({**call, **span}) + "\n")
                count += 1
    return count


def _seconds(ns: int | None, origin: float) -> float | None:
    return None if ns is None else round(ns / _NS - origin, 6)


def _hex_id(span_id: int | None) -> str | None:
    return None if span_id is None else format(span_id, "016x")


def _plain(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in (attributes or {}).items()
    }
