"""A lab call written as livekit's own session report (``SessionReport.to_dict()``).

livekit builds a :class:`~livekit.agents.voice.report.SessionReport` for every production call
(``JobContext.make_session_report()``, handed to the worker's ``on_session_end``). The lab builds
the same object with livekit's own class from what its recorder heard (every session event, in
emission order) and the session's public ``options`` and ``history``, so a lab call and a
production call are read by one loader (:mod:`resilient_agent.lab.replay`). On the virtual clock
``time.time()`` reads :func:`~.clock.virtual_wall_time`, so the report's stamps are the call's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livekit.agents.voice.report import SessionReport

from .clock import virtual_wall_time

SCRIPT_END_TAG = "resilient-agent-lab:script-end="
"""The report tag saying when a lab call's script ended and the lab closed the session."""
LAB_VAD_TAG = "resilient-agent-lab:vad="
"""The report tag naming a lab call's VAD (``scripted`` or ``silero``): its recording's replay
hears the caller with the same."""

if TYPE_CHECKING:
    from .runner import CallWorld

__all__ = ["LAB_VAD_TAG", "SCRIPT_END_TAG", "session_report", "write_session_report"]


def session_report(world: CallWorld) -> dict[str, Any]:
    """``world``'s call as livekit's ``SessionReport.to_dict()`` writes it.

    Args:
        world: A finished lab call.
    """
    started = virtual_wall_time(world.t0)
    fields: dict[str, Any] = {
        "job_id": f"lab-{world.scenario.name}",
        "room_id": "lab-room",
        "room": world.scenario.name,
        "options": world.session.options,
        "events": list(world.recorder.agent_events),
        "chat_history": world.session.history.copy(),
        "started_at": started,
        "duration": world.virtual_seconds,
        "timestamp": virtual_wall_time(world.t0 + world.virtual_seconds),
        "agent_name": type(world.agent).__name__,
        # when the script ended and the lab closed the session: no app or caller did
        "tags": [
            *([f"{SCRIPT_END_TAG}{world.ended_at:g}"] if not world.closed_by_app else []),
            f"{LAB_VAD_TAG}{world.scenario.vad}",
        ],
    }
    if world.audio_recording is not None:
        # as a job's report has them: livekit's recorder's file and its first sample's time
        fields["audio_recording_path"] = world.audio_recording.path
        fields["audio_recording_started_at"] = world.audio_recording.started_at
    # livekit-agents 1.8.0's report has no agent_name or tags yet: they are written beside what
    # its own to_dict() writes, under the names later releases give them
    known = {field.name for field in dataclasses.fields(SessionReport)}
    report = SessionReport(**{name: value for name, value in fields.items() if name in known})
    written = report.to_dict()
    for name in ("agent_name", "tags"):
        if name not in known:
            written[name] = fields[name]
    # as the file holds it: enums and paths as their JSON strings
    data: dict[str, Any] = json.loads(json.dumps(written, default=str))
    return data


def write_session_report(world: CallWorld, path: Path) -> Path:
    """Write ``world``'s report as JSON at ``path`` (its directory made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(session_report(world), indent=1) + "\n")
    return path
