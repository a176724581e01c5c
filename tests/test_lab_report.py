"""The lab report: timelines extracted from calls, the HTML they are drawn as, and how a browser
renders that drawing (headless Chromium, when installed)."""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lab_calls import LabCalls
from livekit.agents import Agent

from resilient_agent.lab.catalog import agents as lab_agents
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.html_report import render_report, scenario_anchor
from resilient_agent.lab.run import AgentUnderTest, LabResult, default_agents, run_lab
from resilient_agent.lab.timeline import CallTimeline, extract_timeline, write_timelines
from resilient_agent.testing import Scenario, Sweep, Utterance, run_scenario

BASELINE = AgentUnderTest("livekit.agents:Agent", Agent, reference=True)
# The race drawn in every check: a protected hold message, a 9 s tool, an interruption that
# livekit only honours 5 s later ("speech not done in time after interruption").
RACE = "tool_gap/business_logic_long"
SWEPT = "lost_words/straddling_protected_end"
# Scripted input drawn on its own: background noise, a typed chat message, an LLM that hangs.
NOISE = "stall/reply_waits_for_noise"
TYPED = "lost_words/typed_over_protected_say"
HANGS = "stall/llm_hangs"
RESILIENT = "resilient_agent:ResilientAgent"
PROTECTED_PURPLE = (0x7B, 0x1F, 0xA2)
INTERRUPTIBLE_BLUE = (0x1E, 0x88, 0xE5)
# A protected hold message WaitForCaller holds until the caller stops, and a preamble livekit
# paused for the caller and resumed protected, which WaitForCaller keeps paused.
HELD = "tool_gap/gap_protected_say"
RESUMED = "tool_gap/protected_on_resume"
LOST_WORD_RED = (0xEF, 0x53, 0x50)
REACHED_GREEN = (0xA5, 0xD6, 0xA7)
NOISE_GREY = (0xEC, 0xEF, 0xF1)
HUNG_PINK = (0xFD, 0xE0, 0xDC)
CANCELLED_RED = (0xC6, 0x28, 0x28)


def _scenario(name: str) -> Any:
    return next(s for s in scenarios() if s.name == name)


@pytest.fixture(scope="module")
def agents() -> list[AgentUnderTest]:
    # the plain Agent, and ResilientAgent when it is importable: two panels on one axis
    return default_agents()


@pytest.fixture(scope="module")
def race_results(agents: list[AgentUnderTest], lab_calls: LabCalls) -> list[LabResult]:
    return lab_calls.results([_scenario(RACE), _scenario("control/two_turns")], agents)


@pytest.fixture(scope="module")
def input_results(agents: list[AgentUnderTest], lab_calls: LabCalls) -> list[LabResult]:
    return lab_calls.results([_scenario(NOISE), _scenario(TYPED), _scenario(HANGS)], agents)


@pytest.fixture(scope="module")
def held_results(agents: list[AgentUnderTest], lab_calls: LabCalls) -> list[LabResult]:
    return lab_calls.results([_scenario(HELD), _scenario(RESUMED)], agents)


def _timeline(results: Sequence[LabResult], scenario: str, agent: str) -> CallTimeline:
    result = next(r for r in results if r.scenario.name == scenario and r.agent.path == agent)
    assert result.timeline is not None
    return result.timeline


# --- the timeline ----------------------------------------------------------------------------


def test_every_result_carries_a_timeline_that_agrees_with_its_verdict(
    race_results: list[LabResult],
) -> None:
    for result in race_results:
        timeline = result.timeline
        assert timeline is not None
        assert timeline.passed == result.outcome.passed
        assert timeline.reasons == tuple(result.outcome.reasons)
        # the words drawn as lost are exactly the ones the contracts counted
        assert sum(u.lost_words for u in timeline.utterances) == result.outcome.lost_words
        assert timeline.typed == () and timeline.noise == ()
        assert not any(r.hung for r in timeline.llm_requests)
        assert [u.number for u in timeline.utterances] == [
            i + 1 for i in range(len(result.scenario.utterances))
        ]
        assert [s.label for s in timeline.speeches] == [
            f"S{i + 1}" for i in range(len(timeline.speeches))
        ]
        assert 0 < timeline.activity_end <= timeline.ended_at + 10


def test_timeline_shows_the_interruption_livekit_honoured_five_seconds_late(
    race_results: list[LabResult],
) -> None:
    timeline = _timeline(race_results, RACE, BASELINE.path)
    owner, hold, answer = timeline.speeches
    # the reply that called the tool: interrupted by the caller, done only when livekit gave up
    assert owner.source == "generate_reply" and not owner.protected_at_creation
    assert owner.interrupted and owner.interrupted_at is not None and owner.done_at is not None
    assert owner.done_at - owner.interrupted_at == pytest.approx(5.0, abs=0.05)
    assert owner.playouts == ()
    # the tool's protected hold message played to the end
    assert hold.source == "say" and hold.protected_at_creation
    assert [(p.protected, p.interrupted) for p in hold.playouts] == [(True, False)]
    assert hold.playouts[0].text == "One moment while I book that table for you."
    assert answer.created_at == pytest.approx(owner.done_at, abs=0.01)
    # tool start and end come from tool_execution_updated
    (tool,) = timeline.tools
    assert tool.name == "book_table" and tool.status == "done"
    assert tool.end is not None and tool.end - tool.start > 9.0
    warnings = [m for m in timeline.marks if m.kind == "livekit_log"]
    assert any("speech not done in time" in m.detail for m in warnings)
    assert warnings[0].at == pytest.approx(owner.done_at, abs=0.01)
    # "actually" was said over the protected hold message: its audio never reached the STT
    said = timeline.utterances[1].words
    assert [w.text for w in said if w.status != "reached_llm"] == ["actually"]
    assert said[0].status == "lost_before_stt"
    assert said[0].start == timeline.utterances[1].start
    assert [r.tool_calls for r in timeline.llm_requests] == [("book_table",), ()]
    assert timeline.race_events == ()  # a plain Agent reports none


