"""``--emit-test``: a replayed call written as a pytest test for the app's own suite.

The test carries the part of livekit's report the replay reads (the session events, trimmed of
usage and metrics), so it runs anywhere ``resilient-agent`` is installed, with no report file.
``--redact`` replaces every word the caller, the agent and the tools said with a stand-in (the
same word always by the same stand-in, so the LLM's answers still follow the caller's words).
"""

from __future__ import annotations

import json
import pprint
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..._engine.pending_words import TYPED_EXTRA
from ..._session.cut_in import CUT_IN_EXTRA
from ..run import LAB_AGENT_PATHS
from .realtime_evidence import is_livekit_end_call

__all__ = ["emitted_test_source", "redacted", "trimmed_report", "write_test"]

# what the replay plan reads of each event (see .plan); the first event is kept whatever it is,
# as the call's start
_KEPT: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "user_state_changed": ("new_state",),
        "agent_state_changed": ("new_state",),
        # a realtime model's transcripts name its conversation item (see .realtime)
        "user_input_transcribed": ("transcript", "is_final", "item_id"),
        "conversation_item_added": ("item",),
        "tool_execution_updated": ("update",),
        "function_tools_executed": ("function_call_outputs",),
        "speech_created": ("source", "user_initiated"),
        "error": ("error",),
        "close": ("reason",),
    }
)
_ITEM_KEYS = ("id", "type", "role", "content", "interrupted", "created_at")
_METRIC_KEYS = (
    "llm_node_ttft",
    "started_speaking_at",
    "transcription_delay",
    "provider_request_ids",  # a realtime model's message: its response's id
)
# what the plan reads of an error: which provider failed, and whether livekit recovered
_ERROR_KEYS = ("type", "recoverable")
_HANDOFF_KEYS = ("id", "type", "old_agent_id", "new_agent_id")
# the typed words a merged user message names are words said too (redacted alike)
_WORD_KEYS = frozenset({"transcript", "content", "output", "message", TYPED_EXTRA})


def trimmed_report(report: Mapping[str, Any], *, recording: bool = False) -> dict[str, Any]:
    """The part of ``report`` (``SessionReport.to_dict()``) a replay reads.

    With ``recording``, also what the replay of its audio reads: when the recording started and
    the lab's VAD tag.
    """
    events: list[dict[str, Any]] = []
    for index, event in enumerate(report.get("events", [])):
        kind = event.get("type")
        if kind not in _KEPT and index:
            continue
        kept = {"type": kind, "created_at": event.get("created_at")}
        kept.update({k: event[k] for k in _KEPT.get(kind, ()) if k in event})
        error = kept.get("error")
        if isinstance(error, Mapping):
            kept["error"] = {k: error[k] for k in _ERROR_KEYS if k in error}
        item = kept.get("item")
        if isinstance(item, Mapping):
            if item.get("type") == "agent_handoff":  # which agent took the call
                handoff = {k: item[k] for k in _HANDOFF_KEYS if k in item}
                events.append({**kept, "item": handoff})
                continue
            if item.get("type") != "message":
                if index == 0:  # the call's start
                    events.append({**kept, "item": {"type": item.get("type")}})
                continue
            slim = _slim_message(item)
            metrics = item.get("metrics")
            if isinstance(metrics, Mapping):
                # a user message's speech metrics say an STT wrote it, not the caller's typing
                slim["metrics"] = {k: v for k, v in metrics.items() if k in _METRIC_KEYS}
            kept["item"] = slim
        events.append(kept)
    history = report.get("chat_history")
    items = history.get("items") if isinstance(history, Mapping) else None
    # the caller's messages: a middleware may have put one in the chat with no event
    users = [
        _slim_message(item)
        for item in (items if isinstance(items, list) else ())
        if isinstance(item, Mapping)
        and item.get("type") == "message"
        and item.get("role") == "user"
    ]
    trimmed = {
        "sdk_version": report.get("sdk_version"),
        "options": report.get("options"),
        "events": events,
        "chat_history": {"items": users},
    }
    if recording:
        trimmed["audio_recording_started_at"] = report.get("audio_recording_started_at")
        trimmed["tags"] = report.get("tags", [])
    return trimmed


