"""The call's audio recording (``record=True``) as the replayed caller's line.

livekit's recorder (``livekit.agents.voice.recorder_io``) writes ``audio.ogg``: Ogg Opus,
stereo, 48 kHz, the caller's input on channel 0 where it arrived (``time.time()`` at arrival
less the frame's length), the agent's played audio on channel 1; sample 0 is
``audio_recording_started_at`` in the report (``time.time()`` when the recorder started). The
plan's seconds count from the report's first event, so the recording sits at
``audio_recording_started_at - events[0].created_at`` on the replay's timeline.

The replayed caller is the recording's caller channel at the lab's 16 kHz, heard by a VAD (the
lab's energy VAD for the lab's own recordings, whose caller is a tone; livekit's embedded Silero
VAD for any other). The recording has no transcript, so the lab stamps the report's words of
each turn (see :class:`~.plan.CallerTurn`) on the recording's speech frames in the turn, as it
marks its own scripted audio: the STT transcribes a word only when its recorded frames reached
it, and where livekit withholds the caller's audio it feeds silence, which carries no word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...testing.audio_recording import (
    AGENT_CHANNEL,
    CallerRecording,
    RecordingError,
    caller_channel,
    recorded_channel,
)
from ...testing.session_report import LAB_VAD_TAG
from ...testing.silero import UnmarkedSileroVAD
from ...testing.silero_edges import EDGE_TOLERANCE_S, SILERO_WINDOW_S
from .agent_audio import SilentLine, silent_line
from .plan import ReplayPlan, ReportError

__all__ = ["SILERO_WINDOW_S", "ReplayRecording", "followed_ends", "read_recording"]

# how far the recording may end before the caller's last words: one lab frame
_FRAME_S = 0.01


@dataclass(frozen=True)
class ReplayRecording:
    """A checked recording for one replay.

    Attributes:
        caller: The caller's line, aligned to the plan's seconds.
        lab_vad: The lab's energy VAD hears it: the lab recorded it with that VAD (its caller
            is a marker tone); else livekit's embedded Silero VAD does.
        assumptions: What the replay assumed of it, one line each.
        silent: A line the agent spoke with no audio on the agent channel (a TTS that returned
            silence, which the report's events do not record), if one.
    """

    caller: CallerRecording
    lab_vad: bool
    assumptions: tuple[str, ...] = ()
    silent: SilentLine | None = None


def read_recording(path: Path, report: Any, plan: ReplayPlan) -> ReplayRecording:
    """Check the recording at ``path`` against ``report``'s events and align it.

    Raises:
        ReportError: The file is not livekit's recording (not audio, not two channels), or its
            length or start disagrees with the events; the message names the field.
    """
    try:
        _, seconds = caller_channel(path)
    except RecordingError as exc:
        raise ReportError(f"--recording: {exc}") from None
    assumptions: list[str] = []
    offset = _offset(report, assumptions)
    first = min((t.start for t in plan.turns), default=None)
    if first is not None and offset > first + _FRAME_S:
        raise ReportError(
            f"audio_recording_started_at: the recording starts at {offset:.2f} s, after the "
            f"caller's first turn at {first:.2f} s"
        )
    # a turn that never ended has only its start for sure (the call closed in it)
    last = max((t.end if t.ended else t.start for t in plan.turns), default=0.0)
    if offset + seconds < last - _FRAME_S:
        raise ReportError(
            f"--recording: {path}: {seconds:.2f} s long from {_seconds(offset)} s, but the "
            f"caller's last turn ends at {last:.2f} s (events): not this call's recording"
        )
    lab_vad = _lab_vad(report.get("tags"))
    ends = tuple(t.end for t in plan.turns if t.ended) if lab_vad != "scripted" else ()
    vad = (
        "the lab's energy VAD, as in the recorded lab call"
        if lab_vad == "scripted"
        else "livekit's embedded Silero VAD (on the Opus-coded recording a turn's end may come "
        f"a {SILERO_WINDOW_S * 1000:.0f} ms window off the call's: Opus rings on where the "
        "call's Silero was near its threshold; where the replay's Silero ends a turn at most "
        f"{EDGE_TOLERANCE_S:.3f} s from the report's end of it (user_state_changed to "
        "listening), the replay ends it at the report's time, each printed as assumed)"
    )
    assumptions.append(
        f"the caller's audio is the recording's channel 0 ({seconds:.2f} s from "
        f"{_seconds(offset)} s), "
        f"heard by {vad}; the STT answers with the report's words of each turn (placeholders "
        "where it has none), spread over the turn's speech in the recording, and hears a word "
        "only from recorded frames that reached it"
    )
    silent = silent_line(report["events"], recorded_channel(path, AGENT_CHANNEL)[0], offset)
    if silent is not None:
        assumptions.append(
            f"at {silent.at:.2f} s: the agent spoke {silent.text!r} with no audio on the "
            "recording's agent channel (channel 1) and no error event: the TTS returned silence "
            f"for sentence {silent.sentence}"
        )
    return ReplayRecording(
        CallerRecording(path, round(offset, 6), silero_ends=ends),
        lab_vad == "scripted",
        tuple(assumptions),
        silent,
    )


def followed_ends(vad: object) -> tuple[str, ...]:
    """The ``assumed:`` lines of the turn ends a replay's Silero (``vad``) took from the report."""
    if not isinstance(vad, UnmarkedSileroVAD):
        return ()
    return tuple(
        f"at {edge.recorded:.2f} s: the replay's Silero heard the caller until "
        f"{edge.replayed:.3f} s, the report ends it at {edge.recorded:.3f} s "
        f"({abs(edge.replayed - edge.recorded) * 1000:.0f} ms apart, within two "
        f"{SILERO_WINDOW_S * 1000:.0f} ms Silero windows): the turn ends at the report's time "
        "(livekit's recorder's Opus blurs a window where Silero is at its threshold)"
        for edge in vad.followed
    )


def _lab_vad(tags: Any) -> str | None:
    """The VAD of a lab call (its report's tag), None for any other call."""
    for tag in tags if isinstance(tags, list) else ():
        if isinstance(tag, str) and tag.startswith(LAB_VAD_TAG):
            return tag.removeprefix(LAB_VAD_TAG)
    return None


def _seconds(value: float) -> str:
    """``value`` to the hundredth, a rounding's -0.00 read as 0.00."""
    return f"{round(value, 2) or 0.0:.2f}"


def _offset(report: Mapping[str, Any], assumptions: list[str]) -> float:
    """The plan second of the recording's first sample."""
    started = report.get("audio_recording_started_at")
    if started is None:
        assumptions.append(
            "audio_recording_started_at: missing; the recording is taken to start with the "
            "report's first event"
        )
        return 0.0
    if isinstance(started, bool) or not isinstance(started, (int, float)):
        raise ReportError(f"audio_recording_started_at: expected a number, got {started!r:.60}")
    # load_plan checked the events: the first one has a numeric created_at
    first = float(report["events"][0]["created_at"])
    return float(started) - first
