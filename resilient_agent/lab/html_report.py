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

This module lays out the page (overview, summary table, legend, one section per scenario);
:mod:`.report_svg` holds the drawing primitives, :mod:`.report_lanes` and :mod:`.report_speech`
the timeline lanes, :mod:`.report_sweep` the sweep chart, :mod:`.report_traces` a traced
call's spans (``--traces``), and ``report.css`` the styles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from . import report_svg as svg
from .catalog.own_tools import FAMILY as OWN_TOOLS_FAMILY
from .report_lanes import timelines_svg
from .report_svg import esc, scenario_anchor
from .report_sweep import sweep_chart
from .report_traces import trace_details
from .run import AgentUnderTest, LabResult

__all__ = ["render_report", "scenario_anchor", "write_report"]


def _style() -> str:
    """The report's CSS, shipped as package data next to this module."""
    return resources.files(__package__).joinpath("report.css").read_text(encoding="utf-8")


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
    # an app's own tools (--agent) come first: the first screen shows what the app itself wrote
    own = {n: r for n, r in by_scenario.items() if r[0].scenario.family == OWN_TOOLS_FAMILY}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>resilient-agent race lab report</title>",
        f"<style>{_style()}</style></head><body>",
        "<h1>Race lab report</h1>",
        _overview(results, agents),
    ]
    if own:
        parts.append(
            '<h2>Your own tools</h2><p class="meta">The caller spoke in each window of each '
            "of your tools; the whole catalog follows, after the summary table.</p>"
        )
        parts += [_scenario_section(name, runs, agents) for name, runs in own.items()]
    parts += [_summary_table(by_scenario, agents), "<h3>Legend</h3>", _legend()]
    for name, runs in by_scenario.items():
        if name not in own:
            parts.append(_scenario_section(name, runs, agents))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------
# Page furniture: overview, summary table, legend.


def _overview(results: Sequence[LabResult], agents: Sequence[AgentUnderTest]) -> str:
    lines = []
    for agent in agents:
        runs = [r for r in results if r.agent.path == agent.path]
        passed = sum(r.outcome.passed for r in runs)
        role = "reference" if agent.reference else "under test"
        lines.append(
            f"<b>{esc(agent.label)}</b> (<code>{esc(agent.path)}</code>, {role}): "
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
        *(f'<th colspan="3">{esc(a.label)}</th>' for a in agents),
        "</tr><tr>",
        *("<th>verdict</th><th>latency</th><th>lost words</th>" for _ in agents),
        "</tr></thead><tbody>",
    ]
    for name, runs in by_scenario.items():
        control = ' <span class="control">(control)</span>' if runs[0].scenario.control else ""
        cells = [
            f'<td class="name"><a href="#{svg.scenario_anchor(name)}">{esc(name)}</a>{control}</td>'
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
                    f"<td>{verdict}</td><td class='num'>{svg.latency(o.reply_latency_s)}</td>"
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


_LEGEND_ITEMS: tuple[tuple[str, str], ...] = (
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
        '<rect class="playout-held playout-held-protected" x="0.5" y="3" width="21" height="8"/>'
        f'<path class="playout-held-hatch" d="{svg.hatch(0.5, 3, 21.5, 11)}"/>',
        "held or paused: NOT playing (output paused)",
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
        f'<path class="noise-hatch" d="{svg.hatch(0, 1, 22, 13)}"/>',
        "background noise on the caller's line",
    ),
    (f'<path class="typed typed-reached" d="{svg.bubble(5, 1, 13)}"/>', "typed chat message"),
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
)
"""Each legend entry: an SVG swatch and its caption."""


def _legend() -> str:
    items = _LEGEND_ITEMS
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
            f'<text x="30" y="11">{esc(caption)}</text></g>'
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
    order = svg.agent_order(runs, agents)
    parts = [
        f'<section class="scenario" id="{svg.scenario_anchor(name)}">',
        f"<h2>{esc(name)}</h2>",
    ]
    kind = "control" if scenario.control else f"race family {scenario.family}"
    parts.append(f'<p class="desc">{esc(scenario.description)} <i>({esc(kind)})</i></p>')
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
        parts.append(sweep_chart(name, swept, order, nominal))
        parts.append(f"<h3>Onset {closest:.2f} s</h3>")
    parts.append(_verdict_table(shown, order))
    parts.append(timelines_svg(shown, order, anchor=svg.scenario_anchor(name, shown[0].onset)))
    parts += [trace_details(run) for run in shown if run.spans]
    drawn = {id(r) for r in shown}
    others = [r for r in swept if id(r) not in drawn]
    if others:
        parts.append(f"<details><summary>Timelines of the other {len(others)} runs</summary>")
        for onset in sorted({r.onset for r in others if r.onset is not None}):
            group = [r for r in others if r.onset == onset]
            parts.append(f"<h3>Onset {onset:.2f} s</h3>")
            parts.append(_verdict_table(group, order))
            parts.append(timelines_svg(group, order, anchor=svg.scenario_anchor(name, onset)))
            parts += [trace_details(run) for run in group if run.spans]
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
            reasons = "".join(f"<li>{esc(reason)}</li>" for reason in o.reasons) or "<li>-</li>"
            rows.append(
                f"<tr><td>{esc(run.agent.label)}</td><td>{verdict}</td>"
                f"<td class='num'>{svg.latency(o.reply_latency_s)}</td>"
                f"<td class='num'>{o.lost_words}</td>"
                f'<td><ul class="reasons">{reasons}</ul></td></tr>'
            )
    rows.append("</table>")
    return "".join(rows)
