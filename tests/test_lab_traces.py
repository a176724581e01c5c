"""``resilient-agent lab --traces``: every call's spans as JSON lines, every race on them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from resilient_agent._session import tracing
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.run import AgentUnderTest, LabResult, default_agents, run_lab
from resilient_agent.lab.traces import race_span_events, untraced_races

_HANDOFF = "lost_words/during_handoff"


def _one_race_per_family() -> list[Any]:
    chosen: dict[str, Any] = {}
    for scenario in scenarios():
        if not scenario.control:
            chosen.setdefault(scenario.family, scenario)
    chosen["handoff"] = next(s for s in scenarios() if s.name == _HANDOFF)
    return list(chosen.values())


@pytest.fixture(scope="module")
def traced_results() -> list[LabResult]:
    resilient = [a for a in default_agents() if not a.reference]
    return run_lab(_one_race_per_family(), resilient, traces=True)


def test_every_race_of_every_family_is_a_span_event(traced_results: list[LabResult]) -> None:
    assert {r.scenario.family for r in traced_results} == {
        s.family for s in scenarios() if not s.control
    }
    total = 0
    for result in traced_results:
        races = result.outcome.race_events
        assert races, f"{result.scenario.name} reports races"
        missing = untraced_races(races, result.spans)
        assert missing == [], result.scenario.name
        for span, event in race_span_events(result.spans):
            assert span["scope"] == "livekit-agents", span["name"]
            assert event["attributes"]["resilient_agent.race.kind"]
            if event["name"] == "resilient_agent.race_handled":
                assert event["attributes"]["resilient_agent.race.action"]
        total += len(races)
    assert total >= 2 * len(traced_results)


def test_a_handed_off_calls_races_reach_the_first_agents_events(
    traced_results: list[LabResult],
) -> None:
    (handoff,) = [r for r in traced_results if r.scenario.name == _HANDOFF]
    kinds = [(r["kind"], r["action"]) for r in handoff.outcome.race_events]
    # reported while the agent handed to runs: before, the lab listened to the first agent only
    assert ("dropped_user_turn", "answered") in kinds


def test_spans_are_on_the_calls_clock(traced_results: list[LabResult]) -> None:
    (result,) = [r for r in traced_results if r.scenario.name == "tool_gap/gap_protected_say"]
    first_words = result.scenario.utterances[0]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in result.spans:
        by_name.setdefault(span["name"], []).append(span)
    (session,) = by_name["agent_session"]
    assert session["start"] == pytest.approx(0.0, abs=1e-3)
    assert session["end"] == pytest.approx(result.virtual_seconds, abs=1e-2)
    assert by_name["user_speaking"][0]["start"] == pytest.approx(first_words.start, abs=1e-3)
    # livekit starts agent_speaking at the speaker's playback_started stamp, which the lab's
    # speaker still gives in loop time (docs/lab.md, "Known gaps of the fakes"): left out here
    for span in result.spans:
        if span["name"] == "agent_speaking":
            continue
        assert 0.0 <= span["start"] <= span["end"] <= session["end"] + 1e-3
        for event in span["events"]:
            assert span["start"] - 1e-3 <= event["time"] <= span["end"] + 1e-3


def test_the_command_writes_json_lines_and_links_each_race_to_its_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, report = tmp_path / "traces.jsonl", tmp_path / "report.html"
    code = main(
        [
            "lab",
            "--quiet",
            "--only",
            "tool_gap/gap_protected_say$",
            "--traces",
            str(traces),
            "--report",
            str(report),
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in traces.read_text().splitlines()]
    assert {line["agent"] for line in lines} == {a.path for a in default_agents()}
    for line in lines:
        assert {"scenario", "name", "span_id", "start", "end", "attributes", "events"} <= set(line)
        assert all(set(e) == {"name", "time", "attributes"} for e in line["events"])
    races = [
        (line["span_id"], e)
        for line in lines
        if line["agent"].startswith("resilient_agent")
        for e in line["events"]
        if e["name"].startswith("resilient_agent.race_")
    ]
    out = capsys.readouterr().out
    (summary,) = [line for line in out.splitlines() if line.startswith("traces:")]
    assert f"{len(lines)} spans of 2 calls" in summary
    assert f"{len(races)} race events, {len(races)} of them span events" in summary
    # a span dated before the call is explained where the traces are announced
    early = sorted({line["name"] for line in lines if line["start"] < 0})
    assert early, "no negative start left: drop the note and this check"
    (note,) = [line for line in out.splitlines() if line.startswith("note: in the traces")]
    assert f"{', '.join(early)} start before the call" in note
    html = report.read_text()
    links = re.findall(r'<a href="#([^"]*--span-([0-9a-f]{16}))">', html)
    assert sorted(span_id for _, span_id in links) == sorted(span_id for span_id, _ in races)
    for anchor, _ in links:
        assert f'<tr id="{anchor}">' in html


def test_an_untraced_race_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # the chain's span events switched off: the lab's own check must notice
    monkeypatch.setattr(tracing, "_add_span_event", lambda event: None)
    agents: list[AgentUnderTest] = [a for a in default_agents() if not a.reference]
    only = [s for s in scenarios() if s.name == "tool_gap/gap_protected_say"]
    (result,) = run_lab(only, agents, traces=True)
    assert len(untraced_races(result.outcome.race_events, result.spans)) == len(
        result.outcome.race_events
    )


def test_traces_are_refused_where_nothing_would_be_traced(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["lab", "--fuzz", "3", "--traces", "t.jsonl"]) == 2
    assert "--traces does not apply with --fuzz N" in capsys.readouterr().err