def test_timeline_states_and_turns_follow_the_call(race_results: list[LabResult]) -> None:
    timeline = _timeline(race_results, "control/two_turns", BASELINE.path)
    speaking = [s for s in timeline.user_states if s.state == "speaking"]
    assert len(speaking) == len(timeline.utterances) == 2
    for span, utterance in zip(speaking, timeline.utterances, strict=True):
        # the VAD hears speech 50 ms after it starts and lets it go after 0.55 s of silence
        assert span.start == pytest.approx(utterance.start + 0.05, abs=0.02)
    turns = [m for m in timeline.marks if m.kind == "user_turn"]
    assert [m.label for m in turns] == ["u1", "u2"]
    assert not [m for m in timeline.marks if m.kind == "merged_turn"]
    agent_speaking = [s for s in timeline.agent_states if s.state == "speaking"]
    playouts = [p for s in timeline.speeches for p in s.playouts]
    assert len(agent_speaking) == len(playouts) == 2
    for state, playout in zip(agent_speaking, playouts, strict=True):
        assert state.start == playout.start
    assert all(not p.interrupted for p in playouts)


def test_timeline_marks_utterances_committed_as_one_turn() -> None:
    # 0.3 s apart: the VAD never hears the silence between them, so livekit commits one turn
    scenario = Scenario(
        name="merge/short_pause",
        family="merge",
        description="Two utterances with a pause shorter than the VAD's silence.",
        agent=lab_agents.plain_agent,
        utterances=(Utterance(1.0, 2.0, "do you have"), Utterance(2.3, 3.0, "a terrace")),
        duration=8.0,
    )
    (result,) = run_lab([scenario], [BASELINE])
    timeline = result.timeline
    assert timeline is not None
    assert [u.merged_with for u in timeline.utterances] == [(2,), (1,)]
    turns = [m for m in timeline.marks if m.kind in ("user_turn", "merged_turn")]
    assert [(m.kind, m.label) for m in turns] == [("merged_turn", "u1+u2 merged")]
    page = _Elements(render_report([result], [BASELINE]))
    drawn = [e for e in page.find("g", "mark") if e.attrs.get("data-kind") == "merged_turn"]
    assert len(drawn) == 1


def test_race_events_are_drawn_where_they_were_reported() -> None:
    world, outcome = run_scenario(_scenario("control/two_turns"), Agent)
    # the records the runner keeps of ResilientAgent's race_detected / race_handled events
    outcome.race_events[:] = [
        {"kind": "dropped_user_turn", "action": None, "event": "race_detected", "at_s": 2.5},
        {
            "kind": "dropped_user_turn",
            "action": "answered",
            "event": "race_handled",
            "at_s": 4.25,
            "words": 3,
        },
    ]
    timeline = extract_timeline(world, outcome, agent=BASELINE.path, agent_label="Agent")
    assert [(m.at, m.kind, m.label) for m in timeline.race_events] == [
        (2.5, "race_detected", "dropped_user_turn detected"),
        (4.25, "race_handled", "dropped_user_turn → answered"),
    ]
    assert json.loads(timeline.race_events[1].detail)["words"] == 3
    result = LabResult(world.scenario, BASELINE, outcome, None, 0.0, 0.0, timeline)
    page = _Elements(render_report([result], [BASELINE]))
    drawn = [e for e in page.find("g", "mark") if e.attrs.get("data-kind", "").startswith("race")]
    assert [(e.attrs["data-kind"], float(e.attrs["data-at"])) for e in drawn] == [
        ("race_detected", 2.5),
        ("race_handled", 4.25),
    ]


def test_timeline_draws_typed_messages_with_their_fate(
    input_results: list[LabResult], agents: list[AgentUnderTest]
) -> None:
    said = "do you have a table for two tonight"
    for result in input_results:
        timeline = result.timeline
        assert timeline is not None
        # words lost by utterances and by typed messages add up to the contracts' count
        lost = sum(u.lost_words for u in timeline.utterances)
        assert lost + sum(t.lost_words for t in timeline.typed) == result.outcome.lost_words
        # reply latencies: the utterances' (expecting one), then the typed messages'
        drawn = [u.reply_latency_s for u in timeline.utterances if u.expect_reply]
        drawn += [t.reply_latency_s for t in timeline.typed if t.expect_reply]
        assert drawn == result.outcome.reply_latencies_s
    # a plain Agent cannot take a message typed over its protected greeting: every word is lost
    plain = _timeline(input_results, TYPED, BASELINE.path)
    (typed,) = plain.typed
    assert (typed.number, typed.at, typed.text, typed.expect_reply) == (1, 3.0, said, True)
    assert typed.lost == tuple(said.split()) and typed.lost_words == 8
    assert typed.reached_llm_at is None and typed.reply_latency_s is None
    assert not [m for m in plain.marks if m.kind == "user_turn"]
    assert plain.utterances == ()
    if RESILIENT in [a.path for a in agents]:
        resilient = _timeline(input_results, TYPED, RESILIENT)
        (typed,) = resilient.typed
        assert typed.lost == () and typed.reached_llm_at == 3.0
        assert typed.reply_latency_s is not None
        assert typed.reply_latency_s == resilient.reply_latency_s == pytest.approx(2.44)
        # the turn it became is labelled with it, as utterances label theirs
        turns = [m for m in resilient.marks if m.kind == "user_turn"]
        assert [(m.at, m.label) for m in turns] == [(3.0, "t1")]
    # no other scenario types anything
    assert all(
        r.timeline and r.timeline.typed == () for r in input_results if r.scenario.name != TYPED
    )


