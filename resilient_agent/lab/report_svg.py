"""SVG primitives of the lab report: geometry, escaping, the time axis, labels and packing."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import AgentUnderTest, LabResult
    from .timeline import CallTimeline

# Geometry of a timeline drawing, in CSS pixels.
WIDTH = 1240
LABEL_COLUMN = 150
RIGHT_MARGIN = 24
PLOT_WIDTH = WIDTH - LABEL_COLUMN - RIGHT_MARGIN
AXIS_HEIGHT = 22
PANEL_GAP = 18
LANE_GAP = 3
TITLE_HEIGHT = 22
UTTERANCE_BAR_HEIGHT = 16
CAPTION_ROW_HEIGHT = 13
MARK_ROW_HEIGHT = 16
STATE_HEIGHT = 14
SPEECH_ROW_HEIGHT = 20
BAR_ROW_HEIGHT = 17
# Average advance of a character of the sans-serif UI font at 11 px, to fit labels.
CHAR_WIDTH = 6.2
# Space kept between two labelled marks packed on one row.
PACK_GAP_PX = 6.0
# Width of a typed message's chat-bubble marker, and the spacing of hatching lines.
BUBBLE_WIDTH = 13.0
HATCH_SPACING_PX = 5.0


def scenario_anchor(name: str, onset: float | None = None) -> str:
    """The HTML id of a scenario's section (or of one onset's timeline in a sweep)."""
    anchor = "scenario-" + re.sub(r"[^A-Za-z0-9_]+", "-", name).strip("-")
    if onset is not None:
        anchor += f"--onset-{onset:.2f}".replace(".", "_")
    return anchor


def esc(text: object) -> str:
    """``text`` escaped for HTML text and attribute values."""
    return html.escape(str(text), quote=True)


def num(value: float) -> str:
    """A coordinate, short: one decimal is below a pixel."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def sec(value: float | None) -> str:
    """Call seconds to the millisecond, ``-`` for None."""
    return "-" if value is None else f"{value:.3f} s"


def latency(value: float | None) -> str:
    """A latency to the hundredth, ``-`` for None."""
    return "-" if value is None else f"{value:.2f} s"


def agent_order(runs: Iterable[LabResult], agents: Sequence[AgentUnderTest]) -> list[str]:
    """The agents' paths in run order, any extra ones after."""
    seen = {r.agent.path for r in runs}
    order = [a.path for a in agents if a.path in seen]
    return order + sorted(seen - set(order))


@dataclass
class Canvas:
    """SVG fragments and the time-to-pixel mapping they share."""

    axis_end: float
    parts: list[str] = field(default_factory=list)

    @property
    def scale(self) -> float:
        """Pixels per second."""
        return PLOT_WIDTH / self.axis_end

    def x(self, seconds: float) -> float:
        """The pixel column of ``seconds``, clamped to the axis."""
        return LABEL_COLUMN + min(max(seconds, 0.0), self.axis_end) * self.scale

    def width(self, start: float, end: float) -> float:
        """Pixels from ``start`` to ``end``, at least one."""
        return max(self.x(end) - self.x(start), 1.0)

    def add(self, fragment: str) -> None:
        """Append an SVG fragment."""
        self.parts.append(fragment)


def title(text: str) -> str:
    """An SVG ``<title>`` (the hover text)."""
    return f"<title>{esc(text)}</title>"


def data(**values: object) -> str:
    """``data-*`` attributes for the values that are not None."""
    out = []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append(f' data-{key.replace("_", "-")}="{esc(value)}"')
    return "".join(out)


def fit(text: str, width_px: float) -> str:
    """``text`` cut to fit ``width_px`` (empty if not even two characters fit)."""
    room = int(width_px / CHAR_WIDTH)
    if room >= len(text):
        return text
    if room < 3:
        return ""
    return text[: room - 1] + "…"


def hatch(x0: float, y0: float, x1: float, y1: float) -> str:
    """Path data of diagonal lines (``/``) filling the box, cut at its edges (no clip path)."""
    segments = []
    k = x0 + y0 + HATCH_SPACING_PX
    while k < x1 + y1:
        # the line x + y = k inside the box
        left, right = max(x0, k - y1), min(x1, k - y0)
        if right > left:
            segments.append(f"M{num(left)} {num(k - left)}L{num(right)} {num(k - right)}")
        k += HATCH_SPACING_PX
    return "".join(segments)


