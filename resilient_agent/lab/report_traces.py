"""A call's trace in the HTML report: each race linked to the span it is an event of.

Drawn only for a run made with ``--traces``: a list of the chain's race events, each a link to
its span's row, then every span of the call (name, times, its events) in the order they started.
"""

from __future__ import annotations

import re

from .report_svg import esc, scenario_anchor
from .run import LabResult
from .traces import race_span_events

__all__ = ["span_anchor", "trace_details"]


def span_anchor(run: LabResult, span_id: str | None) -> str:
    """The HTML id of one span's row in ``run``'s trace."""
    agent = re.sub(r"[^A-Za-z0-9_]+", "-", run.agent.label)
    return f"{scenario_anchor(run.scenario.name, run.onset)}--{agent}--span-{span_id}"


def trace_details(run: LabResult) -> str:
    """``run``'s trace as a collapsed block; empty when the run was not traced."""
    if not run.spans:
        return ""
    races = list(race_span_events(run.spans))
    parts = [
        f'<details class="trace"><summary>Trace of {esc(run.agent.label)}: '
        f"{len(run.spans)} spans, {len(races)} race events on them</summary>"
    ]
    if races:
        parts.append('<ul class="trace-races">')
        for span, event in races:
            attributes = event["attributes"]
            action = attributes.get("resilient_agent.race.action")
            what = esc(attributes.get("resilient_agent.race.kind"))
            if action is not None:
                what += f" &rarr; {esc(action)}"
            parts.append(
                f'<li><a href="#{span_anchor(run, span["span_id"])}">{esc(event["name"])} '
                f"{what}</a> at {_time(event['time'])} s on <code>{esc(span['name'])}</code></li>"
            )
        parts.append("</ul>")
    parts.append(
        '<table class="trace-spans"><tr><th>span</th><th>start</th><th>end</th><th>events</th></tr>'
    )
    for span in run.spans:
        events = ", ".join(esc(e["name"]) for e in span["events"]) or "-"
        parts.append(
            f'<tr id="{span_anchor(run, span["span_id"])}"><td><code>{esc(span["name"])}</code>'
            f"</td><td class='num'>{_time(span['start'])}</td>"
            f"<td class='num'>{_time(span['end'])}</td><td>{events}</td></tr>"
        )
    parts.append("</table></details>")
    return "".join(parts)


def _time(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}"