def test_timeline_shows_background_noise(input_results: list[LabResult]) -> None:
    for result in input_results:
        assert result.timeline is not None
        expected = [(n.start, n.end, n.rms) for n in result.scenario.noise]
        assert [(n.start, n.end, n.rms) for n in result.timeline.noise] == expected
    timeline = _timeline(input_results, NOISE, BASELINE.path)
    ((noise),) = timeline.noise
    assert (noise.start, noise.end, noise.rms) == (4.5, 14.0, 1500.0)
    # the VAD hears the noise as the caller speaking, from 50 ms after it starts
    speaking = [s for s in timeline.user_states if s.state == "speaking"]
    assert speaking[-1].start == pytest.approx(noise.start + 0.05, abs=0.02)


def test_timeline_shows_hung_llm_requests_until_cancelled(
    input_results: list[LabResult], agents: list[AgentUnderTest]
) -> None:
    plain = _timeline(input_results, HANGS, BASELINE.path)
    (request,) = plain.llm_requests
    (speech,) = plain.speeches
    assert request.hung and request.answers == "user: do you have parking"
    # nothing cancels it until the lab closes the session at the end of the script, which
    # interrupts the speech handle it was generating for
    assert request.cancelled_at == speech.interrupted_at == plain.ended_at == 20.0
    for result in input_results:
        assert result.timeline is not None
        for track in result.timeline.llm_requests:
            if result.scenario.name != HANGS:
                assert not track.hung and track.cancelled_at is None
            if not track.hung:
                assert track.cancelled_at is None
    if RESILIENT in [a.path for a in agents]:
        resilient = _timeline(input_results, HANGS, RESILIENT)
        hung, retry = resilient.llm_requests
        # the watchdog interrupts the stalled reply and asks again: that cancels the request
        assert hung.hung and not retry.hung
        assert hung.cancelled_at == resilient.speeches[0].interrupted_at == 9.05
        assert retry.at == hung.cancelled_at
        assert resilient.activity_end < resilient.ended_at


def test_timeline_json_carries_noise_typed_and_hung(
    input_results: list[LabResult], tmp_path: Path
) -> None:
    path = tmp_path / "timeline.json"
    write_timelines([r.timeline for r in input_results if r.timeline is not None], path)
    calls = json.loads(path.read_text())["calls"]
    by_name = {(c["scenario"], c["agent"]): c for c in calls}
    noise = by_name[(NOISE, BASELINE.path)]
    assert noise["noise"] == [{"start": 4.5, "end": 14.0, "rms": 1500.0}]
    assert noise["typed"] == [] and noise["lost_words_by_typed"] == []
    typed = by_name[(TYPED, BASELINE.path)]
    assert typed["noise"] == []
    assert typed["typed"] == [
        {
            "number": 1,
            "at": 3.0,
            "text": "do you have a table for two tonight",
            "expect_reply": True,
            "lost": ["do", "you", "have", "a", "table", "for", "two", "tonight"],
            "reached_llm_at": None,
            "reply_latency_s": None,
        }
    ]
    assert typed["lost_words_by_typed"] == [8]
    (hung,) = by_name[(HANGS, BASELINE.path)]["llm_requests"]
    assert hung["hung"] is True and hung["cancelled_at"] == 20.0
    for request in noise["llm_requests"]:
        assert request["hung"] is False and request["cancelled_at"] is None


