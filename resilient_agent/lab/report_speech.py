"""The lanes of what the agent did: speech handles and their playout, tools, LLM requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..testing.clock import SAME_INSTANT_S
from . import report_svg as svg
from .report_svg import data, esc, fit, num, sec

if TYPE_CHECKING:
    from .timeline import CallTimeline, LLMTrack, PlayoutSpan, SpeechTrack

__all__ = ["llm_lanes", "speech_lanes", "tool_lanes"]


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
    lines.append(f"created {sec(speech.created_at)}, scheduled {sec(speech.scheduled_at)}")
    if speech.interrupted_at is not None:
        lines.append(f"interrupted {sec(speech.interrupted_at)}")
    if speech.done_at is None:
        lines.append("never done")
    else:
        after = ""
        if speech.interrupted_at is not None:
            after = f" ({speech.done_at - speech.interrupted_at:.3f} s after the interruption)"
        lines.append(f"done {sec(speech.done_at)}{after}")
    return "\n".join(lines)


def speech_lanes(canvas: svg.Canvas, speeches: Sequence[SpeechTrack], y: float) -> float:
    """One row per speech handle: its life, queueing, playout, interruption; returns the next y."""
    if not speeches:
        return svg.empty_lane(
            canvas, y, svg.SPEECH_ROW_HEIGHT, "speech handles", "no speech", baseline=13
        )
    for speech in speeches:
        mode = "protected" if speech.protected_at_creation else "interruptible"
        svg.lane_label(canvas, y, svg.SPEECH_ROW_HEIGHT, f"{speech.label} {speech.source}")
        parts = [
            f'<g class="speech"{data(label=speech.label, source=speech.source, mode=mode)}'
            f"{data(created=speech.created_at, done=speech.done_at)}>"
            f"{svg.title(_speech_title(speech))}"
        ]
        mid = y + svg.SPEECH_ROW_HEIGHT / 2
        life_start = speech.scheduled_at if speech.scheduled_at is not None else speech.created_at
        if life_start > speech.created_at:
            parts.append(
                f'<line class="speech-queued" x1="{num(canvas.x(speech.created_at))}" '
                f'y1="{num(mid)}" x2="{num(canvas.x(life_start))}" y2="{num(mid)}"/>'
            )
        end = speech.done_at if speech.done_at is not None else canvas.axis_end
        parts.append(
            f'<rect class="speech-life {mode}" x="{num(canvas.x(life_start))}" '
            f'y="{num(y + 2)}" width="{num(canvas.width(life_start, end))}" '
            f'height="{svg.SPEECH_ROW_HEIGHT - 4}" rx="2"/>'
        )
        for index in range(len(speech.playouts)):
            parts.append(_playout(canvas, speech, playout_index=index, y=y))
        if speech.interrupted_at is not None:
            x = canvas.x(speech.interrupted_at)
            parts.append(
                f'<path class="interrupt-mark" d="M{num(x - 5)} {num(y)} L{num(x + 5)} '
                f'{num(y)} L{num(x)} {num(y + 9)} Z"{data(at=speech.interrupted_at)}>'
                f"{svg.title(f'{speech.label} interrupted at {sec(speech.interrupted_at)}')}</path>"
            )
        if speech.done_at is not None:
            done_x = num(canvas.x(speech.done_at))
            parts.append(
                f'<line class="done-mark" x1="{done_x}" y1="{num(y + 1)}" x2="{done_x}" '
                f'y2="{num(y + svg.SPEECH_ROW_HEIGHT - 1)}"/>'
            )
            text_x = canvas.x(speech.done_at) + 5
        else:
            parts.append(
                f'<text class="never-done" x="{num(canvas.x(canvas.axis_end) - 4)}" '
                f'y="{num(mid + 3.5)}" text-anchor="end">never done →</text>'
            )
            text_x = canvas.x(canvas.axis_end)
        room = canvas.x(canvas.axis_end) - text_x
        caption = fit(f"“{speech.text}”", room) if speech.text else ""
        if caption:
            parts.append(
                f'<text class="speech-text" x="{num(text_x)}" y="{num(mid + 3.5)}">'
                f"{esc(caption)}</text>"
            )
        parts.append("</g>")
        canvas.add("".join(parts))
        y += svg.SPEECH_ROW_HEIGHT
    return y + svg.LANE_GAP


def _playout(canvas: svg.Canvas, speech: SpeechTrack, *, playout_index: int, y: float) -> str:
    """One playout as the caller heard it: solid while it played, hatched while held or paused."""
    playout = speech.playouts[playout_index]
    end = playout.end if playout.end is not None else canvas.axis_end
    if playout.protected is None:
        mode = "unowned"
    else:
        mode = "protected" if playout.protected else "interruptible"
    outcome = "interrupted" if playout.interrupted else "completed"
    runs = _heard_runs(playout, end)
    silences = _silences(playout.start, end, runs)
    top, height = y + 5, svg.SPEECH_ROW_HEIGHT - 10
    parts = [
        f'<g class="playout playout-{outcome}"'
        f"{data(start=playout.start, end=playout.end, mode=mode, outcome=outcome)}"
        f"{data(held=playout.held_s, paused=playout.paused_s, heard=playout.played_s)}>"
    ]
    for start, stop, kind in silences:
        x0, x1 = canvas.x(start), canvas.x(start) + canvas.width(start, stop)
        parts.append(
            f'<g class="playout-silence"{data(kind=kind, start=start, end=stop)}>'
            f'<rect class="playout-held playout-held-{mode}" x="{num(x0)}" y="{num(top)}" '
            f'width="{num(x1 - x0)}" height="{height}"/>'
            f'<path class="playout-held-hatch" d="{svg.hatch(x0, top, x1, top + height)}"/>'
            + _silence_caption(kind, x0, x1, y)
            + f"{svg.title(_silence_title(speech, start, stop, kind))}</g>"
        )
    for start, stop, protected in runs:
        run_mode = mode if protected is None else ("protected" if protected else "interruptible")
        parts.append(
            f'<rect class="playout-run playout-{run_mode}" x="{num(canvas.x(start))}" '
            f'y="{num(top)}" width="{num(canvas.width(start, stop))}" height="{height}"'
            f"{data(start=start, end=stop, mode=run_mode)}/>"
        )
    x, w = canvas.x(playout.start), canvas.width(playout.start, end)
    parts.append(
        f'<rect class="playout-{outcome}-cap" x="{num(x + w - 4)}" y="{num(y + 2)}" width="4" '
        f'height="{svg.SPEECH_ROW_HEIGHT - 4}"/>'
    )
    if runs:
        first_x = canvas.x(runs[0][0])
        text = fit(playout.text, canvas.x(runs[0][1]) - first_x - 10)
        if text:
            parts.append(
                f'<text class="playout-text" x="{num(first_x + 3)}" y="{num(y + 13.5)}">'
                f"{esc(text)}</text>"
            )
    parts.append(f"{svg.title(_playout_title(speech, playout, mode, outcome, runs))}</g>")
    return "".join(parts)


def _heard_runs(playout: PlayoutSpan, end: float) -> list[tuple[float, float, bool | None]]:
    """What the caller heard; a playout recorded without runs counts as heard throughout."""
    if playout.runs:
        return [(r.start, r.end, r.protected) for r in playout.runs]
    return [(playout.start, end, playout.protected)] if playout.played_s > 0 else []


def _silences(
    start: float, end: float, runs: Sequence[tuple[float, float, bool | None]]
) -> list[tuple[float, float, str]]:
    """The stretches of a playout the caller did not hear, with their kind.

    ``held`` before its first audio, ``paused`` between runs and after the last one (until it
    finished or was cut).
    """
    silences = []
    cursor, kind = start, "held"
    for run_start, run_end, _ in runs:
        if run_start - cursor > SAME_INSTANT_S:
            silences.append((cursor, run_start, kind))
        cursor, kind = run_end, "paused"
    if end - cursor > SAME_INSTANT_S:
        silences.append((cursor, end, kind))
    return silences


def _silence_caption(kind: str, x0: float, x1: float, y: float) -> str:
    text = fit(f"{kind}, not playing", x1 - x0 - 6) or fit(kind, x1 - x0 - 6)
    if not text:
        return ""
    return (
        f'<text class="playout-held-text" x="{num(x0 + 3)}" y="{num(y + 13.5)}">{esc(text)}</text>'
    )


def _silence_title(speech: SpeechTrack, start: float, stop: float, kind: str) -> str:
    what = "before its first audio" if kind == "held" else "after it had begun"
    return (
        f"{speech.label} {kind} {sec(start)} to {sec(stop)} ({stop - start:.2f} s): NOT "
        f"playing, the audio output was paused {what}; the caller heard nothing of it here"
    )


def _playout_title(
    speech: SpeechTrack,
    playout: PlayoutSpan,
    mode: str,
    outcome: str,
    runs: Sequence[tuple[float, float, bool | None]],
) -> str:
    until = sec(playout.end) if playout.end is not None else "never finished"
    lines = [f"{speech.label} playout ({mode}, {outcome}): {sec(playout.start)} to {until}"]
    if playout.held_s > 0:
        lines.append(f"held {playout.held_s:.2f} s before the caller heard anything")
    for start, stop, protected in runs:
        how = "" if protected is None else (", protected" if protected else ", interruptible")
        lines.append(f"heard {sec(start)} to {sec(stop)} ({stop - start:.2f} s{how})")
    if playout.paused_s > 0:
        lines.append(f"paused {playout.paused_s:.2f} s between the parts heard")
    lines.append(f"{playout.played_s:.2f} s heard in all\n“{playout.text}”")
    return "\n".join(lines)


def tool_lanes(canvas: svg.Canvas, timeline: CallTimeline, y: float) -> float:
    """Tool runs packed on rows; returns the next y."""
    tools = timeline.tools
    if not tools:
        return svg.empty_lane(canvas, y, svg.BAR_ROW_HEIGHT, "tools", "no tool", baseline=12)
    spans = []
    for tool in tools:
        end = tool.end if tool.end is not None else canvas.axis_end
        spans.append((canvas.x(tool.start), canvas.x(end)))
    rows = svg.pack(spans)
    count = max(rows) + 1
    svg.lane_label(canvas, y, count * svg.BAR_ROW_HEIGHT, "tools")
    for tool, row, (x0, x1) in zip(tools, rows, spans, strict=True):
        top = y + row * svg.BAR_ROW_HEIGHT
        status = tool.status or "running"
        until = sec(tool.end) if tool.end is not None else "never ended"
        title = f"tool {tool.name}({tool.arguments}) {sec(tool.start)} to {until}: {status}"
        w = max(x1 - x0, 1.0)
        text = fit(f"{tool.name} ({status})", w - 6)
        canvas.add(
            f'<g class="tool-run"{data(name=tool.name, start=tool.start, end=tool.end)}>'
            f'<rect class="tool status-{status}" x="{num(x0)}" y="{num(top + 2)}" '
            f'width="{num(w)}" height="{svg.BAR_ROW_HEIGHT - 4}" rx="2"/>'
            + (
                f'<text class="bar-text" x="{num(x0 + 4)}" y="{num(top + 12)}">{esc(text)}</text>'
                if text
                else ""
            )
            + f"{svg.title(title)}</g>"
        )
    return y + count * svg.BAR_ROW_HEIGHT + svg.LANE_GAP


def llm_lanes(canvas: svg.Canvas, timeline: CallTimeline, y: float) -> float:
    """LLM requests (time to first token, then the answer) packed on rows; returns the next y."""
    requests = timeline.llm_requests
    if not requests:
        return svg.empty_lane(
            canvas, y, svg.BAR_ROW_HEIGHT, "LLM requests", "no request", baseline=12
        )
    captions = []
    places: list[svg.Label] = []
    spans = []
    for request in requests:
        if request.hung:
            caption = _hung_caption(request)
            end = _hung_end(canvas, request)
        else:
            said = f"“{request.reply}”" if request.reply else ""
            calls = " ".join(f"{name}()" for name in request.tool_calls)
            caption = fit(" ".join(p for p in (said, calls) if p) or "(empty)", 260)
            end = request.at + request.duration_s
        captions.append(caption)
        place = svg.place_label(canvas.x(request.at), canvas.x(end), caption, gap=4)
        if request.hung and fit(caption, canvas.width(request.at, end) - 8) == caption:
            # the caption fits inside the bar: written there, the bar is all the room it takes
            place = svg.Label(
                canvas.x(request.at) + 4, "start", canvas.x(request.at), canvas.x(end)
            )
        places.append(place)
        spans.append((place.left, place.right))
    rows = svg.pack(spans)
    count = max(rows) + 1
    svg.lane_label(canvas, y, count * svg.BAR_ROW_HEIGHT, "LLM requests")
    for request, row, caption, place in zip(requests, rows, captions, places, strict=True):
        top = y + row * svg.BAR_ROW_HEIGHT
        if request.hung:
            canvas.add(_hung_request(canvas, request, top, caption, place))
            continue
        x0 = canvas.x(request.at)
        first = canvas.x(request.at + request.ttft_s)
        x1 = canvas.x(request.at + request.duration_s)
        title = (
            f"LLM request at {sec(request.at)} answering {request.answers}\n"
            f"scripted: first token after {request.ttft_s:.2f} s, answer out after "
            f"{request.duration_s:.2f} s\nreply: “{request.reply}”"
            + (f"\ntool calls: {', '.join(request.tool_calls)}" if request.tool_calls else "")
        )
        canvas.add(
            f'<g class="llm"{data(at=request.at, duration=request.duration_s)}>'
            f'<rect class="llm-wait" x="{num(x0)}" y="{num(top + 2)}" '
            f'width="{num(max(first - x0, 1.0))}" height="{svg.BAR_ROW_HEIGHT - 4}"/>'
            f'<rect class="llm-stream" x="{num(first)}" y="{num(top + 2)}" '
            f'width="{num(max(x1 - first, 1.0))}" height="{svg.BAR_ROW_HEIGHT - 4}"/>'
            f'<text class="llm-text" x="{num(place.x)}" y="{num(top + 12)}" '
            f'text-anchor="{place.anchor}">'
            f"{esc(caption)}</text>{svg.title(title)}</g>"
        )
    return y + count * svg.BAR_ROW_HEIGHT + svg.LANE_GAP


def _hung_end(canvas: svg.Canvas, request: LLMTrack) -> float:
    return request.cancelled_at if request.cancelled_at is not None else canvas.axis_end


def _hung_caption(request: LLMTrack) -> str:
    if request.cancelled_at is None:
        return "hung: no token, never cancelled"
    return f"hung: no token, cancelled at {request.cancelled_at:.2f} s"


def _hung_request(
    canvas: svg.Canvas, request: LLMTrack, top: float, caption: str, place: svg.Label
) -> str:
    """A hung request: a dashed red bar to its cancellation (red cap) or the end of the axis."""
    end = _hung_end(canvas, request)
    x0, x1 = canvas.x(request.at), canvas.x(end)
    x1 = max(x1, x0 + 1.0)
    if request.cancelled_at is not None:
        until = (
            f"cancelled at {sec(request.cancelled_at)}, when the speech handle it was "
            "generating for was interrupted"
        )
        cap = (
            f'<rect class="llm-cancelled-cap" x="{num(x1 - 4)}" y="{num(top + 1)}" '
            f'width="4" height="{svg.BAR_ROW_HEIGHT - 2}"/>'
        )
    else:
        until = "never cancelled before the recording ended"
        cap = ""
    title = (
        f"LLM request at {sec(request.at)} answering {request.answers}\n"
        f"HUNG: no token ever came; {until}\n"
        f"scripted reply it never sent: “{request.reply}”"
        + (f"\ntool calls: {', '.join(request.tool_calls)}" if request.tool_calls else "")
    )
    return (
        f'<g class="llm llm-hung-request"'
        f"{data(at=request.at, hung=True, cancelled_at=request.cancelled_at)}>"
        f'<rect class="llm-hung" x="{num(x0)}" y="{num(top + 2)}" width="{num(x1 - x0)}" '
        f'height="{svg.BAR_ROW_HEIGHT - 4}"/>{cap}'
        f'<text class="llm-hung-text" x="{num(place.x)}" y="{num(top + 12)}" '
        f'text-anchor="{place.anchor}">{esc(caption)}</text>{svg.title(title)}</g>'
    )