def _slim_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message with what the replay reads of it: its marks among its ``extra``."""
    slim = {k: item[k] for k in _ITEM_KEYS if k in item}
    extra = item.get("extra")
    if isinstance(extra, Mapping):
        marks = {}
        if extra.get(CUT_IN_EXTRA) is True:
            marks[CUT_IN_EXTRA] = True  # a line the app meant as a cut-in
        if isinstance(extra.get(TYPED_EXTRA), list):
            marks[TYPED_EXTRA] = extra[TYPED_EXTRA]  # the typed words of a merged message
        if marks:
            slim["extra"] = marks
    return slim


def redacted(report: Any) -> Any:
    """``report`` with every word said replaced by a stand-in (``w1``, ``w2``, ...).

    The output of livekit's ``EndCallTool`` (its default instructions, livekit's words and none
    of the call's) is kept: the replay knows the tool by it (:func:`.is_livekit_end_call`).
    """
    stand_ins: dict[str, str] = {}

    def word(w: str) -> str:
        return stand_ins.setdefault(w.lower(), f"w{len(stand_ins) + 1}")

    def text(value: str) -> str:
        return " ".join(word(w) for w in value.split())

    def walk(value: Any, key: str | None = None) -> Any:
        if isinstance(value, Mapping):
            name, output = value.get("name"), value.get("output")
            if (
                isinstance(name, str)
                and isinstance(output, str)
                and is_livekit_end_call(name, output)
            ):
                return {k: v if k == "output" else walk(v, k) for k, v in value.items()}
            return {
                k: _arguments(v, text) if k == "arguments" else walk(v, k) for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str) and key in _WORD_KEYS:
            return text(value)
        return value

    return walk(report)


def _arguments(raw: Any, text: Any) -> Any:
    """A tool call's JSON arguments with their string values redacted."""
    try:
        parsed = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return raw
    if not isinstance(parsed, dict):
        return raw
    return json.dumps({k: text(v) if isinstance(v, str) else v for k, v in parsed.items()})


def emitted_test_source(
    report: Mapping[str, Any],
    *,
    agent_path: str,
    source: str,
    recording: str | None = None,
    hang_up_pad: float = 0.0,
) -> str:
    """A pytest module replaying ``report`` on the class at ``agent_path`` (``module:Class``).

    With ``recording``: the file name, beside the test, of the call's audio it replays; with
    ``hang_up_pad``: the recorded agent's (see :func:`~.plan.load_plan`).
    """
    load = f"load_plan(REPORT, hang_up_pad={hang_up_pad!r})" if hang_up_pad else "load_plan(REPORT)"
    module, _, cls = agent_path.partition(":")
    literal = pprint.pformat(report, width=96, sort_dicts=False)
    audio = "" if recording is None else ", recording=_recording(plan)"
    heard = (
        ""
        if recording is None
        else f"""

# the call's audio recording (livekit's record=True), copied beside this test
RECORDING = Path(__file__).with_name({recording!r})


def _recording(plan: ReplayPlan) -> ReplayRecording:
    return read_recording(RECORDING, REPORT, plan)
"""
    )
    return f'''"""A production call replayed from livekit's session report ({source}).

Written by resilient-agent replay --emit-test. The call runs on the lab's virtual clock: the
caller's turns at their recorded times, the LLM's recorded answers, the tools' recorded outputs.
On a plain livekit.agents.Agent it loses the words the recorded call lost; {cls} must keep them.
"""

{_imports(module, cls, recording is not None)}

REPORT = {literal}{heard}


def test_the_replay_is_faithful_on_plain_agent() -> None:
    plan = {load}
    run = run_replay(plan, Agent{audio})
    assert not run.divergences, [str(d) for d in run.divergences]


def test_{cls.lower()}_keeps_the_call() -> None:
    plan = {load}
    run = run_replay(plan, {cls}, app={agent_path not in LAB_AGENT_PATHS}{audio})
    assert run.outcome.passed, run.outcome.reasons
'''


def _imports(module: str, cls: str, recording: bool = False) -> str:
    lines = [
        *(["from pathlib import Path", ""] if recording else []),
        "from livekit.agents import Agent",
        "",
        "from resilient_agent.lab.replay import load_plan, run_replay",
    ]
    if recording:
        lines[-1:] = [
            "from resilient_agent.lab.replay import ReplayPlan, load_plan, run_replay",
            "from resilient_agent.lab.replay.recording import ReplayRecording, read_recording",
        ]
    if (module, cls) != ("livekit.agents", "Agent"):
        lines.append(f"from {module} import {cls}")
    return "\n".join(lines)


def write_test(
    report: Mapping[str, Any],
    path: Path,
    *,
    agent_path: str,
    redact: bool,
    source: str,
    recording: Path | None = None,
    hang_up_pad: float = 0.0,
) -> list[Path]:
    """Write the test of ``report`` at ``path``; with ``recording``, a copy of it beside.

    Returns:
        The files written.
    """
    kept = trimmed_report(report, recording=recording is not None)
    if redact:
        kept = redacted(kept)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = [path]
    audio = None
    if recording is not None:
        audio = path.with_suffix(recording.suffix or ".ogg")
        if audio.resolve() != recording.resolve():
            shutil.copyfile(recording, audio)
        written.append(audio)
    path.write_text(
        emitted_test_source(
            kept,
            agent_path=agent_path,
            source=source,
            recording=None if audio is None else audio.name,
            hang_up_pad=hang_up_pad,
        )
    )
    return written