def test_report_draws_noise_typed_and_hung(
    input_results: list[LabResult], agents: list[AgentUnderTest]
) -> None:
    page = _Elements(render_report(input_results, agents))

    def title_of(group: _Element) -> str:
        titles = [e for e in page.all if e.tag == "title" and group in e.ancestors]
        return "".join(titles[-1].text)

    for svg in page.find("svg", "timeline"):
        axis_end = float(svg.attrs["data-axis-end"])
        left = float(svg.attrs["data-plot-left"])
        width = float(svg.attrs["data-plot-width"])

        def x_of(
            seconds: float, axis_end: float = axis_end, left: float = left, width: float = width
        ) -> float:
            return left + min(seconds, axis_end) / axis_end * width

        for panel in [e for e in page.find("g", "panel") if svg in e.ancestors]:
            section = next(a for a in panel.ancestors if a.tag == "section")
            name = next(
                r.scenario.name
                for r in input_results
                if scenario_anchor(r.scenario.name) == section.attrs["id"]
            )
            timeline = _timeline(input_results, name, panel.attrs["data-agent"])
            inside = [e for e in page.all if panel in e.ancestors]
            # background noise: a grey band hatched over the caller's row, start to end
            noise = [e for e in inside if e.tag == "g" and "noise" in e.classes]
            assert len(noise) == len(timeline.noise)
            for group, span in zip(noise, timeline.noise, strict=True):
                (band,) = [e for e in page.all if group in e.ancestors and e.tag == "rect"]
                assert "noise-band" in band.classes
                assert float(band.attrs["x"]) == pytest.approx(x_of(span.start), abs=0.1)
                assert float(band.attrs["x"]) + float(band.attrs["width"]) == pytest.approx(
                    x_of(span.end), abs=0.1
                )
                assert [e for e in page.find("path", "noise-hatch") if group in e.ancestors]
                assert "background noise" in title_of(group)
                assert f"{span.start:.3f} s to {span.end:.3f} s" in title_of(group)
            # typed messages: a bubble pointing at its arrival, its text and latency on hover
            typed = [e for e in inside if e.tag == "g" and "typed-message" in e.classes]
            assert len(typed) == len(timeline.typed)
            for group, message in zip(typed, timeline.typed, strict=True):
                assert float(group.attrs["data-at"]) == message.at
                assert int(group.attrs["data-lost"]) == message.lost_words
                (bubble,) = [e for e in page.find("path", "typed") if group in e.ancestors]
                fate = "typed-lost" if message.lost else "typed-reached"
                assert fate in bubble.classes
                # its tail's tip, where the path starts, is the moment it arrived
                start = re.match(r"M([\d.]+) ", bubble.attrs["d"])
                assert start is not None
                tip = float(start.group(1))
                assert tip == pytest.approx(x_of(message.at), abs=0.1)
                title = title_of(group)
                assert message.text in title
                if message.reply_latency_s is None:
                    assert "never answered audibly" in title
                else:
                    assert f"answered after {message.reply_latency_s:.2f} s" in title
            lines = [e for e in inside if e.tag == "line" and "typed-line" in e.classes]
            assert len(lines) == len(timeline.typed)
            # hung LLM requests: a dashed bar to their cancellation, "hung" on hover
            hung = [e for e in inside if e.tag == "g" and "llm-hung-request" in e.classes]
            requests = [r for r in timeline.llm_requests if r.hung]
            assert len(hung) == len(requests)
            for group, request in zip(hung, requests, strict=True):
                (bar,) = [e for e in page.find("rect", "llm-hung") if group in e.ancestors]
                assert float(bar.attrs["x"]) == pytest.approx(x_of(request.at), abs=0.1)
                end = request.cancelled_at if request.cancelled_at is not None else axis_end
                right = float(bar.attrs["x"]) + float(bar.attrs["width"])
                assert right == pytest.approx(x_of(end), abs=0.1)
                assert group.attrs["data-hung"] == "true"
                assert "HUNG" in title_of(group) and "hung" in "".join(
                    t for e in page.all if group in e.ancestors for t in e.text
                )
                caps = [e for e in page.find("rect", "llm-cancelled-cap") if group in e.ancestors]
                assert len(caps) == (request.cancelled_at is not None)
            # requests that answered keep their two-part bar
            normal = [e for e in inside if e.tag == "g" and "llm" in e.classes]
            assert len(normal) == len(timeline.llm_requests)
            for group in normal:
                waits = [e for e in page.find("rect", "llm-wait") if group in e.ancestors]
                assert bool(waits) != ("llm-hung-request" in group.classes)


def test_timeline_json_is_deterministic(tmp_path: Path, lab_calls: LabCalls) -> None:
    chosen = [_scenario(RACE)]
    # the session's run of the call (tests/lab_calls.py), and a fresh one
    first = lab_calls.results(chosen, [BASELINE])
    second = run_lab(chosen, [BASELINE])
    assert first[0].timeline is not None and second[0].timeline is not None
    assert first[0].timeline.as_dict() == second[0].timeline.as_dict()
    path = tmp_path / "timeline.json"
    write_timelines([first[0].timeline], path)
    payload = json.loads(path.read_text())
    assert payload["format"] == 1
    (call,) = payload["calls"]
    assert call["scenario"] == RACE and call["agent"] == BASELINE.path
    assert call["lost_words_by_utterance"] == [0, 1]
    assert {"utterances", "speeches", "tools", "llm_requests", "marks", "race_events"} <= set(call)


# --- the HTML, as written ----------------------------------------------------------------------


@dataclass(eq=False)
class _Element:
    tag: str
    attrs: dict[str, str]
    ancestors: tuple[_Element, ...]
    text: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def within(self, tag: str, css: str) -> _Element | None:
        matching = (a for a in reversed(self.ancestors) if a.tag == tag and css in a.classes)
        return next(matching, None)


class _Elements(HTMLParser):
    """Every element of a page with its attributes and ancestors."""

    _VOID = frozenset({"meta", "br", "link", "img", "input", "hr"})

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.all: list[_Element] = []
        self._open: list[_Element] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = _Element(tag, {k: v or "" for k, v in attrs}, tuple(self._open))
        self.all.append(element)
        if tag not in self._VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.all.append(_Element(tag, {k: v or "" for k, v in attrs}, tuple(self._open)))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1].text.append(data)

    def find(self, tag: str, css: str) -> list[_Element]:
        return [e for e in self.all if e.tag == tag and css in e.classes]


def test_report_is_self_contained(
    race_results: list[LabResult], agents: list[AgentUnderTest]
) -> None:
    page = render_report(race_results, agents)
    assert page.startswith("<!DOCTYPE html>")
    # nothing to fetch: no scripts, stylesheets, images or fonts from anywhere
    for forbidden in ("<script", "<link", "<img", "<iframe", "url(", "@import", "src="):
        assert forbidden not in page
    addresses = set(re.findall(r"https?://[^\"' )]+", page))
    assert addresses <= {"http://www.w3.org/2000/svg"}  # the SVG namespace name, never fetched


