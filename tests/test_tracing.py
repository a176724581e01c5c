"""Races in OpenTelemetry: span events on livekit's spans, the counter, the report, no content."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from livekit.agents.telemetry import gen_ai, set_tracer_provider
from opentelemetry import trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from resilient_agent import CallReport, RaceDetectedEvent, RaceHandledEvent, ResilientAgent
from resilient_agent._session import tracing
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "tool_gap/gap_protected_say"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def doc_setup() -> str:
    """The setup snippet of docs/observability.md, as written."""
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    (block,) = [
        b
        for lang, b in _FENCE.findall(text)
        if lang == "python" and "set_tracer_provider" in b and "InMemorySpanExporter" in b
    ]
    return block


@dataclass
class TracedCall:
    outcome: Any
    agent: Any
    spans: tuple[ReadableSpan, ...]
    metrics: Any


def _restore_livekit_tracer() -> None:
    # livekit's tracer starts on the global provider (the API's proxy: tracing off); its public
    # setter puts it back there, so no OTel global is ever set by these tests
    set_tracer_provider(trace.get_tracer_provider())


def _set_meter_provider(provider: Any) -> Any:
    # the API lets a process set its meter provider once; the tests set and restore the module
    # global behind get_meter_provider() instead, leaving the set-once guard untouched
    previous = metrics_internal._METER_PROVIDER
    metrics_internal._METER_PROVIDER = provider
    return previous


def _scenario() -> Any:
    return next(s for s in scenarios() if s.name == SCENARIO)


@pytest.fixture(scope="module")
def traced() -> Iterator[TracedCall]:
    """One lab call with the docs' tracer setup and an in-memory metric reader; globals restored."""
    names: dict[str, Any] = {}
    exec(doc_setup(), names)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    previous = _set_meter_provider(meters)
    try:
        world, outcome = run_scenario(_scenario(), ResilientAgent)
        spans = names["exporter"].get_finished_spans()
        metrics = reader.get_metrics_data()
    finally:
        _set_meter_provider(previous)
        _restore_livekit_tracer()
        names["provider"].shutdown()
        meters.shutdown()
    yield TracedCall(outcome, world.agent, spans, metrics)


def _race_span_events(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, str, Any]]:
    """(span name, event name, attributes) of each of our events, on livekit's spans."""
    found = []
    for span in spans:
        for event in span.events:
            if event.name.startswith("resilient_agent."):
                assert span.instrumentation_scope is not None
                assert span.instrumentation_scope.name == "livekit-agents"
                found.append((span.name, event.name, event.attributes))
    return found


def test_every_race_is_a_span_event_on_livekits_spans(traced: TracedCall) -> None:
    races = traced.outcome.race_events
    assert races, "the scenario reports races"
    on_spans = _race_span_events(traced.spans)
    assert len(on_spans) == len(races)
    unmatched = list(on_spans)
    for race in races:
        match = next(
            found
            for found in unmatched
            if found[1] == f"resilient_agent.{race['event']}"
            and found[2]["resilient_agent.race.kind"] == race["kind"]
            and found[2].get("resilient_agent.race.action") == race["action"]
            and all(
                found[2].get(f"resilient_agent.race.{key}") == value
                for key in ("speech_id", "tool", "words", "seconds", "held_s")
                if (value := race.get(key)) is not None
            )
        )
        unmatched.remove(match)
        assert match[2]["resilient_agent.race.middleware"]
    # the held speech is inside livekit's turn; the rest outlived on_enter's span
    landed = collections.Counter(
        (name, attrs["resilient_agent.race.kind"]) for name, _, attrs in on_spans
    )
    assert landed == {
        ("agent_turn", "protected_speech_over_speaking_caller"): 2,
        ("agent_session", "speech_withheld_from_stt"): 2,
        ("agent_session", "dropped_user_turn"): 2,
        # the tool reply's inference, which goes without the question another reply answers
        ("llm_node", "tool_reply_reanswers"): 2,
    }


def test_the_call_report_is_on_the_session_span(traced: TracedCall) -> None:
    (session,) = [s for s in traced.spans if s.name == "agent_session"]
    report = traced.agent.call_report
    attributes = session.attributes or {}
    assert attributes["resilient_agent.report.call_id"] == report.call_id
    for kind, count in report.races.items():
        assert attributes[f"resilient_agent.report.races.{kind}"] == count
    for action, count in report.actions.items():
        assert attributes[f"resilient_agent.report.actions.{action}"] == count
    for name, count in report.counters.items():
        assert attributes[f"resilient_agent.report.counters.{name}"] == count
    assert attributes["resilient_agent.report.middleware_errors"] == ()


