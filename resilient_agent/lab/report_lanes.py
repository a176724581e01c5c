"""The timeline drawing of one call: a panel per agent, lane by lane, on one time axis.

The caller's lane (words, typed messages, noise), STT finals and user turns, user and agent
state, race events and the call's end are drawn here; speech handles, tools and LLM requests in
:mod:`.report_speech`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import report_svg as svg
from .report_speech import llm_lanes, speech_lanes, tool_lanes
from .report_svg import data, esc, fit, num, sec

if TYPE_CHECKING:
    from .run import LabResult
    from .timeline import CallTimeline, Mark, NoiseSpan, StateSpan, TypedTrack, UtteranceTrack

__all__ = ["timelines_svg"]


def timelines_svg(runs: Sequence[LabResult], order: Sequence[str], *, anchor: str) -> str:
    """The panels of one run per agent, stacked on one shared time axis."""
    timelines = [r.timeline for path in order for r in runs if r.agent.path == path and r.timeline]
    if not timelines:
        return '<p class="meta">No timeline recorded for these runs.</p>'
    canvas = svg.Canvas(axis_end=svg.axis_end(timelines))
    y: float = svg.AXIS_HEIGHT
    panel_parts: list[str] = []
    for timeline in timelines:
        panel = svg.Canvas(axis_end=canvas.axis_end)
        height = _panel(panel, timeline, y)
        panel_parts.append(
            f'<g class="panel"{data(agent=timeline.agent, top=num(y), height=num(height))}>'
            + "".join(panel.parts)
            + "</g>"
        )
        y += height + svg.PANEL_GAP
    total = y - svg.PANEL_GAP + svg.AXIS_HEIGHT
    svg.axis(canvas, top=svg.AXIS_HEIGHT, bottom=total - svg.AXIS_HEIGHT)
    body = "".join(canvas.parts) + "".join(panel_parts)
    return (
        f'<svg class="timeline" id="{anchor}" width="{svg.WIDTH}" height="{num(total)}" '
        f'viewBox="0 0 {svg.WIDTH} {num(total)}" xmlns="http://www.w3.org/2000/svg"'
        f"{data(axis_end=canvas.axis_end, plot_left=svg.LABEL_COLUMN, plot_width=svg.PLOT_WIDTH)}>"
        f"{body}</svg>"
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


def _panel(canvas: svg.Canvas, timeline: CallTimeline, top: float) -> float:
    """Draw one agent's call from ``top``; returns its height."""
    y = top
    _panel_title(canvas, timeline, y)
    y += svg.TITLE_HEIGHT
    lanes_top = y
    y = _caller_lane(canvas, timeline, y)
    y = _turns_lane(canvas, timeline, y)
    y = _state_lane(canvas, timeline.user_states, y, "user state (VAD)", "user-state")
    y = _state_lane(canvas, timeline.agent_states, y, "agent state", "agent-state")
    y = speech_lanes(canvas, timeline.speeches, y)
    y = tool_lanes(canvas, timeline, y)
    y = llm_lanes(canvas, timeline, y)
    y = _events_lane(canvas, timeline, y, race=True)
    y = _events_lane(canvas, timeline, y, race=False)
    bottom = y
    # the caller's speech and the call's end, across every lane: what happened meanwhile
    bands = []
    for u in timeline.utterances:
        bands.append(
            f'<rect class="caller-band" x="{num(canvas.x(u.start))}" y="{num(lanes_top)}" '
            f'width="{num(canvas.width(u.start, u.end))}" height="{num(bottom - lanes_top)}"/>'
        )
    for t in timeline.typed:
        x = num(canvas.x(t.at))
        bands.append(
            f'<line class="typed-line" x1="{x}" y1="{num(lanes_top)}" x2="{x}" '
            f'y2="{num(bottom)}">{svg.title(f"typed message {t.number} arrived at {sec(t.at)}")}'
            "</line>"
        )
    for mark in (*timeline.marks, *timeline.race_events):
        if mark.kind in _VERTICAL_LINE_KINDS:
            if mark.at > canvas.axis_end:
                continue
            x = num(canvas.x(mark.at))
            bands.append(
                f'<line class="vline-{mark.kind}" x1="{x}" y1="{num(lanes_top)}" x2="{x}" '
                f'y2="{num(bottom)}">{svg.title(f"{mark.detail} at {sec(mark.at)}")}</line>'
            )
    canvas.parts[:0] = bands
    canvas.add(
        f'<rect class="panel-frame" x="2" y="{num(top)}" width="{svg.WIDTH - 4}" '
        f'height="{num(bottom - top + 2)}"/>'
    )
    return bottom - top + 2