def test_report_draws_every_call_on_a_shared_axis(
    race_results: list[LabResult], agents: list[AgentUnderTest]
) -> None:
    page = _Elements(render_report(race_results, agents))
    # the summary table: one row per scenario, linking to its section
    rows = [e for e in page.all if e.tag == "a" and e.within("table", "summary")]
    assert [r.attrs["href"] for r in rows] == [
        f"#{scenario_anchor(RACE)}",
        f"#{scenario_anchor('control/two_turns')}",
    ]
    svgs = page.find("svg", "timeline")
    assert len(svgs) == 2
    for svg in svgs:
        axis_end = float(svg.attrs["data-axis-end"])
        left = float(svg.attrs["data-plot-left"])
        width = float(svg.attrs["data-plot-width"])
        panels = [e for e in page.find("g", "panel") if svg in e.ancestors]
        assert [p.attrs["data-agent"] for p in panels] == [a.path for a in agents]
        for panel in panels:
            section = next(a for a in panel.ancestors if a.tag == "section")
            name = next(
                r.scenario.name
                for r in race_results
                if scenario_anchor(r.scenario.name) == section.attrs["id"]
            )
            timeline = _timeline(race_results, name, panel.attrs["data-agent"])
            inside = [e for e in page.all if panel in e.ancestors]
            speeches = [e for e in inside if e.tag == "g" and "speech" in e.classes]
            assert [s.attrs["data-label"] for s in speeches] == [s.label for s in timeline.speeches]
            playouts = [e for e in inside if e.tag == "g" and "playout" in e.classes]
            assert len(playouts) == sum(len(s.playouts) for s in timeline.speeches)
            tools = [e for e in inside if e.tag == "g" and "tool-run" in e.classes]
            assert len(tools) == len(timeline.tools)
            llm = [e for e in inside if e.tag == "g" and "llm" in e.classes]
            assert len(llm) == len(timeline.llm_requests)
            bars = [e for e in inside if e.tag == "rect" and "utterance" in e.classes]
            assert len(bars) == len(timeline.utterances)
            for bar, utterance in zip(bars, timeline.utterances, strict=True):
                # x is the utterance's start on the shared axis
                expected = left + utterance.start / axis_end * width
                assert float(bar.attrs["x"]) == pytest.approx(expected, abs=0.1)
                expected_width = (utterance.end - utterance.start) / axis_end * width
                assert float(bar.attrs["width"]) == pytest.approx(expected_width, abs=0.2)
            words = [e for e in inside if e.tag == "rect" and "word" in e.classes]
            statuses = [w.status for u in timeline.utterances for w in u.words]
            assert [w.attrs["data-status"] for w in words] == statuses
            # every mark explains itself on hover
            for group in speeches + playouts + tools + llm + bars:
                titles = [e for e in page.all if e.tag == "title" and group in e.ancestors]
                assert titles and "".join(titles[0].text).strip()


def test_sweep_chart_plots_every_onset() -> None:
    # a coarse window keeps the test fast; it still holds failing and passing onsets
    written = _scenario(SWEPT)
    scenario = dataclasses.replace(written, sweep=Sweep(utterance=0, start=3.0, stop=6.0, step=0.5))
    results = run_lab([scenario], [BASELINE], sweep=True)
    page = _Elements(render_report(results, [BASELINE]))
    (chart,) = page.find("svg", "sweep")
    points = [e for e in page.find("g", "sweep-point") if chart in e.ancestors]
    assert [float(p.attrs["data-onset"]) for p in points] == scenario.sweep.onsets()
    assert [p.attrs["data-passed"] == "true" for p in points] == [r.outcome.passed for r in results]
    xs = []
    for point, result in zip(points, results, strict=True):
        (marker,) = [e for e in page.all if e.tag == "circle" and point in e.ancestors]
        assert ("sweep-pass" in marker.classes) == result.outcome.passed
        xs.append(float(marker.attrs["cx"]))
        # each point links to the timeline of its run, which the page holds
        link = point.ancestors[-1]
        anchor = link.attrs["href"].removeprefix("#")
        assert anchor == scenario_anchor(SWEPT, result.onset)
        assert [e for e in page.all if e.attrs.get("id") == anchor]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    # runs that were never answered sit in the band on top, above every answered run
    unanswered = [
        float(m.attrs["cy"])
        for p, r in zip(points, results, strict=True)
        if r.outcome.reply_latency_s is None
        for m in page.all
        if m.tag == "circle" and p in m.ancestors
    ]
    answered = [
        float(m.attrs["cy"])
        for p, r in zip(points, results, strict=True)
        if r.outcome.reply_latency_s is not None
        for m in page.all
        if m.tag == "circle" and p in m.ancestors
    ]
    assert unanswered and answered and max(unanswered) < min(answered)


def test_cli_writes_report_and_timeline(tmp_path: Path) -> None:
    report, timeline = tmp_path / "lab.html", tmp_path / "lab.json"
    code = main(
        [
            "lab",
            "--quiet",
            "--agent",
            BASELINE.path,
            "--only",
            "control/two_turns",
            "--report",
            str(report),
            "--timeline",
            str(timeline),
        ]
    )
    assert code == 0
    assert f'id="{scenario_anchor("control/two_turns")}"' in report.read_text()
    calls = json.loads(timeline.read_text())["calls"]
    assert [(c["scenario"], c["agent"], c["passed"]) for c in calls] == [
        ("control/two_turns", BASELINE.path, True)
    ]


# --- the drawing, as Chromium renders it ---------------------------------------------------------

_CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
_WINDOW_WIDTH = 1280