def test_no_word_the_caller_said_is_in_our_attributes(traced: TracedCall) -> None:
    said = [u.text for u in _scenario().utterances]
    phrases = {
        " ".join(pair)
        for text in said
        for pair in zip(text.split(), text.split()[1:], strict=False)
    }
    values = []
    for span in traced.spans:
        groups = [span.attributes or {}, *(e.attributes or {} for e in span.events)]
        for attributes in groups:
            values += [str(v) for k, v in attributes.items() if k.startswith("resilient_agent.")]
    assert values
    leaked = [(p, v) for p in phrases for v in values if p in v]
    assert not leaked
    assert not [v for v in values if "pii" in v]


def test_races_are_counted(traced: TracedCall) -> None:
    (resource,) = traced.metrics.resource_metrics
    (scope,) = [s for s in resource.scope_metrics if s.scope.name == tracing.METER_NAME]
    (counter,) = [m for m in scope.metrics if m.name == tracing.RACE_COUNTER]
    counted = {
        tuple(sorted(point.attributes.items())): point.value for point in counter.data.data_points
    }
    expected: collections.Counter[tuple[tuple[str, Any], ...]] = collections.Counter()
    for race in traced.outcome.race_events:
        attributes = {"event": race["event"], "kind": race["kind"]}
        if race["action"] is not None:
            attributes["action"] = race["action"]
        expected[tuple(sorted(attributes.items()))] += 1
    without_middleware = collections.Counter()
    for key, value in counted.items():
        assert dict(key)["middleware"]
        without_middleware[tuple(item for item in key if item[0] != "middleware")] += value
    assert without_middleware == expected