def _panel_title(canvas: svg.Canvas, timeline: CallTimeline, y: float) -> None:
    verdict = "PASS" if timeline.passed else "FAIL"
    css = "verdict-pass" if timeline.passed else "verdict-fail"
    figures = (
        f"latency {svg.latency(timeline.reply_latency_s)} · lost words {timeline.lost_words}"
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
        f'<text class="panel-title" x="10" y="{num(y + 15)}">{esc(timeline.agent_label)}</text>'
        f'<text class="{css}" x="{svg.LABEL_COLUMN}" y="{num(y + 15)}"'
        f"{data(verdict=verdict)}>{verdict}</text>"
        f'<text x="{svg.LABEL_COLUMN + 44}" y="{num(y + 15)}">{esc(figures)}</text>'
    )


def _caller_lane(canvas: svg.Canvas, timeline: CallTimeline, y: float) -> float:
    """The caller's lane: what they said, typed, and the noise on their line.

    Utterance bars split into word cells, typed messages as chat bubbles, background noise
    hatched behind them, and under them the words, coloured by fate.
    """
    utterances, typed = timeline.utterances, timeline.typed
    captions = [f"u{u.number}: " + " ".join(w.text for w in u.words) for u in utterances]
    captions += [f"t{t.number}: {t.text}" for t in typed]
    starts = [u.start for u in utterances] + [t.at for t in typed]
    rows = svg.pack(
        [
            (canvas.x(start), canvas.x(start) + len(caption) * svg.CHAR_WIDTH)
            for start, caption in zip(starts, captions, strict=True)
        ]
    )
    height = svg.UTTERANCE_BAR_HEIGHT + (max(rows, default=0) + 1) * svg.CAPTION_ROW_HEIGHT + 2
    svg.lane_label(canvas, y, height, "caller speech · chat" if typed else "caller speech")
    for noise in timeline.noise:
        if noise.start < canvas.axis_end:
            canvas.add(_noise(canvas, noise, y))

    def caption_y(row: int) -> float:
        return y + svg.UTTERANCE_BAR_HEIGHT + (row + 1) * svg.CAPTION_ROW_HEIGHT - 1

    for u, row in zip(utterances, rows[: len(utterances)], strict=True):
        canvas.add(_utterance(canvas, u, y, caption_y(row)))
    for t, row in zip(typed, rows[len(utterances) :], strict=True):
        canvas.add(_typed(canvas, t, y, caption_y(row)))
    return y + height + svg.LANE_GAP


def _noise(canvas: svg.Canvas, noise: NoiseSpan, y: float) -> str:
    """A grey hatched band over the utterance row while the caller's line is noisy."""
    x0, x1 = canvas.x(noise.start), canvas.x(noise.end)
    x1 = max(x1, x0 + 1.0)
    top, bottom = y + 1, y + svg.UTTERANCE_BAR_HEIGHT
    title = (
        f"background noise on the caller's line: {sec(noise.start)} to {sec(noise.end)}, "
        f"RMS {noise.rms:.0f} (scripted speech is about 2100): loud audio with no words in it"
    )
    text = fit("background noise", x1 - x0 - 6)
    return (
        f'<g class="noise"{data(start=noise.start, end=noise.end, rms=noise.rms)}>'
        f'<rect class="noise-band" x="{num(x0)}" y="{num(top)}" width="{num(x1 - x0)}" '
        f'height="{num(bottom - top)}"/>'
        f'<path class="noise-hatch" d="{svg.hatch(x0, top, x1, bottom)}"/>'
        + (
            f'<text class="noise-text" x="{num(x1 - 3)}" y="{num(top + 11)}" '
            f'text-anchor="end">{esc(text)}</text>'
            if text
            else ""
        )
        + f"{svg.title(title)}</g>"
    )