def bubble(x: float, top: float, height: float) -> str:
    """Path data of a chat bubble whose tail points down to ``x``, its body right of it."""
    body_bottom = top + height - 4
    return (
        f"M{num(x)} {num(top)}H{num(x + BUBBLE_WIDTH)}V{num(body_bottom)}"
        f"H{num(x + 5)}L{num(x)} {num(top + height)}Z"
    )


def pack(spans: Sequence[tuple[float, float]]) -> list[int]:
    """A row for each pixel span so that spans on one row never overlap (first fit)."""
    row_ends: list[float] = []
    rows = []
    for start, end in spans:
        for row, row_end in enumerate(row_ends):
            if start >= row_end + PACK_GAP_PX:
                row_ends[row] = end
                rows.append(row)
                break
        else:
            row_ends.append(end)
            rows.append(len(row_ends) - 1)
    return rows


def axis_end(timelines: Sequence[CallTimeline]) -> float:
    """The shared axis end: the last activity plus air, in whole seconds."""
    end = max(t.activity_end for t in timelines)
    end = max(end, *(u.end for t in timelines for u in t.utterances), 1.0)
    # half a second of air after the last event, then whole seconds for round tick labels
    return float(math.ceil(end + 0.5))


def tick_step(axis_end: float) -> float:
    """Seconds between grid lines: at most 30 of them."""
    for step in (0.5, 1.0, 2.0, 5.0, 10.0):
        if axis_end / step <= 30:
            return step
    return 20.0


def axis(canvas: Canvas, *, top: float, bottom: float) -> None:
    """Grid lines over the panels and time labels above and below them."""
    step = tick_step(canvas.axis_end)
    count = round(canvas.axis_end / step)
    for i in range(count + 1):
        t = i * step
        x = num(canvas.x(t))
        major = "grid-major" if t == int(t) else "grid"
        canvas.add(
            f'<line class="tick {major}" x1="{x}" y1="{num(top - 4)}" x2="{x}" '
            f'y2="{num(bottom + 4)}"{data(t=f"{t:g}")}/>'
        )
        if t != int(t):
            continue  # half-second lines stay unlabelled: the labels would touch
        label = f"{t:g} s"
        canvas.add(f'<text class="axis-label" x="{x}" y="{num(top - 8)}">{label}</text>')
        canvas.add(f'<text class="axis-label" x="{x}" y="{num(bottom + 16)}">{label}</text>')


@dataclass(frozen=True)
class Label:
    """Where a mark's caption goes: right of it, or left when it would leave the plot."""

    x: float
    anchor: str
    left: float
    right: float


def place_label(start: float, end: float, text: str, gap: float = 8.0) -> Label:
    """A caption for something drawn from ``start`` to ``end`` (pixels)."""
    width = len(text) * CHAR_WIDTH
    if end + gap + width <= WIDTH - RIGHT_MARGIN:
        return Label(end + gap, "start", start - gap, end + gap + width)
    return Label(start - gap, "end", start - gap - width, end + gap)


def empty_lane(
    canvas: Canvas, y: float, height: float, label: str, text: str, *, baseline: float
) -> float:
    """A lane with nothing to draw: its name and ``text`` (``baseline`` below ``y``).

    Returns:
        The next lane's y.
    """
    lane_label(canvas, y, height, label)
    canvas.add(
        f'<text class="none" x="{LABEL_COLUMN + 6}" y="{num(y + baseline)}">{esc(text)}</text>'
    )
    return y + height + LANE_GAP


def lane_label(canvas: Canvas, y: float, height: float, text: str) -> None:
    """A lane's name in the label column and its bottom rule."""
    canvas.add(
        f'<text class="lane-label" x="{LABEL_COLUMN - 8}" y="{num(y + height / 2 + 4)}">'
        f"{esc(text)}</text>"
    )
    canvas.add(
        f'<line class="lane-line" x1="{LABEL_COLUMN}" y1="{num(y + height + 1)}" '
        f'x2="{WIDTH - RIGHT_MARGIN}" y2="{num(y + height + 1)}"/>'
    )
