"""Races in OpenTelemetry: span events on livekit's spans, a counter, the report on the session.

livekit-agents traces a session through ``livekit.agents.telemetry`` (``agent_session``,
``agent_turn``, ``user_turn``, ``function_tool``, ...). Every race the chain reports is added
here, as it is emitted (:meth:`.SessionRuntime.emit`), to the span livekit has current:

* a span event ``resilient_agent.race_detected`` / ``resilient_agent.race_handled`` with the
  attributes ``resilient_agent.race.kind``, ``.action`` (handled only), ``.middleware`` and
  one per detail (``resilient_agent.race.speech_id``, ...; a nested dict's keys are joined with
  dots, values that are not str/bool/int/float or a sequence of one of them are skipped). A
  race reported from a task whose span livekit already ended (a hook queued in ``on_enter``)
  lands on ``agent_session`` instead;
* metrics on the meter ``resilient_agent``, through whatever meter provider the app set (the
  API's no-op one otherwise):

  - ``resilient_agent.races``: one count per race detected and handled, with the attributes
    ``event``, ``kind``, ``middleware`` and ``action`` (handled only);
  - ``resilient_agent.race.recovery_latency`` (histogram, seconds): from a race's detection to
    the first action on it by the same middleware, with ``kind``, ``middleware``, ``action``;
  - one counter per figure the call report sums (``counts`` of the event:
    ``resilient_agent.words_recovered``, ``resilient_agent.dropped_turns_answered``, ...), with
    ``kind`` and ``middleware``;
  - ``resilient_agent.hangups_vetoed``: a hang-up the gate refused (``shutdown_request`` /
    ``kept_call``), with ``middleware``.

The call report so far goes on ``agent_session`` as ``resilient_agent.report.*`` attributes
(:func:`record_report`) after each traced race and at livekit's ``close`` event: livekit ends
the span right after that event (1.8.0 just before it), before the chain's own stop builds the
final ``call_summary``.

Details carry ids and timings, never transcripts. A detail named like content (``text``,
``transcript``, ...) whose value is text is left out unless content tracing is on
(:func:`set_trace_content`, or ``RESILIENT_AGENT_TRACE_CONTENT=1``) *and* livekit's own switch
is (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``); it then goes under
``resilient_agent.race.pii.<name>``, which livekit's PII filter strips from exporters given
``set_tracer_provider(..., allow_pii=False)``.

Only ``opentelemetry-api`` is used. With no tracer provider (the default) the current span is
not recording, which is the first thing checked; with no meter provider the counter is the
API's no-op one.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.util.types import AttributeValue

from .._engine.events import RaceDetectedEvent, RaceHandledEvent, ResilientEvent
from .._engine.log import get_logger
from .._livekit.compat import session_trace_context
from .report import CallReport

__all__ = [
    "CONTENT_ENV",
    "HANGUPS_VETOED",
    "METER_NAME",
    "RACE_COUNTER",
    "RECOVERY_LATENCY",
    "RaceTelemetry",
    "content_enabled",
    "record_race",
    "record_report",
    "set_trace_content",
]

CONTENT_ENV = "RESILIENT_AGENT_TRACE_CONTENT"
"""Set to ``1`` to trace content-named details (see :func:`set_trace_content`)."""

METER_NAME = "resilient_agent"
RACE_COUNTER = "resilient_agent.races"
RECOVERY_LATENCY = "resilient_agent.race.recovery_latency"
HANGUPS_VETOED = "resilient_agent.hangups_vetoed"

_PREFIX = "resilient_agent.race."
_REPORT_PREFIX = "resilient_agent.report."
_UNSET_VALUES = frozenset({"", "0", "false", "no", "off"})
_CONTENT_KEYS = frozenset(
    {
        "text",
        "transcript",
        "words",
        "utterance",
        "said",
        "heard",
        "message",
        "content",
        "prompt",
        "instructions",
        "arguments",
        "output",
    }
)
_SCALARS = (str, bool, int, float)
# what OpenTelemetry accepts as an instrument name; a count a middleware names otherwise is
# left to the call report
_INSTRUMENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]{0,254}")

logger = get_logger("tracing")

_trace_content = os.environ.get(CONTENT_ENV, "").strip().lower() not in _UNSET_VALUES


class _Instruments:
    """The meter's instruments, made once per meter provider (the app may set it late)."""

    def __init__(self, provider: metrics.MeterProvider) -> None:
        self.provider = provider
        meter = provider.get_meter(METER_NAME)
        self._meter = meter
        self.races = meter.create_counter(
            RACE_COUNTER, unit="{race}", description="Races the chain detected and handled"
        )
        self.recovery_latency = meter.create_histogram(
            RECOVERY_LATENCY,
            unit="s",
            description="From a race's detection to the first action taken on it",
        )
        self.hangups_vetoed = meter.create_counter(
            HANGUPS_VETOED, unit="{hangup}", description="Hang-ups the shutdown gate refused"
        )
        self._counts: dict[str, metrics.Counter | None] = {}

    def count(self, name: str) -> metrics.Counter | None:
        """The counter of one figure the call report sums, or None if it cannot be named."""
        if name in self._counts:
            return self._counts[name]
        full = f"{METER_NAME}.{name}"
        counter = None
        if _INSTRUMENT_NAME.fullmatch(full):
            counter = self._meter.create_counter(full, description=f"Call report's {name}")
        # an unnameable figure is remembered too, so it is checked once per provider
        self._counts[name] = counter
        return counter