def _typed(canvas: svg.Canvas, t: TypedTrack, y: float, caption_y: float) -> str:
    """A chat bubble pointing at the message's arrival, coloured by the fate of its words."""
    x = canvas.x(t.at)
    fate = "lost" if t.lost else "reached"
    bubble = svg.bubble(x, y + 1, svg.UTTERANCE_BAR_HEIGHT - 1)
    lines = [f"typed message {t.number} at {sec(t.at)}: “{t.text}”"]
    if t.lost:
        lines.append(f"{t.lost_words} word(s) LOST, never reached the LLM: {' '.join(t.lost)}")
    if t.reached_llm_at is not None:
        lines.append(f"reached the LLM at {sec(t.reached_llm_at)}")
    if t.reply_latency_s is not None:
        lines.append(f"answered after {t.reply_latency_s:.2f} s (from its arrival)")
    else:
        lines.append("never answered audibly" if t.expect_reply else "no reply expected")
    title = svg.title("\n".join(lines))
    lost = {w.lower() for w in t.lost}
    words = "".join(
        f'<tspan class="said-{"lost_typed" if w.lower() in lost else "reached_llm"}">'
        f"{esc(w)} </tspan>"
        for w in t.text.split()
    )
    return (
        f'<g class="typed-message"'
        f"{data(number=t.number, at=t.at, lost=t.lost_words, latency=t.reply_latency_s)}>"
        f'<path class="typed typed-{fate}" d="{bubble}"/>'
        f'<text class="caption" x="{num(x)}" y="{num(caption_y)}">'
        f'<tspan class="said-label">t{t.number}: </tspan>{words}</text>{title}</g>'
    )


def _utterance(canvas: svg.Canvas, u: UtteranceTrack, y: float, caption_y: float) -> str:
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
    title = f"utterance {u.number}: {sec(u.start)} to {sec(u.end)}{lost}{merged}{reply}\n“{u.text}”"
    group = [f'<g class="utterance-group"{data(number=u.number, start=u.start, end=u.end)}>']
    words = []
    for word in u.words:
        x, w = canvas.x(word.start), canvas.width(word.start, word.end)
        fate = {
            "reached_llm": f"reached the LLM at {sec(word.reached_llm_at)}",
            "lost_before_stt": "LOST: its audio never reached the STT",
            "lost_after_stt": "LOST: transcribed, never reached the LLM",
        }[word.status]
        group.append(
            f'<rect class="word word-{word.status}" x="{num(x)}" y="{num(y + 2)}" '
            f'width="{num(w)}" height="{svg.UTTERANCE_BAR_HEIGHT - 3}"'
            f"{data(status=word.status, start=word.start, end=word.end)}>"
            f"{svg.title(f'“{word.text}” {sec(word.start)}-{sec(word.end)}: {fate}')}</rect>"
        )
        words.append(f'<tspan class="said-{word.status}">{esc(word.text)} </tspan>')
    group.append(
        f'<rect class="utterance" x="{num(canvas.x(u.start))}" y="{num(y + 1)}" '
        f'width="{num(canvas.width(u.start, u.end))}" height="{svg.UTTERANCE_BAR_HEIGHT - 1}"'
        f"{data(number=u.number, start=u.start, end=u.end)}>{svg.title(title)}</rect>"
    )
    group.append(
        f'<text class="caption" x="{num(canvas.x(u.start))}" y="{num(caption_y)}">'
        f'<tspan class="said-label">u{u.number}: </tspan>{"".join(words)}{svg.title(title)}</text>'
    )
    group.append("</g>")
    return "".join(group)


def _turns_lane(canvas: svg.Canvas, timeline: CallTimeline, y: float) -> float:
    """STT finals on the first row (their text is the hover), committed turns packed below."""
    finals = [m for m in timeline.marks if m.kind == "stt_final"]
    turns = [m for m in timeline.marks if m.kind in ("user_turn", "merged_turn")]
    places = [svg.place_label(canvas.x(m.at), canvas.x(m.at), m.label) for m in turns]
    rows = svg.pack([(p.left, p.right) for p in places])
    count = max(rows, default=-1) + 2
    height = count * svg.MARK_ROW_HEIGHT
    svg.lane_label(canvas, y, height, "STT → user turns")
    for mark in finals:
        x = canvas.x(mark.at)
        canvas.add(
            f'<g class="mark"{data(kind=mark.kind, at=mark.at)}>'
            f'<rect class="stt-final" x="{num(x - 1)}" y="{num(y + 2)}" width="2" '
            f'height="{svg.MARK_ROW_HEIGHT - 4}"/>'
            f"{svg.title(f'{mark.detail} at {sec(mark.at)}')}</g>"
        )
    for mark, row, place in zip(turns, rows, places, strict=True):
        cy = y + (row + 1) * svg.MARK_ROW_HEIGHT + svg.MARK_ROW_HEIGHT / 2
        x = canvas.x(mark.at)
        r = 6 if mark.kind == "merged_turn" else 5
        canvas.add(
            f'<g class="mark"{data(kind=mark.kind, at=mark.at)}>'
            f'<path class="{mark.kind.replace("_", "-")}" d="M{num(x)} {num(cy - r)} '
            f'L{num(x + r)} {num(cy)} L{num(x)} {num(cy + r)} L{num(x - r)} {num(cy)} Z"/>'
            f'<text class="small" x="{num(place.x)}" y="{num(cy + 3.5)}" '
            f'text-anchor="{place.anchor}">{esc(mark.label)}</text>'
            f"{svg.title(f'{mark.detail} at {sec(mark.at)}')}</g>"
        )
    return y + height + svg.LANE_GAP


