"""The lab report as one self-contained HTML file: every race drawn as a timeline.

``resilient-agent lab --report PATH.html`` writes it. Nothing is fetched: the styles are inline
and every drawing is inline SVG, so the file can be attached to an issue or opened offline. Each
scenario gets a section where the agents run on it (plain ``Agent`` above ``ResilientAgent``)
share one time axis, lane for lane: the caller's words and what became of them (typed chat
messages and background noise on their line too), user and agent state, every speech handle and
its playout, tool runs, LLM requests (hung ones until they were cancelled), race events and the
end of the call. Every mark carries an SVG ``<title>`` with exact times, shown on hover, and
``data-*`` attributes with the numbers it was drawn from, for tests and scripts. A ``--sweep``
run adds a chart per swept scenario: verdict and latency against the moved utterance's onset.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .run import AgentUnderTest, LabResult
from .timeline import (
    CallTimeline,
    LLMTrack,
    Mark,
    NoiseSpan,
    SpeechTrack,
    StateSpan,
    TypedTrack,
    UtteranceTrack,
)

__all__ = ["render_report", "scenario_anchor", "write_report"]

# Geometry of a timeline drawing, in CSS pixels.
_WIDTH = 1240
_LABEL_COLUMN = 150
_RIGHT_MARGIN = 24
_PLOT_WIDTH = _WIDTH - _LABEL_COLUMN - _RIGHT_MARGIN
_AXIS_HEIGHT = 22
_PANEL_GAP = 18
_LANE_GAP = 3
_TITLE_HEIGHT = 22
_UTTERANCE_BAR_HEIGHT = 16
_CAPTION_ROW_HEIGHT = 13
_MARK_ROW_HEIGHT = 16
_STATE_HEIGHT = 14
_SPEECH_ROW_HEIGHT = 20
_BAR_ROW_HEIGHT = 17
# Average advance of a character of the sans-serif UI font at 11 px, to fit labels.
_CHAR_WIDTH = 6.2
# Space kept between two labelled marks packed on one row.
_PACK_GAP_PX = 6.0
# Width of a typed message's chat-bubble marker, and the spacing of hatching lines.
_BUBBLE_WIDTH = 13.0
_HATCH_SPACING_PX = 5.0

# Geometry of a sweep chart: one strip per agent on a shared onset axis.
_SWEEP_WIDTH = 820
_SWEEP_LEFT = 170
_SWEEP_RIGHT = 16
_SWEEP_TOP = 44
_SWEEP_BOTTOM = 32
_SWEEP_SCALE_HEIGHT = 64
_SWEEP_STRIP_GAP = 8
# The band above each latency scale where runs that were never answered are drawn.
_NO_ANSWER_BAND = 16

_STYLE = """
body { font: 13px/1.4 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
  color: #1d2329; margin: 16px 20px 40px; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 2px; font-family: "DejaVu Sans Mono", Menlo, monospace; }
h3 { font-size: 13px; margin: 12px 0 4px; }
p.meta, p.desc { margin: 2px 0; color: #4a545e; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #d5dae0; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f4f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.name a { font-family: "DejaVu Sans Mono", Menlo, monospace; color: #1d2329; }
.pass { color: #1b7f3b; font-weight: 700; }
.fail { color: #c62828; font-weight: 700; }
.control { color: #6b7480; font-size: 11px; }
ul.reasons { margin: 0; padding-left: 16px; color: #7a1c1c; }
details { margin: 8px 0; }
summary { cursor: pointer; color: #2457a6; }
svg { display: block; }
svg text { font-family: -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
  font-size: 11px; fill: #1d2329; }
svg .lane-label { fill: #4a545e; text-anchor: end; }
svg .small { font-size: 9.5px; }
svg .axis-label { fill: #6b7480; text-anchor: middle; font-size: 10px; }
svg .grid { stroke: #eef0f3; stroke-width: 1; }
svg .grid-major { stroke: #dfe3e8; stroke-width: 1; }
svg .lane-line { stroke: #f0f2f5; stroke-width: 1; }
svg .panel-frame { fill: none; stroke: #c9ced6; stroke-width: 1; }
svg .panel-title { font-weight: 700; font-size: 12px; }
svg .verdict-pass { fill: #1b7f3b; font-weight: 700; font-size: 12px; }
svg .verdict-fail { fill: #c62828; font-weight: 700; font-size: 12px; }
svg .caller-band { fill: #4fc3f7; opacity: 0.07; }
svg .utterance { fill: none; stroke: #37474f; stroke-width: 1.2; }
svg .word-reached_llm { fill: #a5d6a7; }
svg .word-lost_before_stt { fill: #ef5350; }
svg .word-lost_after_stt { fill: #ffa726; }
svg .caption { font-size: 11px; }
svg .said-label { fill: #6b7480; }
svg .said-reached_llm { fill: #1b5e20; }
svg .said-lost_before_stt { fill: #c62828; font-weight: 700; text-decoration: line-through; }
svg .said-lost_after_stt { fill: #e65100; font-weight: 700; text-decoration: line-through; }
svg .said-lost_typed { fill: #c62828; font-weight: 700; text-decoration: line-through; }
svg .noise-band { fill: #eceff1; }
svg .noise-hatch { fill: none; stroke: #90a4ae; stroke-width: 1; }
svg .noise-text { fill: #546e7a; font-size: 9.5px; }
svg .typed { stroke: #283593; stroke-width: 1.2; stroke-linejoin: round; }
svg .typed-reached { fill: #a5d6a7; }
svg .typed-lost { fill: #ef5350; }
svg .typed-line { stroke: #3949ab; stroke-width: 1; stroke-dasharray: 1 3; opacity: 0.6; }
svg .stt-final { fill: #78909c; }
svg .user-turn { fill: #2e7d32; }
svg .merged-turn { fill: #ef6c00; stroke: #7a3a00; stroke-width: 1; }
svg .state { stroke: #fff; stroke-width: 0.5; }
svg .state-listening { fill: #e9edf1; }
svg .state-speaking.user-state { fill: #4fc3f7; }
svg .state-away { fill: #b0bec5; }
svg .state-initializing, svg .state-idle { fill: #f7f8fa; }
svg .state-thinking { fill: #ffe082; }
svg .state-speaking.agent-state { fill: #90a4ae; }
svg .speech-queued { stroke: #9aa4ae; stroke-width: 1.5; stroke-dasharray: 3 2; }
svg .speech-life { stroke-width: 1.2; }
svg .speech-life.protected { fill: #f3e5f5; stroke: #6a1b9a; }
svg .speech-life.interruptible { fill: #e3f0fd; stroke: #1565c0; }
svg .playout-protected { fill: #7b1fa2; }
svg .playout-interruptible { fill: #1e88e5; }
svg .playout-unowned { fill: #78909c; }
svg .playout-completed-cap { fill: #2e7d32; }
svg .playout-interrupted-cap { fill: #e53935; }
svg .playout-text { fill: #fff; font-size: 10px; }
svg .speech-text { fill: #4a545e; font-size: 10px; }
svg .interrupt-mark { fill: #e53935; }
svg .done-mark { stroke: #1d2329; stroke-width: 2; }
svg .never-done { fill: #c62828; font-size: 10px; font-weight: 700; }
svg .tool { fill: #8d6e63; }
svg .tool.status-error { fill: #c62828; }
svg .tool.status-cancelled { fill: #bdbdbd; }
svg .tool.status-running { fill: #a1887f; }
svg .bar-text { fill: #fff; font-size: 10px; }
svg .llm-wait { fill: #b2dfdb; }
svg .llm-stream { fill: #00897b; }
svg .llm-text { fill: #00594f; font-size: 10px; }
svg .llm-hung { fill: #fde0dc; stroke: #c62828; stroke-width: 1.2; stroke-dasharray: 4 2; }
svg .llm-cancelled-cap { fill: #c62828; }
svg .llm-hung-text { fill: #b71c1c; font-size: 10px; font-weight: 700; }
svg .mark-hang_up, svg .mark-room_deleted { fill: #c62828; }
svg .mark-session_closed { fill: #1d2329; }
svg .mark-script_end { fill: #6b7480; }
svg .mark-livekit_log { fill: #ef6c00; }
svg .mark-race_handled, svg .mark-race_event { fill: #d81b60; }
svg .mark-race_detected { fill: #fff; stroke: #d81b60; stroke-width: 2; }
svg .vline-hang_up, svg .vline-room_deleted { stroke: #c62828; stroke-width: 1.2;
  stroke-dasharray: 5 3; }
svg .vline-session_closed { stroke: #1d2329; stroke-width: 1; stroke-dasharray: 5 3; }
svg .vline-script_end { stroke: #9aa4ae; stroke-width: 1; stroke-dasharray: 2 3; }
svg .vline-race_detected, svg .vline-race_handled, svg .vline-race_event { stroke: #d81b60;
  stroke-width: 1; opacity: 0.45; }
svg .none { fill: #9aa4ae; font-style: italic; font-size: 10px; }
svg .sweep-frame { fill: #fbfcfd; stroke: #c9ced6; }
svg .sweep-nominal { stroke: #6b7480; stroke-dasharray: 4 3; }
svg .sweep-line { fill: none; stroke-width: 1.2; opacity: 0.6; }
svg .sweep-pass { fill: #2e7d32; stroke: #fff; stroke-width: 1; }
svg .sweep-fail { fill: #fff; stroke: #c62828; stroke-width: 2; }
svg .sweep-point { cursor: pointer; }
svg .sweep-band { fill: #fdecea; }
"""


def scenario_anchor(name: str, onset: float | None = None) -> str:
    """The HTML id of a scenario's section (or of one onset's timeline in a sweep)."""
    anchor = "scenario-" + re.sub(r"[^A-Za-z0-9_]+", "-", name).strip("-")
    if onset is not None:
        anchor += f"--onset-{onset:.2f}".replace(".", "_")
    return anchor


def write_report(
    results: Sequence[LabResult], agents: Sequence[AgentUnderTest], path: Path
) -> None:
    """Write :func:`render_report` to ``path``."""
    path.write_text(render_report(results, agents), encoding="utf-8")


def render_report(results: Sequence[LabResult], agents: Sequence[AgentUnderTest]) -> str:
    """The whole report: summary table, legend, then one section per scenario.

    Args:
        results: What :func:`~resilient_agent.lab.run.run_lab` returned; results without a
            timeline are listed in the table but not drawn.
        agents: The agents in the order they ran; panels are stacked in this order.
    """
    by_scenario: dict[str, list[LabResult]] = {}
    for result in results:
        by_scenario.setdefault(result.scenario.name, []).append(result)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>resilient-agent race lab report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Race lab report</h1>",
        _overview(results, agents),
        _summary_table(by_scenario, agents),
        "<h3>Legend</h3>",
        _legend(),
    ]
    for name, runs in by_scenario.items():
        parts.append(_scenario_section(name, runs, agents))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float) -> str:
    """A coordinate, short: one decimal is below a pixel."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _sec(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _latency(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _agent_order(runs: Iterable[LabResult], agents: Sequence[AgentUnderTest]) -> list[str]:
    seen = {r.agent.path for r in runs}
    order = [a.path for a in agents if a.path in seen]
    return order + sorted(seen - set(order))


# ---------------------------------------------------------------------------------------------
# Page furniture: overview, summary table, legend.


def _overview(results: Sequence[LabResult], agents: Sequence[AgentUnderTest]) -> str:
    lines = []
    for agent in agents:
        runs = [r for r in results if r.agent.path == agent.path]
        passed = sum(r.outcome.passed for r in runs)
        role = "reference" if agent.reference else "under test"
        lines.append(
            f"<b>{_esc(agent.label)}</b> (<code>{_esc(agent.path)}</code>, {role}): "
            f"{passed}/{len(runs)} calls pass"
        )
    virtual = sum(r.virtual_seconds for r in results)
    return (
        f'<p class="meta">{len(results)} calls, {virtual:.0f} s of call time on the virtual '
        f"clock. Times are seconds from the start of the call. Hover any mark for exact times."
        f'</p><p class="meta">{"<br>".join(lines)}</p>'
    )


def _summary_table(
    by_scenario: dict[str, list[LabResult]], agents: Sequence[AgentUnderTest]
) -> str:
    rows = [
        '<table class="summary"><thead><tr><th rowspan="2">scenario</th>',
        *(f'<th colspan="3">{_esc(a.label)}</th>' for a in agents),
        "</tr><tr>",
        *("<th>verdict</th><th>latency</th><th>lost words</th>" for _ in agents),
        "</tr></thead><tbody>",
    ]
    for name, runs in by_scenario.items():
        control = ' <span class="control">(control)</span>' if runs[0].scenario.control else ""
        cells = [
            f'<td class="name"><a href="#{scenario_anchor(name)}">{_esc(name)}</a>{control}</td>'
        ]
        for agent in agents:
            mine = [r for r in runs if r.agent.path == agent.path]
            if not mine:
                cells.append('<td colspan="3">-</td>')
                continue
            if len(mine) == 1:
                o = mine[0].outcome
                verdict = _verdict_badge(o.passed, "pass")
                cells.append(
                    f"<td>{verdict}</td><td class='num'>{_latency(o.reply_latency_s)}</td>"
                    f"<td class='num'>{o.lost_words}</td>"
                )
                continue
            passed = sum(r.outcome.passed for r in mine)
            latencies = [r.outcome.reply_latency_s for r in mine]
            known = [x for x in latencies if x is not None]
            span = f"{min(known):.2f}-{max(known):.2f} s" if known else "-"
            lost = [r.outcome.lost_words for r in mine]
            css = "pass" if passed == len(mine) else "fail"
            cells.append(
                f'<td><span class="{css}">{passed}/{len(mine)} pass</span> '
                f"{_sweep_strip(mine)}</td><td class='num'>{span}</td>"
                f"<td class='num'>{min(lost)}-{max(lost)}</td>"
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def _verdict_badge(passed: bool, word: str) -> str:
    return f'<span class="pass">{word}</span>' if passed else '<span class="fail">FAIL</span>'


def _sweep_strip(runs: Sequence[LabResult]) -> str:
    """One small square per onset, green pass or red fail, for the summary table."""
    size, gap = 6, 1
    squares = []
    for i, run in enumerate(runs):
        colour = "#2e7d32" if run.outcome.passed else "#e53935"
        onset = f"{run.onset:.2f} s" if run.onset is not None else "scripted"
        verdict = "pass" if run.outcome.passed else "FAIL"
        squares.append(
            f'<rect x="{i * (size + gap)}" y="0" width="{size}" height="{size + 4}" '
            f'fill="{colour}"><title>onset {onset}: {verdict}</title></rect>'
        )
    width = len(runs) * (size + gap)
    return (
        f'<svg class="sweep-strip" width="{width}" height="{size + 4}" '
        f'style="display:inline-block;vertical-align:middle">{"".join(squares)}</svg>'
    )


def _legend() -> str:
    items: list[tuple[str, str]] = [
        ('<rect class="word-reached_llm" x="0" y="2" width="22" height="10"/>', "word reached LLM"),
        (
            '<rect class="word-lost_before_stt" x="0" y="2" width="22" height="10"/>',
            "word lost: audio never reached STT",
        ),
        (
            '<rect class="word-lost_after_stt" x="0" y="2" width="22" height="10"/>',
            "word lost: transcribed, dropped before LLM",
        ),
        ('<path class="merged-turn" d="M11 1 L17 7 L11 13 L5 7 Z"/>', "turns merged"),
        ('<path class="user-turn" d="M11 2 L16 7 L11 12 L6 7 Z"/>', "user turn committed"),
        ('<rect class="stt-final" x="10" y="1" width="2" height="12"/>', "STT final transcript"),
        (
            '<rect class="state state-speaking user-state" x="0" y="2" width="22" height="10"/>',
            "user speaking (VAD)",
        ),
        (
            '<rect class="state state-thinking" x="0" y="2" width="22" height="10"/>',
            "agent thinking",
        ),
        (
            '<rect class="state state-speaking agent-state" x="0" y="2" width="22" height="10"/>',
            "agent speaking",
        ),
        (
            '<line class="speech-queued" x1="0" y1="7" x2="22" y2="7"/>',
            "speech created, not yet scheduled",
        ),
        (
            '<rect class="speech-life protected" x="1" y="1" width="20" height="12"/>',
            "protected speech handle alive",
        ),
        (
            '<rect class="speech-life interruptible" x="1" y="1" width="20" height="12"/>',
            "interruptible speech handle alive",
        ),
        (
            '<rect class="playout-protected" x="0" y="3" width="22" height="8"/>',
            "playing, protected",
        ),
        (
            '<rect class="playout-interruptible" x="0" y="3" width="22" height="8"/>',
            "playing, interruptible",
        ),
        (
            '<rect class="playout-interruptible" x="0" y="3" width="18" height="8"/>'
            '<rect class="playout-completed-cap" x="18" y="1" width="4" height="12"/>',
            "playout completed",
        ),
        (
            '<rect class="playout-interruptible" x="0" y="3" width="18" height="8"/>'
            '<rect class="playout-interrupted-cap" x="18" y="1" width="4" height="12"/>',
            "playout interrupted (cut)",
        ),
        ('<path class="interrupt-mark" d="M5 1 L17 1 L11 11 Z"/>', "handle interrupted"),
        ('<line class="done-mark" x1="11" y1="0" x2="11" y2="14"/>', "handle done"),
        ('<rect class="tool" x="0" y="2" width="22" height="10"/>', "tool running"),
        (
            '<rect class="llm-wait" x="0" y="2" width="9" height="10"/>'
            '<rect class="llm-stream" x="9" y="2" width="13" height="10"/>',
            "LLM request (to first token, answer)",
        ),
        (
            '<rect class="llm-hung" x="0.5" y="2" width="17" height="10"/>'
            '<rect class="llm-cancelled-cap" x="18" y="1" width="4" height="12"/>',
            "LLM request hung (until cancelled)",
        ),
        (
            '<rect class="noise-band" x="0" y="1" width="22" height="12"/>'
            f'<path class="noise-hatch" d="{_hatch(0, 1, 22, 13)}"/>',
            "background noise on the caller's line",
        ),
        (f'<path class="typed typed-reached" d="{_bubble(5, 1, 13)}"/>', "typed chat message"),
        ('<path class="mark-livekit_log" d="M11 1 L18 13 L4 13 Z"/>', "livekit warning/error"),
        ('<path class="mark-race_detected" d="M11 1 L17 7 L11 13 L5 7 Z"/>', "race detected"),
        (
            '<path class="mark-race_handled" d="M11 0 L18 7 L11 14 L4 7 Z"/>',
            "race handled (action taken)",
        ),
        (
            '<line class="vline-hang_up" x1="11" y1="0" x2="11" y2="14"/>'
            '<circle class="mark-hang_up" cx="11" cy="7" r="4"/>',
            "hang-up (job shutdown)",
        ),
        (
            '<line class="vline-session_closed" x1="11" y1="0" x2="11" y2="14"/>'
            '<rect class="mark-session_closed" x="7" y="3" width="8" height="8"/>',
            "session closed",
        ),
    ]
    columns = 4
    column_width = 300
    row_height = 20
    rows = math.ceil(len(items) / columns)
    body = []
    for i, (swatch, caption) in enumerate(items):
        x = (i % columns) * column_width
        y = (i // columns) * row_height + 3
        body.append(
            f'<g class="legend-item" transform="translate({x},{y})">{swatch}'
            f'<text x="30" y="11">{_esc(caption)}</text></g>'
        )
    height = rows * row_height + 4
    return (
        f'<svg class="legend" width="{columns * column_width}" height="{height}" '
        f'viewBox="0 0 {columns * column_width} {height}">{"".join(body)}</svg>'
    )


# ---------------------------------------------------------------------------------------------
# One scenario: header, verdicts, sweep chart, timelines.


def _scenario_section(
    name: str, runs: Sequence[LabResult], agents: Sequence[AgentUnderTest]
) -> str:
    scenario = runs[0].scenario
    order = _agent_order(runs, agents)
    parts = [f'<section class="scenario" id="{scenario_anchor(name)}">', f"<h2>{_esc(name)}</h2>"]
    kind = "control" if scenario.control else f"race family {scenario.family}"
    parts.append(f'<p class="desc">{_esc(scenario.description)} <i>({_esc(kind)})</i></p>')
    swept = [r for r in runs if r.onset is not None]
    shown = runs
    if swept and scenario.sweep is not None:
        written = swept[0].written_onset
        nominal = written if written is not None else swept[0].onset or 0.0
        onsets = sorted({r.onset for r in swept if r.onset is not None})
        # the timeline drawn in full is the run closest to the scenario as written
        closest = min(onsets, key=lambda o: (abs(o - nominal), o))
        shown = [r for r in runs if r.onset == closest]
        parts.append(
            f'<p class="meta">Sweep: utterance {scenario.sweep.utterance + 1} moved across '
            f"{scenario.sweep.start:.2f}-{scenario.sweep.stop:.2f} s "
            f"(step {scenario.sweep.step:.2f} s, {len(onsets)} onsets; as written it starts at "
            f"{nominal:.2f} s). Click a point to see that run.</p>"
        )
        parts.append(_sweep_chart(name, swept, order, nominal))
        parts.append(f"<h3>Onset {closest:.2f} s</h3>")
    parts.append(_verdict_table(shown, order))
    parts.append(_timelines_svg(shown, order, anchor=scenario_anchor(name, shown[0].onset)))
    drawn = {id(r) for r in shown}
    others = [r for r in swept if id(r) not in drawn]
    if others:
        parts.append(f"<details><summary>Timelines of the other {len(others)} runs</summary>")
        for onset in sorted({r.onset for r in others if r.onset is not None}):
            group = [r for r in others if r.onset == onset]
            parts.append(f"<h3>Onset {onset:.2f} s</h3>")
            parts.append(_verdict_table(group, order))
            parts.append(_timelines_svg(group, order, anchor=scenario_anchor(name, onset)))
        parts.append("</details>")
    parts.append("</section>")
    return "\n".join(parts)


def _verdict_table(runs: Sequence[LabResult], order: Sequence[str]) -> str:
    rows = [
        '<table class="verdicts"><tr><th>agent</th><th>verdict</th><th>latency</th>'
        "<th>lost words</th><th>broken contracts</th></tr>"
    ]
    for path in order:
        for run in (r for r in runs if r.agent.path == path):
            o = run.outcome
            verdict = _verdict_badge(o.passed, "PASS")
            reasons = "".join(f"<li>{_esc(reason)}</li>" for reason in o.reasons) or "<li>-</li>"
            rows.append(
                f"<tr><td>{_esc(run.agent.label)}</td><td>{verdict}</td>"
                f"<td class='num'>{_latency(o.reply_latency_s)}</td>"
                f"<td class='num'>{o.lost_words}</td>"
                f'<td><ul class="reasons">{reasons}</ul></td></tr>'
            )
    rows.append("</table>")
    return "".join(rows)


# ---------------------------------------------------------------------------------------------
# The timeline drawing.


@dataclass
class _Canvas:
    """SVG fragments and the time-to-pixel mapping they share."""

    axis_end: float
    parts: list[str] = field(default_factory=list)

    @property
    def scale(self) -> float:
        return _PLOT_WIDTH / self.axis_end

    def x(self, seconds: float) -> float:
        return _LABEL_COLUMN + min(max(seconds, 0.0), self.axis_end) * self.scale

    def width(self, start: float, end: float) -> float:
        return max(self.x(end) - self.x(start), 1.0)

    def add(self, fragment: str) -> None:
        self.parts.append(fragment)


def _title(text: str) -> str:
    return f"<title>{_esc(text)}</title>"


def _data(**values: object) -> str:
    out = []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append(f' data-{key.replace("_", "-")}="{_esc(value)}"')
    return "".join(out)


def _fit(text: str, width_px: float) -> str:
    """``text`` cut to fit ``width_px`` (empty if not even two characters fit)."""
    room = int(width_px / _CHAR_WIDTH)
    if room >= len(text):
        return text
    if room < 3:
        return ""
    return text[: room - 1] + "…"


def _hatch(x0: float, y0: float, x1: float, y1: float) -> str:
    """Path data of diagonal lines (``/``) filling the box, cut at its edges (no clip path)."""
    segments = []
    k = x0 + y0 + _HATCH_SPACING_PX
    while k < x1 + y1:
        # the line x + y = k inside the box
        left, right = max(x0, k - y1), min(x1, k - y0)
        if right > left:
            segments.append(f"M{_num(left)} {_num(k - left)}L{_num(right)} {_num(k - right)}")
        k += _HATCH_SPACING_PX
    return "".join(segments)


def _bubble(x: float, top: float, height: float) -> str:
    """Path data of a chat bubble whose tail points down to ``x``, its body right of it."""
    body_bottom = top + height - 4
    return (
        f"M{_num(x)} {_num(top)}H{_num(x + _BUBBLE_WIDTH)}V{_num(body_bottom)}"
        f"H{_num(x + 5)}L{_num(x)} {_num(top + height)}Z"
    )


def _pack(spans: Sequence[tuple[float, float]]) -> list[int]:
    """A row for each pixel span so that spans on one row never overlap (first fit)."""
    row_ends: list[float] = []
    rows = []
    for start, end in spans:
        for row, row_end in enumerate(row_ends):
            if start >= row_end + _PACK_GAP_PX:
                row_ends[row] = end
                rows.append(row)
                break
        else:
            row_ends.append(end)
            rows.append(len(row_ends) - 1)
    return rows


def _axis_end(timelines: Sequence[CallTimeline]) -> float:
    end = max(t.activity_end for t in timelines)
    end = max(end, *(u.end for t in timelines for u in t.utterances), 1.0)
    # half a second of air after the last event, then whole seconds for round tick labels
    return float(math.ceil(end + 0.5))


def _tick_step(axis_end: float) -> float:
    for step in (0.5, 1.0, 2.0, 5.0, 10.0):
        if axis_end / step <= 30:
            return step
    return 20.0


def _timelines_svg(runs: Sequence[LabResult], order: Sequence[str], *, anchor: str) -> str:
    """The panels of one run per agent, stacked on one shared time axis."""
    timelines = [r.timeline for path in order for r in runs if r.agent.path == path and r.timeline]
    if not timelines:
        return '<p class="meta">No timeline recorded for these runs.</p>'
    canvas = _Canvas(axis_end=_axis_end(timelines))
    y: float = _AXIS_HEIGHT
    panel_parts: list[str] = []
    for timeline in timelines:
        panel = _Canvas(axis_end=canvas.axis_end)
        height = _panel(panel, timeline, y)
        panel_parts.append(
            f'<g class="panel"{_data(agent=timeline.agent, top=_num(y), height=_num(height))}>'
            + "".join(panel.parts)
            + "</g>"
        )
        y += height + _PANEL_GAP
    total = y - _PANEL_GAP + _AXIS_HEIGHT
    _axis(canvas, top=_AXIS_HEIGHT, bottom=total - _AXIS_HEIGHT)
    body = "".join(canvas.parts) + "".join(panel_parts)
    return (
        f'<svg class="timeline" id="{anchor}" width="{_WIDTH}" height="{_num(total)}" '
        f'viewBox="0 0 {_WIDTH} {_num(total)}" xmlns="http://www.w3.org/2000/svg"'
        f"{_data(axis_end=canvas.axis_end, plot_left=_LABEL_COLUMN, plot_width=_PLOT_WIDTH)}>"
        f"{body}</svg>"
    )


def _axis(canvas: _Canvas, *, top: float, bottom: float) -> None:
    step = _tick_step(canvas.axis_end)
    count = round(canvas.axis_end / step)
    for i in range(count + 1):
        t = i * step
        x = _num(canvas.x(t))
        major = "grid-major" if t == int(t) else "grid"
        canvas.add(
            f'<line class="tick {major}" x1="{x}" y1="{_num(top - 4)}" x2="{x}" '
            f'y2="{_num(bottom + 4)}"{_data(t=f"{t:g}")}/>'
        )
        if t != int(t):
            continue  # half-second lines stay unlabelled: the labels would touch
        label = f"{t:g} s"
        canvas.add(f'<text class="axis-label" x="{x}" y="{_num(top - 8)}">{label}</text>')
        canvas.add(f'<text class="axis-label" x="{x}" y="{_num(bottom + 16)}">{label}</text>')


@dataclass(frozen=True)
class _Label:
    """Where a mark's caption goes: right of it, or left when it would leave the plot."""

    x: float
    anchor: str
    left: float
    right: float


def _place_label(start: float, end: float, text: str, gap: float = 8.0) -> _Label:
    """A caption for something drawn from ``start`` to ``end`` (pixels)."""
    width = len(text) * _CHAR_WIDTH
    if end + gap + width <= _WIDTH - _RIGHT_MARGIN:
        return _Label(end + gap, "start", start - gap, end + gap + width)
    return _Label(start - gap, "end", start - gap - width, end + gap)


def _lane_label(canvas: _Canvas, y: float, height: float, text: str) -> None:
    canvas.add(
        f'<text class="lane-label" x="{_LABEL_COLUMN - 8}" y="{_num(y + height / 2 + 4)}">'
        f"{_esc(text)}</text>"
    )
    canvas.add(
        f'<line class="lane-line" x1="{_LABEL_COLUMN}" y1="{_num(y + height + 1)}" '
        f'x2="{_WIDTH - _RIGHT_MARGIN}" y2="{_num(y + height + 1)}"/>'
    )


# Marks that matter to every lane get a line across the whole panel.
_VERTICAL_LINE_KINDS = frozenset(
    {
        "hang_up",
        "room_deleted",
        "session_closed",
        "script_end",
        "race_detected",
        "race_handled",
        "race_event",
    }
)


def _panel(canvas: _Canvas, timeline: CallTimeline, top: float) -> float:
    """Draw one agent's call from ``top``; returns its height."""
    y = top
    _panel_title(canvas, timeline, y)
    y += _TITLE_HEIGHT
    lanes_top = y
    y = _caller_lane(canvas, timeline, y)
    y = _turns_lane(canvas, timeline, y)
    y = _state_lane(canvas, timeline.user_states, y, "user state (VAD)", "user-state")
    y = _state_lane(canvas, timeline.agent_states, y, "agent state", "agent-state")
    y = _speech_lanes(canvas, timeline.speeches, y)
    y = _tool_lanes(canvas, timeline, y)
    y = _llm_lanes(canvas, timeline, y)
    y = _events_lane(canvas, timeline, y, race=True)
    y = _events_lane(canvas, timeline, y, race=False)
    bottom = y
    # the caller's speech and the call's end, across every lane: what happened meanwhile
    bands = []
    for u in timeline.utterances:
        bands.append(
            f'<rect class="caller-band" x="{_num(canvas.x(u.start))}" y="{_num(lanes_top)}" '
            f'width="{_num(canvas.width(u.start, u.end))}" height="{_num(bottom - lanes_top)}"/>'
        )
    for t in timeline.typed:
        x = _num(canvas.x(t.at))
        bands.append(
            f'<line class="typed-line" x1="{x}" y1="{_num(lanes_top)}" x2="{x}" '
            f'y2="{_num(bottom)}">{_title(f"typed message {t.number} arrived at {_sec(t.at)}")}'
            "</line>"
        )
    for mark in (*timeline.marks, *timeline.race_events):
        if mark.kind in _VERTICAL_LINE_KINDS:
            if mark.at > canvas.axis_end:
                continue
            x = _num(canvas.x(mark.at))
            bands.append(
                f'<line class="vline-{mark.kind}" x1="{x}" y1="{_num(lanes_top)}" x2="{x}" '
                f'y2="{_num(bottom)}">{_title(f"{mark.detail} at {_sec(mark.at)}")}</line>'
            )
    canvas.parts[:0] = bands
    canvas.add(
        f'<rect class="panel-frame" x="2" y="{_num(top)}" width="{_WIDTH - 4}" '
        f'height="{_num(bottom - top + 2)}"/>'
    )
    return bottom - top + 2


def _panel_title(canvas: _Canvas, timeline: CallTimeline, y: float) -> None:
    verdict = "PASS" if timeline.passed else "FAIL"
    css = "verdict-pass" if timeline.passed else "verdict-fail"
    figures = (
        f"latency {_latency(timeline.reply_latency_s)} · lost words {timeline.lost_words}"
        f" · hung up {'yes' if timeline.hung_up else 'no'} · VAD {timeline.vad}"
    )
    if timeline.onset is not None:
        figures += f" · onset {timeline.onset:.2f} s"
    off_axis = [
        m for m in timeline.marks if m.kind in ("script_end", "session_closed") and m.at > 0
    ]
    if off_axis and any(m.at > canvas.axis_end for m in off_axis):
        figures += " · " + ", ".join(
            f"{m.label} {m.at:.1f} s" for m in off_axis if m.at > canvas.axis_end
        )
    if timeline.close_deadlocked:
        figures += " · session could not be closed (deadlock)"
    canvas.add(
        f'<text class="panel-title" x="10" y="{_num(y + 15)}">{_esc(timeline.agent_label)}</text>'
        f'<text class="{css}" x="{_LABEL_COLUMN}" y="{_num(y + 15)}"'
        f"{_data(verdict=verdict)}>{verdict}</text>"
        f'<text x="{_LABEL_COLUMN + 44}" y="{_num(y + 15)}">{_esc(figures)}</text>'
    )


def _caller_lane(canvas: _Canvas, timeline: CallTimeline, y: float) -> float:
    """The caller's lane: what they said, typed, and the noise on their line.

    Utterance bars split into word cells, typed messages as chat bubbles, background noise
    hatched behind them, and under them the words, coloured by fate.
    """
    utterances, typed = timeline.utterances, timeline.typed
    captions = [f"u{u.number}: " + " ".join(w.text for w in u.words) for u in utterances]
    captions += [f"t{t.number}: {t.text}" for t in typed]
    starts = [u.start for u in utterances] + [t.at for t in typed]
    rows = _pack(
        [
            (canvas.x(start), canvas.x(start) + len(caption) * _CHAR_WIDTH)
            for start, caption in zip(starts, captions, strict=True)
        ]
    )
    height = _UTTERANCE_BAR_HEIGHT + (max(rows, default=0) + 1) * _CAPTION_ROW_HEIGHT + 2
    _lane_label(canvas, y, height, "caller speech · chat" if typed else "caller speech")
    for noise in timeline.noise:
        if noise.start < canvas.axis_end:
            canvas.add(_noise(canvas, noise, y))

    def caption_y(row: int) -> float:
        return y + _UTTERANCE_BAR_HEIGHT + (row + 1) * _CAPTION_ROW_HEIGHT - 1

    for u, row in zip(utterances, rows[: len(utterances)], strict=True):
        canvas.add(_utterance(canvas, u, y, caption_y(row)))
    for t, row in zip(typed, rows[len(utterances) :], strict=True):
        canvas.add(_typed(canvas, t, y, caption_y(row)))
    return y + height + _LANE_GAP


def _noise(canvas: _Canvas, noise: NoiseSpan, y: float) -> str:
    """A grey hatched band over the utterance row while the caller's line is noisy."""
    x0, x1 = canvas.x(noise.start), canvas.x(noise.end)
    x1 = max(x1, x0 + 1.0)
    top, bottom = y + 1, y + _UTTERANCE_BAR_HEIGHT
    title = (
        f"background noise on the caller's line: {_sec(noise.start)} to {_sec(noise.end)}, "
        f"RMS {noise.rms:.0f} (scripted speech is about 2100): loud audio with no words in it"
    )
    text = _fit("background noise", x1 - x0 - 6)
    return (
        f'<g class="noise"{_data(start=noise.start, end=noise.end, rms=noise.rms)}>'
        f'<rect class="noise-band" x="{_num(x0)}" y="{_num(top)}" width="{_num(x1 - x0)}" '
        f'height="{_num(bottom - top)}"/>'
        f'<path class="noise-hatch" d="{_hatch(x0, top, x1, bottom)}"/>'
        + (
            f'<text class="noise-text" x="{_num(x1 - 3)}" y="{_num(top + 11)}" '
            f'text-anchor="end">{_esc(text)}</text>'
            if text
            else ""
        )
        + f"{_title(title)}</g>"
    )


def _typed(canvas: _Canvas, t: TypedTrack, y: float, caption_y: float) -> str:
    """A chat bubble pointing at the message's arrival, coloured by the fate of its words."""
    x = canvas.x(t.at)
    fate = "lost" if t.lost else "reached"
    lines = [f"typed message {t.number} at {_sec(t.at)}: “{t.text}”"]
    if t.lost:
        lines.append(f"{t.lost_words} word(s) LOST, never reached the LLM: {' '.join(t.lost)}")
    if t.reached_llm_at is not None:
        lines.append(f"reached the LLM at {_sec(t.reached_llm_at)}")
    if t.reply_latency_s is not None:
        lines.append(f"answered after {t.reply_latency_s:.2f} s (from its arrival)")
    else:
        lines.append("never answered audibly" if t.expect_reply else "no reply expected")
    title = _title("\n".join(lines))
    lost = {w.lower() for w in t.lost}
    words = "".join(
        f'<tspan class="said-{"lost_typed" if w.lower() in lost else "reached_llm"}">'
        f"{_esc(w)} </tspan>"
        for w in t.text.split()
    )
    return (
        f'<g class="typed-message"'
        f"{_data(number=t.number, at=t.at, lost=t.lost_words, latency=t.reply_latency_s)}>"
        f'<path class="typed typed-{fate}" d="{_bubble(x, y + 1, _UTTERANCE_BAR_HEIGHT - 1)}"/>'
        f'<text class="caption" x="{_num(x)}" y="{_num(caption_y)}">'
        f'<tspan class="said-label">t{t.number}: </tspan>{words}</text>{title}</g>'
    )


def _utterance(canvas: _Canvas, u: UtteranceTrack, y: float, caption_y: float) -> str:
    lost = f", {u.lost_words} word(s) lost" if u.lost_words else ""
    merged = (
        f"; merged with {', '.join(f'utterance {n}' for n in u.merged_with)}"
        if u.merged_with
        else ""
    )
    reply = (
        f"; answered after {u.reply_latency_s:.2f} s"
        if u.reply_latency_s is not None
        else ("; never answered audibly" if u.expect_reply else "; no reply expected")
    )
    title = (
        f"utterance {u.number}: {_sec(u.start)} to {_sec(u.end)}{lost}{merged}{reply}\n“{u.text}”"
    )
    group = [f'<g class="utterance-group"{_data(number=u.number, start=u.start, end=u.end)}>']
    words = []
    for word in u.words:
        x, w = canvas.x(word.start), canvas.width(word.start, word.end)
        fate = {
            "reached_llm": f"reached the LLM at {_sec(word.reached_llm_at)}",
            "lost_before_stt": "LOST: its audio never reached the STT",
            "lost_after_stt": "LOST: transcribed, never reached the LLM",
        }[word.status]
        group.append(
            f'<rect class="word word-{word.status}" x="{_num(x)}" y="{_num(y + 2)}" '
            f'width="{_num(w)}" height="{_UTTERANCE_BAR_HEIGHT - 3}"'
            f"{_data(status=word.status, start=word.start, end=word.end)}>"
            f"{_title(f'“{word.text}” {_sec(word.start)}-{_sec(word.end)}: {fate}')}</rect>"
        )
        words.append(f'<tspan class="said-{word.status}">{_esc(word.text)} </tspan>')
    group.append(
        f'<rect class="utterance" x="{_num(canvas.x(u.start))}" y="{_num(y + 1)}" '
        f'width="{_num(canvas.width(u.start, u.end))}" height="{_UTTERANCE_BAR_HEIGHT - 1}"'
        f"{_data(number=u.number, start=u.start, end=u.end)}>{_title(title)}</rect>"
    )
    group.append(
        f'<text class="caption" x="{_num(canvas.x(u.start))}" y="{_num(caption_y)}">'
        f'<tspan class="said-label">u{u.number}: </tspan>{"".join(words)}{_title(title)}</text>'
    )
    group.append("</g>")
    return "".join(group)


def _turns_lane(canvas: _Canvas, timeline: CallTimeline, y: float) -> float:
    """STT finals on the first row (their text is the hover), committed turns packed below."""
    finals = [m for m in timeline.marks if m.kind == "stt_final"]
    turns = [m for m in timeline.marks if m.kind in ("user_turn", "merged_turn")]
    places = [_place_label(canvas.x(m.at), canvas.x(m.at), m.label) for m in turns]
    rows = _pack([(p.left, p.right) for p in places])
    count = max(rows, default=-1) + 2
    height = count * _MARK_ROW_HEIGHT
    _lane_label(canvas, y, height, "STT → user turns")
    for mark in finals:
        x = canvas.x(mark.at)
        canvas.add(
            f'<g class="mark"{_data(kind=mark.kind, at=mark.at)}>'
            f'<rect class="stt-final" x="{_num(x - 1)}" y="{_num(y + 2)}" width="2" '
            f'height="{_MARK_ROW_HEIGHT - 4}"/>{_title(f"{mark.detail} at {_sec(mark.at)}")}</g>'
        )
    for mark, row, place in zip(turns, rows, places, strict=True):
        cy = y + (row + 1) * _MARK_ROW_HEIGHT + _MARK_ROW_HEIGHT / 2
        x = canvas.x(mark.at)
        r = 6 if mark.kind == "merged_turn" else 5
        canvas.add(
            f'<g class="mark"{_data(kind=mark.kind, at=mark.at)}>'
            f'<path class="{mark.kind.replace("_", "-")}" d="M{_num(x)} {_num(cy - r)} '
            f'L{_num(x + r)} {_num(cy)} L{_num(x)} {_num(cy + r)} L{_num(x - r)} {_num(cy)} Z"/>'
            f'<text class="small" x="{_num(place.x)}" y="{_num(cy + 3.5)}" '
            f'text-anchor="{place.anchor}">{_esc(mark.label)}</text>'
            f"{_title(f'{mark.detail} at {_sec(mark.at)}')}</g>"
        )
    return y + height + _LANE_GAP


def _state_lane(
    canvas: _Canvas, spans: Sequence[StateSpan], y: float, label: str, owner: str
) -> float:
    _lane_label(canvas, y, _STATE_HEIGHT, label)
    for span in spans:
        end = span.end if span.end is not None else canvas.axis_end
        if span.start >= canvas.axis_end:
            continue
        x, w = canvas.x(span.start), canvas.width(span.start, end)
        until = _sec(span.end) if span.end is not None else "the end of the recording"
        title = f"{label} {span.state}: {_sec(span.start)} to {until}"
        text = _fit(span.state, w - 4)
        canvas.add(
            f'<g class="state-span"><rect class="state {owner} state-{_esc(span.state)}" '
            f'x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_STATE_HEIGHT}"'
            f"{_data(state=span.state, start=span.start, end=span.end)}>{_title(title)}</rect>"
            + (
                f'<text class="small" x="{_num(x + 3)}" y="{_num(y + 10.5)}">{_esc(text)}</text>'
                if text
                else ""
            )
            + "</g>"
        )
    return y + _STATE_HEIGHT + _LANE_GAP


def _speech_title(speech: SpeechTrack) -> str:
    protection = "protected" if speech.protected_at_creation else "interruptible"
    if speech.protected_when_done is not None and (
        speech.protected_when_done != speech.protected_at_creation
    ):
        later = "protected" if speech.protected_when_done else "interruptible"
        protection += f" at creation, {later} when done"
    lines = [f"{speech.label} {speech.source} ({protection})"]
    if speech.text:
        lines.append(f"“{speech.text}”")
    lines.append(f"created {_sec(speech.created_at)}, scheduled {_sec(speech.scheduled_at)}")
    if speech.interrupted_at is not None:
        lines.append(f"interrupted {_sec(speech.interrupted_at)}")
    if speech.done_at is None:
        lines.append("never done")
    else:
        after = ""
        if speech.interrupted_at is not None:
            after = f" ({speech.done_at - speech.interrupted_at:.3f} s after the interruption)"
        lines.append(f"done {_sec(speech.done_at)}{after}")
    return "\n".join(lines)


def _speech_lanes(canvas: _Canvas, speeches: Sequence[SpeechTrack], y: float) -> float:
    if not speeches:
        _lane_label(canvas, y, _SPEECH_ROW_HEIGHT, "speech handles")
        canvas.add(
            f'<text class="none" x="{_LABEL_COLUMN + 6}" y="{_num(y + 13)}">no speech</text>'
        )
        return y + _SPEECH_ROW_HEIGHT + _LANE_GAP
    for speech in speeches:
        mode = "protected" if speech.protected_at_creation else "interruptible"
        _lane_label(canvas, y, _SPEECH_ROW_HEIGHT, f"{speech.label} {speech.source}")
        parts = [
            f'<g class="speech"{_data(label=speech.label, source=speech.source, mode=mode)}'
            f"{_data(created=speech.created_at, done=speech.done_at)}>"
            f"{_title(_speech_title(speech))}"
        ]
        mid = y + _SPEECH_ROW_HEIGHT / 2
        life_start = speech.scheduled_at if speech.scheduled_at is not None else speech.created_at
        if life_start > speech.created_at:
            parts.append(
                f'<line class="speech-queued" x1="{_num(canvas.x(speech.created_at))}" '
                f'y1="{_num(mid)}" x2="{_num(canvas.x(life_start))}" y2="{_num(mid)}"/>'
            )
        end = speech.done_at if speech.done_at is not None else canvas.axis_end
        parts.append(
            f'<rect class="speech-life {mode}" x="{_num(canvas.x(life_start))}" '
            f'y="{_num(y + 2)}" width="{_num(canvas.width(life_start, end))}" '
            f'height="{_SPEECH_ROW_HEIGHT - 4}" rx="2"/>'
        )
        for index in range(len(speech.playouts)):
            parts.append(_playout(canvas, speech, playout_index=index, y=y))
        if speech.interrupted_at is not None:
            x = canvas.x(speech.interrupted_at)
            parts.append(
                f'<path class="interrupt-mark" d="M{_num(x - 5)} {_num(y)} L{_num(x + 5)} '
                f'{_num(y)} L{_num(x)} {_num(y + 9)} Z"{_data(at=speech.interrupted_at)}>'
                f"{_title(f'{speech.label} interrupted at {_sec(speech.interrupted_at)}')}</path>"
            )
        if speech.done_at is not None:
            done_x = _num(canvas.x(speech.done_at))
            parts.append(
                f'<line class="done-mark" x1="{done_x}" y1="{_num(y + 1)}" x2="{done_x}" '
                f'y2="{_num(y + _SPEECH_ROW_HEIGHT - 1)}"/>'
            )
            text_x = canvas.x(speech.done_at) + 5
        else:
            parts.append(
                f'<text class="never-done" x="{_num(canvas.x(canvas.axis_end) - 4)}" '
                f'y="{_num(mid + 3.5)}" text-anchor="end">never done →</text>'
            )
            text_x = canvas.x(canvas.axis_end)
        room = canvas.x(canvas.axis_end) - text_x
        caption = _fit(f"“{speech.text}”", room) if speech.text else ""
        if caption:
            parts.append(
                f'<text class="speech-text" x="{_num(text_x)}" y="{_num(mid + 3.5)}">'
                f"{_esc(caption)}</text>"
            )
        parts.append("</g>")
        canvas.add("".join(parts))
        y += _SPEECH_ROW_HEIGHT
    return y + _LANE_GAP


def _playout(canvas: _Canvas, speech: SpeechTrack, *, playout_index: int, y: float) -> str:
    playout = speech.playouts[playout_index]
    end = playout.end if playout.end is not None else canvas.axis_end
    if playout.protected is None:
        mode = "unowned"
    else:
        mode = "protected" if playout.protected else "interruptible"
    outcome = "interrupted" if playout.interrupted else "completed"
    x, w = canvas.x(playout.start), canvas.width(playout.start, end)
    until = _sec(playout.end) if playout.end is not None else "never finished"
    title = (
        f"{speech.label} playout ({mode}, {outcome}): {_sec(playout.start)} to {until}, "
        f"{playout.played_s:.2f} s heard\n“{playout.text}”"
    )
    cap_x = x + w - 4
    text = _fit(playout.text, w - 10)
    return (
        f'<g class="playout playout-{outcome}"'
        f"{_data(start=playout.start, end=playout.end, mode=mode, outcome=outcome)}>"
        f'<rect class="playout-{mode}" x="{_num(x)}" y="{_num(y + 5)}" width="{_num(w)}" '
        f'height="{_SPEECH_ROW_HEIGHT - 10}"/>'
        f'<rect class="playout-{outcome}-cap" x="{_num(cap_x)}" y="{_num(y + 2)}" width="4" '
        f'height="{_SPEECH_ROW_HEIGHT - 4}"/>'
        + (
            f'<text class="playout-text" x="{_num(x + 3)}" y="{_num(y + 13.5)}">{_esc(text)}</text>'
            if text
            else ""
        )
        + f"{_title(title)}</g>"
    )


def _tool_lanes(canvas: _Canvas, timeline: CallTimeline, y: float) -> float:
    tools = timeline.tools
    if not tools:
        _lane_label(canvas, y, _BAR_ROW_HEIGHT, "tools")
        canvas.add(f'<text class="none" x="{_LABEL_COLUMN + 6}" y="{_num(y + 12)}">no tool</text>')
        return y + _BAR_ROW_HEIGHT + _LANE_GAP
    spans = []
    for tool in tools:
        end = tool.end if tool.end is not None else canvas.axis_end
        spans.append((canvas.x(tool.start), canvas.x(end)))
    rows = _pack(spans)
    count = max(rows) + 1
    _lane_label(canvas, y, count * _BAR_ROW_HEIGHT, "tools")
    for tool, row, (x0, x1) in zip(tools, rows, spans, strict=True):
        top = y + row * _BAR_ROW_HEIGHT
        status = tool.status or "running"
        until = _sec(tool.end) if tool.end is not None else "never ended"
        title = f"tool {tool.name}({tool.arguments}) {_sec(tool.start)} to {until}: {status}"
        w = max(x1 - x0, 1.0)
        text = _fit(f"{tool.name} ({status})", w - 6)
        canvas.add(
            f'<g class="tool-run"{_data(name=tool.name, start=tool.start, end=tool.end)}>'
            f'<rect class="tool status-{status}" x="{_num(x0)}" y="{_num(top + 2)}" '
            f'width="{_num(w)}" height="{_BAR_ROW_HEIGHT - 4}" rx="2"/>'
            + (
                f'<text class="bar-text" x="{_num(x0 + 4)}" y="{_num(top + 12)}">'
                f"{_esc(text)}</text>"
                if text
                else ""
            )
            + f"{_title(title)}</g>"
        )
    return y + count * _BAR_ROW_HEIGHT + _LANE_GAP


def _llm_lanes(canvas: _Canvas, timeline: CallTimeline, y: float) -> float:
    requests = timeline.llm_requests
    if not requests:
        _lane_label(canvas, y, _BAR_ROW_HEIGHT, "LLM requests")
        canvas.add(
            f'<text class="none" x="{_LABEL_COLUMN + 6}" y="{_num(y + 12)}">no request</text>'
        )
        return y + _BAR_ROW_HEIGHT + _LANE_GAP
    captions = []
    places: list[_Label] = []
    spans = []
    for request in requests:
        if request.hung:
            caption = _hung_caption(request)
            end = _hung_end(canvas, request)
        else:
            said = f"“{request.reply}”" if request.reply else ""
            calls = " ".join(f"{name}()" for name in request.tool_calls)
            caption = _fit(" ".join(p for p in (said, calls) if p) or "(empty)", 260)
            end = request.at + request.duration_s
        captions.append(caption)
        place = _place_label(canvas.x(request.at), canvas.x(end), caption, gap=4)
        if request.hung and _fit(caption, canvas.width(request.at, end) - 8) == caption:
            # the caption fits inside the bar: written there, the bar is all the room it takes
            place = _Label(canvas.x(request.at) + 4, "start", canvas.x(request.at), canvas.x(end))
        places.append(place)
        spans.append((place.left, place.right))
    rows = _pack(spans)
    count = max(rows) + 1
    _lane_label(canvas, y, count * _BAR_ROW_HEIGHT, "LLM requests")
    for request, row, caption, place in zip(requests, rows, captions, places, strict=True):
        top = y + row * _BAR_ROW_HEIGHT
        if request.hung:
            canvas.add(_hung_request(canvas, request, top, caption, place))
            continue
        x0 = canvas.x(request.at)
        first = canvas.x(request.at + request.ttft_s)
        x1 = canvas.x(request.at + request.duration_s)
        title = (
            f"LLM request at {_sec(request.at)} answering {request.answers}\n"
            f"scripted: first token after {request.ttft_s:.2f} s, answer out after "
            f"{request.duration_s:.2f} s\nreply: “{request.reply}”"
            + (f"\ntool calls: {', '.join(request.tool_calls)}" if request.tool_calls else "")
        )
        canvas.add(
            f'<g class="llm"{_data(at=request.at, duration=request.duration_s)}>'
            f'<rect class="llm-wait" x="{_num(x0)}" y="{_num(top + 2)}" '
            f'width="{_num(max(first - x0, 1.0))}" height="{_BAR_ROW_HEIGHT - 4}"/>'
            f'<rect class="llm-stream" x="{_num(first)}" y="{_num(top + 2)}" '
            f'width="{_num(max(x1 - first, 1.0))}" height="{_BAR_ROW_HEIGHT - 4}"/>'
            f'<text class="llm-text" x="{_num(place.x)}" y="{_num(top + 12)}" '
            f'text-anchor="{place.anchor}">'
            f"{_esc(caption)}</text>{_title(title)}</g>"
        )
    return y + count * _BAR_ROW_HEIGHT + _LANE_GAP


def _hung_end(canvas: _Canvas, request: LLMTrack) -> float:
    return request.cancelled_at if request.cancelled_at is not None else canvas.axis_end


def _hung_caption(request: LLMTrack) -> str:
    if request.cancelled_at is None:
        return "hung: no token, never cancelled"
    return f"hung: no token, cancelled at {request.cancelled_at:.2f} s"


def _hung_request(
    canvas: _Canvas, request: LLMTrack, top: float, caption: str, place: _Label
) -> str:
    """A hung request: a dashed red bar to its cancellation (red cap) or the end of the axis."""
    end = _hung_end(canvas, request)
    x0, x1 = canvas.x(request.at), canvas.x(end)
    x1 = max(x1, x0 + 1.0)
    if request.cancelled_at is not None:
        until = (
            f"cancelled at {_sec(request.cancelled_at)}, when the speech handle it was "
            "generating for was interrupted"
        )
        cap = (
            f'<rect class="llm-cancelled-cap" x="{_num(x1 - 4)}" y="{_num(top + 1)}" '
            f'width="4" height="{_BAR_ROW_HEIGHT - 2}"/>'
        )
    else:
        until = "never cancelled before the recording ended"
        cap = ""
    title = (
        f"LLM request at {_sec(request.at)} answering {request.answers}\n"
        f"HUNG: no token ever came; {until}\n"
        f"scripted reply it never sent: “{request.reply}”"
        + (f"\ntool calls: {', '.join(request.tool_calls)}" if request.tool_calls else "")
    )
    return (
        f'<g class="llm llm-hung-request"'
        f"{_data(at=request.at, hung=True, cancelled_at=request.cancelled_at)}>"
        f'<rect class="llm-hung" x="{_num(x0)}" y="{_num(top + 2)}" width="{_num(x1 - x0)}" '
        f'height="{_BAR_ROW_HEIGHT - 4}"/>{cap}'
        f'<text class="llm-hung-text" x="{_num(place.x)}" y="{_num(top + 12)}" '
        f'text-anchor="{place.anchor}">{_esc(caption)}</text>{_title(title)}</g>'
    )


_EVENT_KINDS = ("livekit_log", "hang_up", "room_deleted", "session_closed", "script_end")


def _events_lane(canvas: _Canvas, timeline: CallTimeline, y: float, *, race: bool) -> float:
    if race:
        marks: Sequence[Mark] = timeline.race_events
        label = "race events"
        empty = "none reported"
    else:
        marks = [m for m in timeline.marks if m.kind in _EVENT_KINDS]
        label = "warnings · call end"
        empty = "none"
    marks = [m for m in marks if m.at <= canvas.axis_end]
    if not marks:
        _lane_label(canvas, y, _MARK_ROW_HEIGHT, label)
        canvas.add(f'<text class="none" x="{_LABEL_COLUMN + 6}" y="{_num(y + 11)}">{empty}</text>')
        return y + _MARK_ROW_HEIGHT + _LANE_GAP
    places = [_place_label(canvas.x(m.at), canvas.x(m.at), m.label, gap=9) for m in marks]
    rows = _pack([(p.left, p.right) for p in places])
    count = max(rows) + 1
    height = count * _MARK_ROW_HEIGHT
    _lane_label(canvas, y, height, label)
    for mark, row, place in zip(marks, rows, places, strict=True):
        cy = y + row * _MARK_ROW_HEIGHT + _MARK_ROW_HEIGHT / 2
        x = canvas.x(mark.at)
        canvas.add(
            f'<g class="mark"{_data(kind=mark.kind, at=mark.at)}>{_event_shape(mark.kind, x, cy)}'
            f'<text class="small" x="{_num(place.x)}" y="{_num(cy + 3.5)}" '
            f'text-anchor="{place.anchor}">{_esc(mark.label)}</text>'
            f"{_title(f'{mark.detail} at {_sec(mark.at)}')}</g>"
        )
    return y + height + _LANE_GAP


def _event_shape(kind: str, x: float, cy: float) -> str:
    css = f"mark-{kind}"
    if kind == "livekit_log":
        return (
            f'<path class="{css}" d="M{_num(x)} {_num(cy - 6)} L{_num(x + 6)} {_num(cy + 5)} '
            f'L{_num(x - 6)} {_num(cy + 5)} Z"/>'
        )
    if kind in ("race_detected", "race_handled", "race_event"):
        return (
            f'<path class="{css}" d="M{_num(x)} {_num(cy - 7)} L{_num(x + 7)} {_num(cy)} '
            f'L{_num(x)} {_num(cy + 7)} L{_num(x - 7)} {_num(cy)} Z"/>'
        )
    if kind in ("hang_up", "room_deleted"):
        return f'<circle class="{css}" cx="{_num(x)}" cy="{_num(cy)}" r="5"/>'
    return f'<rect class="{css}" x="{_num(x - 4)}" y="{_num(cy - 4)}" width="8" height="8"/>'


# ---------------------------------------------------------------------------------------------
# The sweep chart.


def _nice_step(span: float, most: int) -> float:
    """The smallest round step that cuts ``span`` into at most ``most`` parts."""
    for step in (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 50.0):
        if span / step <= most:
            return step
    return 100.0


def _sweep_chart(name: str, runs: Sequence[LabResult], order: Sequence[str], nominal: float) -> str:
    """Verdict and latency against the moved utterance's onset: one strip per agent, one axis.

    Each strip has a band on top for runs that were never answered and a latency scale below;
    a point is solid green when the call passed and a hollow red ring when it failed, and links
    to that run's timeline.
    """
    onsets = sorted({r.onset for r in runs if r.onset is not None})
    lo, hi = onsets[0], onsets[-1]
    pad = max((hi - lo) * 0.03, 0.05)
    lo, hi = lo - pad, hi + pad
    latencies = [r.outcome.reply_latency_s for r in runs if r.outcome.reply_latency_s is not None]
    latency_step = _nice_step(max([*latencies, 0.5]), 3)
    top_latency = math.ceil(max([*latencies, 0.5]) / latency_step + 1e-9) * latency_step
    left, right = _SWEEP_LEFT, _SWEEP_WIDTH - _SWEEP_RIGHT
    strips = [p for p in order if any(r.agent.path == p for r in runs)]
    strip_height = _NO_ANSWER_BAND + _SWEEP_SCALE_HEIGHT
    height = _SWEEP_TOP + len(strips) * (strip_height + _SWEEP_STRIP_GAP) + _SWEEP_BOTTOM

    def x_of(onset: float) -> float:
        return left + (onset - lo) / (hi - lo) * (right - left)

    parts = []
    bottom = _SWEEP_TOP + len(strips) * (strip_height + _SWEEP_STRIP_GAP) - _SWEEP_STRIP_GAP
    step = _nice_step(hi - lo, 12)
    tick = math.ceil(lo / step - 1e-9) * step
    while tick <= hi + 1e-9:
        x = _num(x_of(tick))
        parts.append(
            f'<line class="grid" x1="{x}" y1="{_SWEEP_TOP}" x2="{x}" y2="{_num(bottom)}"/>'
            f'<text class="axis-label" x="{x}" y="{_num(bottom + 13)}">{tick:g}</text>'
        )
        tick += step
    parts.append(
        f'<text class="small" x="{_num((left + right) / 2)}" y="{height - 4}" '
        'text-anchor="middle">onset of the moved utterance (s from the start of the call)</text>'
    )
    for index, path in enumerate(strips):
        top = _SWEEP_TOP + index * (strip_height + _SWEEP_STRIP_GAP)
        mine = sorted((r for r in runs if r.agent.path == path), key=lambda r: r.onset or 0.0)
        parts.append(_sweep_strip_plot(name, mine, top, top_latency, latency_step, x_of))
    if lo <= nominal <= hi:
        x = _num(x_of(nominal))
        parts.append(
            f'<line class="sweep-nominal" x1="{x}" y1="{_SWEEP_TOP - 4}" x2="{x}" '
            f'y2="{_num(bottom)}">{_title(f"as written: onset {nominal:.2f} s")}</line>'
            f'<text class="small" x="{x}" y="{_SWEEP_TOP - 7}" text-anchor="middle">'
            "as written</text>"
        )
    parts.append(
        f'<g transform="translate({left},{_SWEEP_TOP - 32})">'
        '<circle class="sweep-pass" cx="4" cy="0" r="4"/>'
        '<text class="small" x="12" y="3.5">pass</text>'
        '<circle class="sweep-fail" cx="50" cy="0" r="4"/>'
        '<text class="small" x="58" y="3.5">fail</text>'
        '<line class="sweep-line" x1="92" y1="0" x2="112" y2="0" stroke="#607d8b"/>'
        '<text class="small" x="116" y="3.5">reply latency</text></g>'
    )
    return (
        f'<svg class="sweep" width="{_SWEEP_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_SWEEP_WIDTH} {height}" xmlns="http://www.w3.org/2000/svg">'
        f"{''.join(parts)}</svg>"
    )


def _sweep_strip_plot(
    name: str,
    runs: Sequence[LabResult],
    top: float,
    top_latency: float,
    latency_step: float,
    x_of: Callable[[float], float],
) -> str:
    left, right = _SWEEP_LEFT, _SWEEP_WIDTH - _SWEEP_RIGHT
    scale_top = top + _NO_ANSWER_BAND + 4
    scale_bottom = top + _NO_ANSWER_BAND + _SWEEP_SCALE_HEIGHT

    def y_of(latency: float) -> float:
        return scale_bottom - latency / top_latency * (scale_bottom - scale_top)

    label = runs[0].agent.label
    passed = sum(r.outcome.passed for r in runs)
    parts = [
        f'<g class="sweep-agent"{_data(agent=runs[0].agent.path)}>',
        f'<rect class="sweep-frame" x="{left}" y="{_num(top)}" width="{right - left}" '
        f'height="{_num(scale_bottom - top)}"/>',
        f'<rect class="sweep-band" x="{left}" y="{_num(top)}" width="{right - left}" '
        f'height="{_NO_ANSWER_BAND}"/>',
        f'<text class="panel-title" x="8" y="{_num(top + 14)}">{_esc(label)}</text>',
        f'<text class="small" x="8" y="{_num(top + 28)}">{passed}/{len(runs)} pass</text>',
        f'<text class="small" x="{left - 6}" y="{_num(top + 12)}" text-anchor="end">'
        "no answer</text>",
    ]
    grid = 0.0
    while grid <= top_latency + 1e-9:
        y = y_of(grid)
        parts.append(
            f'<line class="grid" x1="{left}" y1="{_num(y)}" x2="{right}" y2="{_num(y)}"/>'
            f'<text class="axis-label" x="{left - 6}" y="{_num(y + 3)}" text-anchor="end">'
            f"{grid:g} s</text>"
        )
        grid += latency_step
    points = []
    for run in runs:
        assert run.onset is not None
        latency = run.outcome.reply_latency_s
        y = y_of(latency) if latency is not None else top + _NO_ANSWER_BAND / 2
        points.append((x_of(run.onset), y, run, latency))
    line = " ".join(f"{_num(x)},{_num(y)}" for x, y, _, latency in points if latency is not None)
    if line:
        parts.append(f'<polyline class="sweep-line" points="{line}" stroke="#607d8b"/>')
    for x, y, run, latency in points:
        assert run.onset is not None
        verdict = "pass" if run.outcome.passed else "fail"
        title = (
            f"{label}, onset {run.onset:.2f} s: {verdict.upper()}, latency {_latency(latency)}, "
            f"lost words {run.outcome.lost_words}"
            + "".join(f"\n- {reason}" for reason in run.outcome.reasons)
        )
        parts.append(
            f'<a href="#{scenario_anchor(name, run.onset)}"><g class="sweep-point"'
            f"{_data(agent=run.agent.path, onset=run.onset, passed=run.outcome.passed)}"
            f"{_data(latency=latency)}>"
            f'<circle class="sweep-{verdict}" cx="{_num(x)}" cy="{_num(y)}" r="4.5"/>'
            f"{_title(title)}</g></a>"
        )
    parts.append("</g>")
    return "".join(parts)