_instruments: _Instruments | None = None


def set_trace_content(enabled: bool) -> None:
    """Trace content-named details (the caller's words) too; off by default.

    livekit's own switch (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, or
    ``livekit.agents.telemetry.gen_ai.set_capture_content``) must be on as well.
    """
    global _trace_content
    _trace_content = enabled


def content_enabled() -> bool:
    """Whether content-named details go on spans: ours and livekit's switch are both on."""
    if not _trace_content:
        return False
    try:
        from livekit.agents.telemetry import gen_ai
    except ImportError:  # pragma: no cover - depends on the livekit-agents release
        return True
    return gen_ai.capture_content_enabled()


class RaceTelemetry:
    """One session's races in OpenTelemetry: span events and metrics.

    The session's runtime owns one, so a recovery latency pairs a detection with the action on
    it within one call only, and a race that outlived its span lands on that session's span.

    Args:
        session: The session traced (its ``agent_session`` span takes the races that outlived
            theirs); None traces on the current span only.
        report: The call's report so far, kept on the session span after each traced race (some
            livekit releases end that span before their ``close`` event); None leaves it to
            :func:`record_report`.
    """

    def __init__(
        self,
        session: object | None = None,
        report: Callable[[], CallReport] | None = None,
    ) -> None:
        self._session = session
        self._report = report
        self._detected: dict[tuple[str, str], deque[float]] = {}

    def record(self, event: ResilientEvent) -> None:
        """Trace and measure ``event`` if it is a race; other events are left alone."""
        if not isinstance(event, (RaceDetectedEvent, RaceHandledEvent)):
            return
        try:
            if _add_span_event(event, self._session) and self._report is not None:
                record_report(self._report(), self._session)
            self._measure(event)
        except Exception as exc:  # tracing never breaks the call
            logger.debug("race_not_traced", kind=event.kind, error=repr(exc))

    def _measure(self, event: RaceDetectedEvent | RaceHandledEvent) -> None:
        instruments = _current_instruments()
        attributes = {"event": event.type, "kind": event.kind, "middleware": event.middleware}
        key = (event.middleware, event.kind)
        if isinstance(event, RaceDetectedEvent):
            instruments.races.add(1, attributes)
            self._detected.setdefault(key, deque()).append(event.created_at)
            return
        instruments.races.add(1, {**attributes, "action": event.action})
        race = {"kind": event.kind, "middleware": event.middleware}
        opened = self._detected.get(key)
        if opened:
            latency = max(0.0, event.created_at - opened.popleft())
            instruments.recovery_latency.record(latency, {**race, "action": event.action})
        for name, amount in event.counts.items():
            counter = instruments.count(name)
            if counter is not None and amount > 0:
                counter.add(amount, race)
        if event.kind == "shutdown_request" and event.action == "kept_call":
            instruments.hangups_vetoed.add(1, {"middleware": event.middleware})