# Reads back where Chromium laid every mark out, in CSS pixels of the page.
_GEOMETRY_PROBE = """<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left + scrollX, right: r.right + scrollX,
            top: r.top + scrollY, bottom: r.bottom + scrollY}; };
  const out = {timelines: []};
  for (const svg of document.querySelectorAll('svg.timeline')) {
    const t = {id: svg.id, box: box(svg), ticks: [], panels: []};
    for (const tick of svg.querySelectorAll('line.tick')) {
      const b = box(tick); t.ticks.push({t: parseFloat(tick.dataset.t), x: (b.left + b.right) / 2});
    }
    for (const panel of svg.querySelectorAll('g.panel')) {
      const p = {agent: panel.dataset.agent, box: box(panel), speeches: [], utterances: [],
                 playouts: [], words: [], noise: [], typed: [], hung: []};
      for (const g of panel.querySelectorAll('g.noise')) {
        const r = g.querySelector('rect.noise-band');
        p.noise.push({start: +g.dataset.start, end: +g.dataset.end, box: box(r),
                      fill: getComputedStyle(r).fill});
      }
      for (const g of panel.querySelectorAll('g.typed-message')) {
        const b = g.querySelector('path.typed');
        p.typed.push({at: +g.dataset.at, lost: +g.dataset.lost, box: box(b),
                      fill: getComputedStyle(b).fill, stroke: getComputedStyle(b).stroke});
      }
      for (const g of panel.querySelectorAll('g.llm-hung-request')) {
        const r = g.querySelector('rect.llm-hung'), cap = g.querySelector('rect.llm-cancelled-cap');
        p.hung.push({at: +g.dataset.at, cancelled: g.dataset.cancelledAt === undefined ? null
                       : +g.dataset.cancelledAt, box: box(r), fill: getComputedStyle(r).fill,
                     dash: getComputedStyle(r).strokeDasharray, cap: cap ? box(cap) : null});
      }
      for (const s of panel.querySelectorAll('g.speech')) {
        p.speeches.push({label: s.dataset.label, box: box(s)});
      }
      for (const u of panel.querySelectorAll('rect.utterance')) {
        p.utterances.push({number: +u.dataset.number, start: +u.dataset.start,
                           end: +u.dataset.end, box: box(u)});
      }
      for (const g of panel.querySelectorAll('g.playout')) {
        const runs = [...g.querySelectorAll('rect.playout-run')].map((r) => ({
          start: +r.dataset.start, end: +r.dataset.end, mode: r.dataset.mode, box: box(r),
          fill: getComputedStyle(r).fill}));
        const silences = [...g.querySelectorAll('g.playout-silence')].map((s) => ({
          kind: s.dataset.kind, start: +s.dataset.start, end: +s.dataset.end,
          box: box(s.querySelector('rect.playout-held')),
          fill: getComputedStyle(s.querySelector('rect.playout-held')).fill}));
        const r = g.querySelector('rect.playout-run') || g.querySelector('rect');
        const left = Math.min(...[...runs, ...silences].map((x) => x.box.left));
        p.playouts.push({start: +g.dataset.start, mode: g.dataset.mode, left: left,
                         outcome: g.dataset.outcome, box: box(r), fill: getComputedStyle(r).fill,
                         runs: runs, silences: silences});
      }
      for (const w of panel.querySelectorAll('rect.word')) {
        p.words.push({status: w.dataset.status, start: +w.dataset.start, box: box(w),
                      fill: getComputedStyle(w).fill});
      }
      t.panels.push(p);
    }
    out.timelines.push(t);
  }
  const pre = document.createElement('pre');
  pre.id = 'geometry';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body>"""


def _run_chromium(*args: str, height: int) -> subprocess.CompletedProcess[str]:
    assert _CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                _CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                f"--user-data-dir={profile}",
                f"--window-size={_WINDOW_WIDTH},{height}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )


