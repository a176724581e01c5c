"""The sweep chart: verdict and latency against the moved utterance's onset, per agent."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from . import report_svg as svg
from .report_svg import data, esc, num

if TYPE_CHECKING:
    from .run import LabResult

__all__ = ["sweep_chart"]

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


def _nice_step(span: float, most: int) -> float:
    """The smallest round step that cuts ``span`` into at most ``most`` parts."""
    for step in (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 50.0):
        if span / step <= most:
            return step
    return 100.0


def sweep_chart(name: str, runs: Sequence[LabResult], order: Sequence[str], nominal: float) -> str:
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
        x = num(x_of(tick))
        parts.append(
            f'<line class="grid" x1="{x}" y1="{_SWEEP_TOP}" x2="{x}" y2="{num(bottom)}"/>'
            f'<text class="axis-label" x="{x}" y="{num(bottom + 13)}">{tick:g}</text>'
        )
        tick += step
    parts.append(
        f'<text class="small" x="{num((left + right) / 2)}" y="{height - 4}" '
        'text-anchor="middle">onset of the moved utterance (s from the start of the call)</text>'
    )
    for index, path in enumerate(strips):
        top = _SWEEP_TOP + index * (strip_height + _SWEEP_STRIP_GAP)
        mine = sorted((r for r in runs if r.agent.path == path), key=lambda r: r.onset or 0.0)
        parts.append(_sweep_strip_plot(name, mine, top, top_latency, latency_step, x_of))
    if lo <= nominal <= hi:
        x = num(x_of(nominal))
        parts.append(
            f'<line class="sweep-nominal" x1="{x}" y1="{_SWEEP_TOP - 4}" x2="{x}" '
            f'y2="{num(bottom)}">{svg.title(f"as written: onset {nominal:.2f} s")}</line>'
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
        f'<g class="sweep-agent"{data(agent=runs[0].agent.path)}>',
        f'<rect class="sweep-frame" x="{left}" y="{num(top)}" width="{right - left}" '
        f'height="{num(scale_bottom - top)}"/>',
        f'<rect class="sweep-band" x="{left}" y="{num(top)}" width="{right - left}" '
        f'height="{_NO_ANSWER_BAND}"/>',
        f'<text class="panel-title" x="8" y="{num(top + 14)}">{esc(label)}</text>',
        f'<text class="small" x="8" y="{num(top + 28)}">{passed}/{len(runs)} pass</text>',
        f'<text class="small" x="{left - 6}" y="{num(top + 12)}" text-anchor="end">'
        "no answer</text>",
    ]
    grid = 0.0
    while grid <= top_latency + 1e-9:
        y = y_of(grid)
        parts.append(
            f'<line class="grid" x1="{left}" y1="{num(y)}" x2="{right}" y2="{num(y)}"/>'
            f'<text class="axis-label" x="{left - 6}" y="{num(y + 3)}" text-anchor="end">'
            f"{grid:g} s</text>"
        )
        grid += latency_step
    points = []
    for run in runs:
        assert run.onset is not None
        latency = run.outcome.reply_latency_s
        y = y_of(latency) if latency is not None else top + _NO_ANSWER_BAND / 2
        points.append((x_of(run.onset), y, run, latency))
    line = " ".join(f"{num(x)},{num(y)}" for x, y, _, latency in points if latency is not None)
    if line:
        parts.append(f'<polyline class="sweep-line" points="{line}" stroke="#607d8b"/>')
    for x, y, run, latency in points:
        assert run.onset is not None
        verdict = "pass" if run.outcome.passed else "fail"
        title = (
            f"{label}, onset {run.onset:.2f} s: {verdict.upper()}, latency {svg.latency(latency)}, "
            f"lost words {run.outcome.lost_words}"
            + "".join(f"\n- {reason}" for reason in run.outcome.reasons)
        )
        parts.append(
            f'<a href="#{svg.scenario_anchor(name, run.onset)}"><g class="sweep-point"'
            f"{data(agent=run.agent.path, onset=run.onset, passed=run.outcome.passed)}"
            f"{data(latency=latency)}>"
            f'<circle class="sweep-{verdict}" cx="{num(x)}" cy="{num(y)}" r="4.5"/>'
            f"{svg.title(title)}</g></a>"
        )
    parts.append("</g>")
    return "".join(parts)
