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
from livekit.agents import Agent

from resilient_agent.cli import main
from resilient_agent.lab import agents as lab_agents
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.html_report import render_report, scenario_anchor
from resilient_agent.lab.run import AgentUnderTest, LabResult, default_agents, run_lab
from resilient_agent.lab.timeline import CallTimeline, extract_timeline, write_timelines
from resilient_agent.testing import Scenario, Sweep, Utterance, run_scenario

BASELINE = AgentUnderTest("livekit.agents:Agent", Agent, reference=True)
# The race drawn in every check: a protected hold message, a 9 s tool, an interruption that
# livekit only honours 5 s later ("speech not done in time after interruption").
RACE = "tool_gap/business_logic_long"
SWEPT = "lost_words/straddling_protected_end"
PROTECTED_PURPLE = (0x7B, 0x1F, 0xA2)
LOST_WORD_RED = (0xEF, 0x53, 0x50)


def _scenario(name: str) -> Any:
    return next(s for s in scenarios() if s.name == name)


@pytest.fixture(scope="module")
def agents() -> list[AgentUnderTest]:
    # the plain Agent, and ResilientAgent when it is importable: two panels on one axis
    return default_agents()


@pytest.fixture(scope="module")
def race_results(agents: list[AgentUnderTest]) -> list[LabResult]:
    return run_lab([_scenario(RACE), _scenario("control/two_turns")], agents)


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


def test_timeline_json_is_deterministic(tmp_path: Path) -> None:
    chosen = [_scenario(RACE)]
    first = run_lab(chosen, [BASELINE])
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
                 playouts: [], words: []};
      for (const s of panel.querySelectorAll('g.speech')) {
        p.speeches.push({label: s.dataset.label, box: box(s)});
      }
      for (const u of panel.querySelectorAll('rect.utterance')) {
        p.utterances.push({number: +u.dataset.number, start: +u.dataset.start,
                           end: +u.dataset.end, box: box(u)});
      }
      for (const g of panel.querySelectorAll('g.playout')) {
        const r = g.querySelector('rect');
        p.playouts.push({start: +g.dataset.start, mode: g.dataset.mode,
                         outcome: g.dataset.outcome, box: box(r), fill: getComputedStyle(r).fill});
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
            assert playout["box"]["left"] == pytest.approx(x_at(playout["start"]), abs=1.0)
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