def test_with_no_provider_nothing_is_recorded(
    traced: TracedCall, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[Any] = []
    real = tracing._race_attributes
    monkeypatch.setattr(tracing, "_race_attributes", lambda ev: built.append(ev) or real(ev))
    assert metrics_internal._METER_PROVIDER is None  # the default: the API's no-op meter
    _world, outcome = run_scenario(_scenario(), ResilientAgent)
    assert len(outcome.race_events) == len(traced.outcome.race_events)
    assert built == []  # the current span is not recording: nothing else is looked at


def _one_traced(event: Any) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("turn"):
        tracing.record_race(event)
    (span,) = exporter.get_finished_spans()
    (recorded,) = span.events
    assert recorded.name == f"resilient_agent.{event.type}"
    return dict(recorded.attributes or {})


_WORDY = RaceHandledEvent(
    kind="dropped_user_turn",
    action="merged_into_next_turn",
    middleware="ThirdParty",
    details={
        "text": "please book a table",
        "words": 4,
        "speech_id": "speech_1",
        "timing": {"gap_s": 0.5, "ids": ["a", "b"]},
        "mixed": [1, "a"],
        "unknown": object(),
        "none": None,
    },
)


def test_details_are_flattened_and_content_is_withheld() -> None:
    attributes = _one_traced(_WORDY)
    assert attributes == {
        "resilient_agent.race.kind": "dropped_user_turn",
        "resilient_agent.race.action": "merged_into_next_turn",
        "resilient_agent.race.middleware": "ThirdParty",
        "resilient_agent.race.words": 4,
        "resilient_agent.race.speech_id": "speech_1",
        "resilient_agent.race.timing.gap_s": 0.5,
        "resilient_agent.race.timing.ids": ("a", "b"),
    }
    detected = _one_traced(RaceDetectedEvent(kind="k", middleware="M"))
    assert "resilient_agent.race.action" not in detected


def test_content_needs_our_switch_and_livekits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_trace_content", True)
    monkeypatch.setattr(gen_ai, "_capture_content", True)
    assert _one_traced(_WORDY)["resilient_agent.race.pii.text"] == "please book a table"
    monkeypatch.setattr(gen_ai, "_capture_content", False)
    assert "resilient_agent.race.pii.text" not in _one_traced(_WORDY)
    tracing.set_trace_content(False)
    monkeypatch.setattr(gen_ai, "_capture_content", True)
    assert "resilient_agent.race.pii.text" not in _one_traced(_WORDY)


def test_with_no_span_and_no_session_nothing_happens() -> None:
    assert not trace.get_current_span().is_recording()
    tracing.record_race(_WORDY)
    tracing.record_report(CallReport(call_id="call_x"), object())


def _metric_points(traced: TracedCall, name: str) -> list[Any]:
    (resource,) = traced.metrics.resource_metrics
    (scope,) = [s for s in resource.scope_metrics if s.scope.name == tracing.METER_NAME]
    (metric,) = [m for m in scope.metrics if m.name == name]
    return list(metric.data.data_points)


def test_recovery_latency_is_from_detection_to_action(traced: TracedCall) -> None:
    races = traced.outcome.race_events
    expected: dict[tuple[str, str], list[float]] = {}
    for handled in (r for r in races if r["event"] == "race_handled"):
        detected = next(
            r for r in races if r["event"] == "race_detected" and r["kind"] == handled["kind"]
        )
        expected.setdefault((handled["kind"], handled["action"]), []).append(
            handled["at_s"] - detected["at_s"]
        )
    points = _metric_points(traced, tracing.RECOVERY_LATENCY)
    measured = {(p.attributes["kind"], p.attributes["action"]): p for p in points}
    assert set(measured) == set(expected)
    for key, latencies in expected.items():
        assert measured[key].count == len(latencies)
        assert measured[key].sum == pytest.approx(sum(latencies), abs=1e-3)
    # the protected line waited for the caller: a recovery that took time, not a zero
    assert measured[("protected_speech_over_speaking_caller", "caller_stopped")].sum > 1.0


def test_the_reports_figures_are_counters(traced: TracedCall) -> None:
    report = traced.agent.call_report
    assert report.counters, "the scenario's races add to the report's counters"
    for name, total in report.counters.items():
        points = _metric_points(traced, f"{tracing.METER_NAME}.{name}")
        assert sum(p.value for p in points) == total
        assert all(p.attributes["kind"] and p.attributes["middleware"] for p in points)


def test_a_vetoed_hang_up_and_a_latency_within_one_session_only() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    previous = _set_meter_provider(meters)
    try:
        first, second = tracing.RaceTelemetry(), tracing.RaceTelemetry()
        first.record(
            RaceDetectedEvent(kind="shutdown_request", middleware="ShutdownGate", created_at=10.0)
        )
        # another session's action on the same kind pairs with nothing
        second.record(
            RaceHandledEvent(
                kind="shutdown_request",
                action="kept_call",
                middleware="ShutdownGate",
                created_at=11.0,
            )
        )
        first.record(
            RaceHandledEvent(
                kind="shutdown_request",
                action="kept_call",
                middleware="ShutdownGate",
                created_at=12.5,
            )
        )
        data = reader.get_metrics_data()
    finally:
        _set_meter_provider(previous)
        meters.shutdown()
    (resource,) = data.resource_metrics
    (scope,) = resource.scope_metrics
    metrics = {m.name: list(m.data.data_points) for m in scope.metrics}
    (vetoed,) = metrics[tracing.HANGUPS_VETOED]
    assert vetoed.value == 2 and dict(vetoed.attributes) == {"middleware": "ShutdownGate"}
    (latency,) = metrics[tracing.RECOVERY_LATENCY]
    assert latency.count == 1 and latency.sum == pytest.approx(2.5)


def test_the_backend_setup_runs_as_written() -> None:
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    (block,) = [b for lang, b in _FENCE.findall(text) if lang == "python" and "trace_to" in b]
    names: dict[str, Any] = {}
    exec(block, names)
    for exporter in (
        names["langsmith_exporter"]("lsv2_key", "calls"),
        names["langfuse_exporter"]("pk-lf-1", "sk-lf-1"),
        names["otlp_exporter"]("http://collector:4318/v1/traces"),
    ):
        assert type(exporter).__name__ == "OTLPSpanExporter"
        exporter.shutdown()
    memory = InMemorySpanExporter()
    # the block's batch processor, swapped for one that keeps the spans here
    names["BatchSpanProcessor"] = lambda exporter: SimpleSpanProcessor(memory)
    try:
        provider = names["trace_to"](names["otlp_exporter"]("http://collector:4318/v1/traces"))
        _world, outcome = run_scenario(_scenario(), ResilientAgent)
    finally:
        _restore_livekit_tracer()
        provider.shutdown()
    races = outcome.race_events
    assert races
    assert len(_race_span_events(memory.get_finished_spans())) == len(races)