def _read_png(path: Path) -> np.ndarray:
    """Pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes), as RGB."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    width = height = channels = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows = np.zeros((height, stride), dtype=np.int32)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        line = np.frombuffer(raw, np.uint8, stride, start + 1).astype(np.int32)
        if kind == 0:
            current = line
        elif kind == 1:
            current = np.cumsum(line.reshape(width, channels), axis=0).reshape(stride) % 256
        elif kind == 2:
            current = (line + previous) % 256
        else:
            current = np.array(_unfilter(kind, line.tolist(), previous.tolist(), channels))
        rows[y] = current
        previous = current
    return rows.reshape(height, width, channels)[:, :, :3]


def _unfilter(kind: int, line: list[int], up: list[int], bpp: int) -> list[int]:
    out = [0] * len(line)
    for i, value in enumerate(line):
        a = out[i - bpp] if i >= bpp else 0
        b = up[i]
        if kind == 3:
            out[i] = (value + ((a + b) >> 1)) & 255
            continue
        c = up[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        out[i] = (value + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return out


def _share_of_colour(pixels: np.ndarray, box: dict[str, float], colour: tuple[int, ...]) -> float:
    """How much of ``box`` (shrunk by a pixel against anti-aliasing) is painted ``colour``."""
    top, bottom = round(box["top"]) + 1, round(box["bottom"]) - 1
    left, right = round(box["left"]) + 1, round(box["right"]) - 1
    area = pixels[top:bottom, left:right].astype(int)
    assert area.size, box
    close = np.all(np.abs(area - np.array(colour)) <= 4, axis=2)
    return float(close.mean())


@pytest.mark.skipif(
    _CHROMIUM is None,
    reason="Chromium is not installed (apt-get install -y chromium): the rendered report is "
    "checked in a headless browser",
)
def test_report_renders_in_headless_chromium(
    race_results: list[LabResult], agents: list[AgentUnderTest], tmp_path: Path
) -> None:
    results = [r for r in race_results if r.scenario.name == RACE]
    page = render_report(results, agents)
    report = tmp_path / "report.html"
    report.write_text(page, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _GEOMETRY_PROBE), encoding="utf-8")

    dom = _run_chromium("--dump-dom", probe.as_uri(), height=1000).stdout
    found = re.search(r'<pre id="geometry">(.*?)</pre>', dom, re.S)
    assert found, "the geometry probe did not run"
    (drawing,) = json.loads(html.unescape(found.group(1)))["timelines"]
    assert drawing["id"] == scenario_anchor(RACE)

    # the axis as laid out: evenly spaced ticks give the pixels of one second
    ticks = drawing["ticks"]
    assert len(ticks) >= 10
    (first, last) = ticks[0], ticks[-1]
    px_per_s = (last["x"] - first["x"]) / (last["t"] - first["t"])
    for tick in ticks:
        assert tick["x"] == pytest.approx(first["x"] + tick["t"] * px_per_s, abs=0.6)

    def x_at(seconds: float) -> float:
        return float(first["x"] + seconds * px_per_s)

    panels = drawing["panels"]
    assert [p["agent"] for p in panels] == [a.path for a in agents]
    # stacked one above the other
    for upper, lower in itertools.pairwise(panels):
        assert upper["box"]["bottom"] < lower["box"]["top"]
    for panel in panels:
        timeline = _timeline(results, RACE, panel["agent"])
        assert len(panel["speeches"]) == len(timeline.speeches)
        assert [s["label"] for s in panel["speeches"]] == [s.label for s in timeline.speeches]
        # one bar per speech handle, one row each, top to bottom in creation order
        tops = [s["box"]["top"] for s in panel["speeches"]]
        assert tops == sorted(tops) and len(set(tops)) == len(tops)
        assert len(panel["playouts"]) == sum(len(s.playouts) for s in timeline.speeches)
        for playout in panel["playouts"]:
            assert playout["left"] == pytest.approx(x_at(playout["start"]), abs=1.0)
            colour = PROTECTED_PURPLE if playout["mode"] == "protected" else None
            if colour is not None:
                assert playout["fill"] == "rgb(123, 31, 162)"
        # user speech bars start and end where their times fall on the shared axis
        assert len(panel["utterances"]) == len(timeline.utterances)
        for bar, utterance in zip(panel["utterances"], timeline.utterances, strict=True):
            assert bar["box"]["left"] == pytest.approx(x_at(utterance.start), abs=1.0)
            assert bar["box"]["right"] == pytest.approx(x_at(utterance.end), abs=1.0)
        for word in panel["words"]:
            assert word["box"]["left"] == pytest.approx(x_at(word["start"]), abs=1.0)
    # the caller's onsets are the same call for every agent: same pixels in every panel
    lefts = [[u["box"]["left"] for u in p["utterances"]] for p in panels]
    assert all(row == pytest.approx(lefts[0], abs=0.01) for row in lefts)

    # what a person sees: the screenshot paints the baseline's protected hold message purple
    # and the word said over it red, where the layout put them
    baseline = panels[0]
    screenshot = tmp_path / "report.png"
    height = int(baseline["box"]["bottom"]) + 20
    _run_chromium(f"--screenshot={screenshot}", report.as_uri(), height=height)
    pixels = _read_png(screenshot)
    assert pixels.shape[:2] == (height, _WINDOW_WIDTH)
    protected = [p for p in baseline["playouts"] if p["mode"] == "protected"]
    assert protected
    for playout in protected:
        assert _share_of_colour(pixels, playout["box"], PROTECTED_PURPLE) > 0.5
    lost = [w for w in baseline["words"] if w["status"] == "lost_before_stt"]
    assert lost
    for word in lost:
        assert _share_of_colour(pixels, word["box"], LOST_WORD_RED) > 0.9


@pytest.mark.skipif(
    _CHROMIUM is None,
    reason="Chromium is not installed (apt-get install -y chromium): the rendered report is "
    "checked in a headless browser",
)
def test_report_renders_noise_typed_and_hung_in_headless_chromium(
    input_results: list[LabResult], agents: list[AgentUnderTest], tmp_path: Path
) -> None:
    page = render_report(input_results, agents)
    report = tmp_path / "report.html"
    report.write_text(page, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _GEOMETRY_PROBE), encoding="utf-8")
    dom = _run_chromium("--dump-dom", probe.as_uri(), height=1000).stdout
    found = re.search(r'<pre id="geometry">(.*?)</pre>', dom, re.S)
    assert found, "the geometry probe did not run"
    drawings = json.loads(html.unescape(found.group(1)))["timelines"]
    assert [d["id"] for d in drawings] == [scenario_anchor(n) for n in (NOISE, TYPED, HANGS)]

    bottom = max(p["box"]["bottom"] for d in drawings for p in d["panels"])
    height = int(bottom) + 20
    screenshot = tmp_path / "report.png"
    _run_chromium(f"--screenshot={screenshot}", report.as_uri(), height=height)
    pixels = _read_png(screenshot)
    assert pixels.shape[:2] == (height, _WINDOW_WIDTH)

    seen = {"noise": 0, "typed": 0, "hung": 0}
    for drawing in drawings:
        ticks = drawing["ticks"]
        first, last = ticks[0], ticks[-1]
        px_per_s = (last["x"] - first["x"]) / (last["t"] - first["t"])

        def x_at(seconds: float, first: dict[str, float] = first, scale: float = px_per_s) -> float:
            return float(first["x"] + seconds * scale)

        for panel in drawing["panels"]:
            name = next(n for n in (NOISE, TYPED, HANGS) if scenario_anchor(n) == drawing["id"])
            timeline = _timeline(input_results, name, panel["agent"])
            utterances = panel["utterances"]
            # background noise: a grey band from its start to its end, on the caller's row
            assert len(panel["noise"]) == len(timeline.noise)
            for band in panel["noise"]:
                assert band["box"]["left"] == pytest.approx(x_at(band["start"]), abs=1.0)
                assert band["box"]["right"] == pytest.approx(x_at(band["end"]), abs=1.0)
                assert band["fill"] == "rgb(236, 239, 241)"
                for bar in utterances:
                    assert band["box"]["top"] == pytest.approx(bar["box"]["top"], abs=1.5)
                # grey, hatched: the band's colour with darker lines through it
                share = _share_of_colour(pixels, band["box"], NOISE_GREY)
                assert 0.3 < share < 0.9
                seen["noise"] += 1
            # a typed message: a bubble whose tail points at its arrival, red if its words were
            # lost, green if they reached the LLM, outlined in indigo
            assert len(panel["typed"]) == len(timeline.typed)
            for bubble, message in zip(panel["typed"], timeline.typed, strict=True):
                assert bubble["box"]["left"] == pytest.approx(x_at(message.at), abs=1.0)
                assert bubble["stroke"] == "rgb(40, 53, 147)"
                colour = LOST_WORD_RED if message.lost else REACHED_GREEN
                assert _share_of_colour(pixels, bubble["box"], colour) > 0.4
                seen["typed"] += 1
            # a hung request: a pale red dashed bar from the request to its cancellation,
            # which a red cap marks; the bars of answered requests are teal
            hung = [r for r in timeline.llm_requests if r.hung]
            assert len(panel["hung"]) == len(hung)
            for bar, request in zip(panel["hung"], hung, strict=True):
                assert bar["box"]["left"] == pytest.approx(x_at(request.at), abs=1.0)
                assert request.cancelled_at is not None
                assert bar["cancelled"] == request.cancelled_at
                assert bar["box"]["right"] == pytest.approx(x_at(request.cancelled_at), abs=1.0)
                assert bar["dash"] not in ("none", "")
                assert _share_of_colour(pixels, bar["box"], HUNG_PINK) > 0.5
                assert bar["cap"] is not None
                assert bar["cap"]["right"] == pytest.approx(x_at(request.cancelled_at), abs=1.0)
                assert _share_of_colour(pixels, bar["cap"], CANCELLED_RED) > 0.9
                seen["hung"] += 1
    assert seen == {"noise": len(agents), "typed": len(agents), "hung": len(agents)}


def test_timeline_tells_held_and_paused_speech_from_what_was_heard(
    held_results: list[LabResult],
) -> None:
    # the hold message reached the output at 4.0 s while the caller spoke; ResilientAgent kept
    # it silent until they stopped, and the caller heard all of it afterwards
    (message,) = _timeline(held_results, HELD, RESILIENT).speeches[1].playouts
    assert message.protected is True
    (heard,) = message.runs
    assert message.start < heard.start
    assert message.held_s == pytest.approx(heard.start - message.start, abs=0.002)
    assert message.held_s > 1.0
    assert heard.end - heard.start == pytest.approx(message.played_s, abs=0.002)
    # the plain Agent played it over the caller at once: nothing held
    (plain,) = _timeline(held_results, HELD, BASELINE.path).speeches[1].playouts
    assert plain.held_s == 0.0 and plain.runs[0].start == plain.start
    # a preamble paused for the caller and resumed protected: two runs, the second protected
    (preamble, *_) = _timeline(held_results, RESUMED, RESILIENT).speeches[0].playouts
    first, second = preamble.runs
    assert (first.protected, second.protected) == (False, True)
    assert preamble.paused_s == pytest.approx(second.start - first.end, abs=0.002)
    assert preamble.paused_s > 1.0


@pytest.mark.skipif(
    _CHROMIUM is None,
    reason="Chromium is not installed (apt-get install -y chromium): the rendered report is "
    "checked in a headless browser",
)
def test_report_draws_held_speech_as_not_playing_in_headless_chromium(
    held_results: list[LabResult], agents: list[AgentUnderTest], tmp_path: Path
) -> None:
    page = render_report(held_results, agents)
    report = tmp_path / "report.html"
    report.write_text(page, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _GEOMETRY_PROBE), encoding="utf-8")
    dom = _run_chromium("--dump-dom", probe.as_uri(), height=1000).stdout
    found = re.search(r'<pre id="geometry">(.*?)</pre>', dom, re.S)
    assert found, "the geometry probe did not run"
    drawings = json.loads(html.unescape(found.group(1)))["timelines"]
    bottom = max(p["box"]["bottom"] for d in drawings for p in d["panels"])
    height = int(bottom) + 20
    screenshot = tmp_path / "report.png"
    _run_chromium(f"--screenshot={screenshot}", report.as_uri(), height=height)
    pixels = _read_png(screenshot)

    silences = {"held": 0, "paused": 0}
    for drawing in drawings:
        ticks = drawing["ticks"]
        px_per_s = (ticks[-1]["x"] - ticks[0]["x"]) / (ticks[-1]["t"] - ticks[0]["t"])
        (resilient,) = [p for p in drawing["panels"] if p["agent"] == RESILIENT]
        for playout in resilient["playouts"]:
            for silence in playout["silences"]:
                # not playing: white with grey hatching, neither of the colours of playing audio
                assert silence["fill"] == "rgb(255, 255, 255)"
                assert _share_of_colour(pixels, silence["box"], PROTECTED_PURPLE) < 0.02
                assert _share_of_colour(pixels, silence["box"], INTERRUPTIBLE_BLUE) < 0.02
                width = silence["box"]["right"] - silence["box"]["left"]
                assert width == pytest.approx((silence["end"] - silence["start"]) * px_per_s, abs=1)
                silences[silence["kind"]] += 1
            for run in playout["runs"]:
                colour = PROTECTED_PURPLE if run["mode"] == "protected" else INTERRUPTIBLE_BLUE
                assert _share_of_colour(pixels, run["box"], colour) > 0.5
            # what played and what was held never overlap
            spans = sorted([(r["start"], r["end"]) for r in playout["runs"] + playout["silences"]])
            for (_, end), (start, _) in itertools.pairwise(spans):
                assert start >= end - 0.002
    # the hold message held before its first audio, the preamble paused between its runs
    assert silences["held"] >= 1 and silences["paused"] >= 1