def record_race(event: ResilientEvent) -> None:
    """Trace and count ``event`` on its own.

    No recovery latency is measured: pairing a detection with its action needs the session's
    :class:`RaceTelemetry`.
    """
    RaceTelemetry().record(event)


def record_report(report: CallReport, session: object) -> None:
    """Put ``report`` on ``session``'s ``agent_session`` span, if it is still recording.

    The latest report wins: each attribute is set again, so a later one replaces the earlier.
    """
    try:
        span = _session_span(session)
        if span is not None:
            span.set_attributes(_report_attributes(report))
    except Exception as exc:  # tracing never breaks the call
        logger.debug("report_not_traced", error=repr(exc))


def _add_span_event(event: RaceDetectedEvent | RaceHandledEvent, session: object | None) -> bool:
    """Whether ``event`` went on a span."""
    span = trace.get_current_span()
    if not span.is_recording():
        if not span.get_span_context().is_valid:
            return False  # tracing is off, or no trace here: nothing to attach to
        # the race outlived its span (a hook queued while livekit's on_enter ran, say)
        fallback = _session_span(session) if session is not None else None
        if fallback is None:
            return False
        span = fallback
    span.add_event(f"resilient_agent.{event.type}", _race_attributes(event))
    return True


def _session_span(session: object) -> trace.Span | None:
    context = session_trace_context(session)
    if context is None:
        return None
    span = trace.get_current_span(context)
    return span if span.is_recording() else None


def _race_attributes(event: RaceDetectedEvent | RaceHandledEvent) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        f"{_PREFIX}kind": event.kind,
        f"{_PREFIX}middleware": event.middleware,
    }
    if isinstance(event, RaceHandledEvent):
        attributes[f"{_PREFIX}action"] = event.action
    details: dict[str, AttributeValue] = {}
    _flatten(details, "", event.details, content_enabled())
    for key, value in details.items():
        attributes.setdefault(f"{_PREFIX}{key}", value)
    return attributes


def _flatten(
    into: dict[str, AttributeValue], prefix: str, details: Mapping[Any, Any], content: bool
) -> None:
    for raw_key, value in details.items():
        key = f"{prefix}{raw_key}"
        if isinstance(value, Mapping):
            _flatten(into, f"{key}.", value, content)
            continue
        legal = _legal(value)
        if legal is None:
            continue
        if str(raw_key).lower() in _CONTENT_KEYS and _is_text(legal):
            if content:
                into[f"pii.{key}"] = legal
            continue
        into[key] = legal


def _legal(value: Any) -> AttributeValue | None:
    """``value`` as an OTel attribute value, or None when it cannot be one."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        items = list(value)
        kinds = {type(item) for item in items}
        if len(kinds) <= 1 and all(isinstance(item, _SCALARS) for item in items):
            return tuple(items)
    return None


def _is_text(value: AttributeValue) -> bool:
    return isinstance(value, str) or (
        isinstance(value, tuple) and any(isinstance(v, str) for v in value)
    )


def _current_instruments() -> _Instruments:
    global _instruments
    provider = metrics.get_meter_provider()
    if _instruments is None or _instruments.provider is not provider:
        _instruments = _Instruments(provider)
    return _instruments


def _report_attributes(report: CallReport) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {f"{_REPORT_PREFIX}call_id": report.call_id}
    for group in ("races", "actions", "counters"):
        for name, count in getattr(report, group).items():
            attributes[f"{_REPORT_PREFIX}{group}.{name}"] = count
    for listed in ("shutdown_decisions", "middleware_errors", "unknown_tools"):
        attributes[f"{_REPORT_PREFIX}{listed}"] = tuple(getattr(report, listed))
    return attributes