def _state_lane(
    canvas: svg.Canvas, spans: Sequence[StateSpan], y: float, label: str, owner: str
) -> float:
    svg.lane_label(canvas, y, svg.STATE_HEIGHT, label)
    for span in spans:
        end = span.end if span.end is not None else canvas.axis_end
        if span.start >= canvas.axis_end:
            continue
        x, w = canvas.x(span.start), canvas.width(span.start, end)
        until = sec(span.end) if span.end is not None else "the end of the recording"
        title = f"{label} {span.state}: {sec(span.start)} to {until}"
        text = fit(span.state, w - 4)
        canvas.add(
            f'<g class="state-span"><rect class="state {owner} state-{esc(span.state)}" '
            f'x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{svg.STATE_HEIGHT}"'
            f"{data(state=span.state, start=span.start, end=span.end)}>{svg.title(title)}</rect>"
            + (
                f'<text class="small" x="{num(x + 3)}" y="{num(y + 10.5)}">{esc(text)}</text>'
                if text
                else ""
            )
            + "</g>"
        )
    return y + svg.STATE_HEIGHT + svg.LANE_GAP


_EVENT_KINDS = ("livekit_log", "hang_up", "room_deleted", "session_closed", "script_end")


def _events_lane(canvas: svg.Canvas, timeline: CallTimeline, y: float, *, race: bool) -> float:
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
        return svg.empty_lane(canvas, y, svg.MARK_ROW_HEIGHT, label, empty, baseline=11)
    places = [svg.place_label(canvas.x(m.at), canvas.x(m.at), m.label, gap=9) for m in marks]
    rows = svg.pack([(p.left, p.right) for p in places])
    count = max(rows) + 1
    height = count * svg.MARK_ROW_HEIGHT
    svg.lane_label(canvas, y, height, label)
    for mark, row, place in zip(marks, rows, places, strict=True):
        cy = y + row * svg.MARK_ROW_HEIGHT + svg.MARK_ROW_HEIGHT / 2
        x = canvas.x(mark.at)
        canvas.add(
            f'<g class="mark"{data(kind=mark.kind, at=mark.at)}>{_event_shape(mark.kind, x, cy)}'
            f'<text class="small" x="{num(place.x)}" y="{num(cy + 3.5)}" '
            f'text-anchor="{place.anchor}">{esc(mark.label)}</text>'
            f"{svg.title(f'{mark.detail} at {sec(mark.at)}')}</g>"
        )
    return y + height + svg.LANE_GAP


def _event_shape(kind: str, x: float, cy: float) -> str:
    css = f"mark-{kind}"
    if kind == "livekit_log":
        return (
            f'<path class="{css}" d="M{num(x)} {num(cy - 6)} L{num(x + 6)} {num(cy + 5)} '
            f'L{num(x - 6)} {num(cy + 5)} Z"/>'
        )
    if kind in ("race_detected", "race_handled", "race_event"):
        return (
            f'<path class="{css}" d="M{num(x)} {num(cy - 7)} L{num(x + 7)} {num(cy)} '
            f'L{num(x)} {num(cy + 7)} L{num(x - 7)} {num(cy)} Z"/>'
        )
    if kind in ("hang_up", "room_deleted"):
        return f'<circle class="{css}" cx="{num(x)}" cy="{num(cy)}" r="5"/>'
    return f'<rect class="{css}" x="{num(x - 4)}" y="{num(cy - 4)}" width="8" height="8"/>'
