"""Observability: structured records surviving LiveKit's log path, events, the call report."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
from typing import Any

import structlog
from livekit.agents.cli.log import JsonFormatter
from livekit.agents.ipc.log_queue import LogQueueListener
from livekit.agents.utils.aio import duplex_unix
from structlog.testing import capture_logs

from resilient_agent import ResilientAgent, get_logger
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import run_scenario


def test_importing_the_library_configures_nothing() -> None:
    code = (
        "import logging, structlog, resilient_agent, resilient_agent.middleware\n"
        "assert not structlog.is_configured()\n"
        "assert logging.getLogger().handlers == []\n"
        "assert logging.getLogger('resilient_agent').handlers == []\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


def test_races_and_the_call_summary_are_structured_records_without_transcripts() -> None:
    scenario = next(s for s in scenarios() if s.name == "lost_words/over_protected_say")
    with capture_logs() as logs:
        _world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed
    ours = [entry for entry in logs if entry.get("event") in {"race_detected", "race_handled"}]
    kinds = {(e["event"], e["kind"]) for e in ours}
    assert ("race_detected", "speech_withheld_from_stt") in kinds
    assert ("race_handled", "dropped_user_turn") in kinds
    call_ids = {e["call_id"] for e in ours}
    assert len(call_ids) == 1
    (summary,) = [e for e in logs if e.get("event") == "call_summary"]
    assert summary["call_id"] in call_ids
    assert summary["counters"] == {"words_recovered": 5, "dropped_turns_answered": 1}
    # nothing the caller said appears in any record
    said = set(scenario.utterances[0].words)
    for entry in logs:
        text = json.dumps(entry, default=str)
        assert not any(f'"{word}' in text or f" {word} " in text for word in said - {"can", "me"})


def test_the_call_report_api_matches_the_events() -> None:
    scenario = next(s for s in scenarios() if s.name == "vad/stuck_plain_agent")
    world, _ = run_scenario(scenario, ResilientAgent)
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None
    assert report.counters == {"watchdog_recoveries": 1}
    assert report.races == {"user_turn_stuck": 1}
    assert report.actions == {"user_turn_stuck:restarted_vad": 1}


def test_the_call_report_counts_every_kind_of_stall() -> None:
    scenario = next(s for s in scenarios() if s.name == "stall/lost_playout_report")
    world, _ = run_scenario(scenario, ResilientAgent)
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None
    assert report.counters["watchdog_recoveries"] == 1
    assert report.races["interrupted_speech_not_done"] == 1


_CHILD = """
import logging, socket, sys
from livekit.agents.ipc.log_queue import LogQueueHandler
from livekit.agents.utils.aio import duplex_unix
from resilient_agent._engine.log import get_logger

# a LiveKit job process: its only handler pickles records to the worker
handler = LogQueueHandler(duplex_unix._Duplex.open(socket.socket(fileno=int(sys.argv[1]))))
root = logging.getLogger()
root.handlers = [handler]
root.setLevel(logging.INFO)
log = get_logger("agent").bind(call_id="call_123", room="room-1")
log.info("race_handled", kind="dropped_user_turn", action="answered", name="TurnKeeper")
handler.close()
handler.thread.join()
"""


def test_fields_survive_livekits_job_process_log_path() -> None:
    parent_sock, child_sock = socket.socketpair()
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(JsonFormatter())
    target = logging.getLogger("resilient_agent.agent")
    target.addHandler(handler)
    target.setLevel(logging.INFO)

    def add_job_fields(record: logging.LogRecord) -> None:
        record.job_id = "AJ_1"

    listener = LogQueueListener(duplex_unix._Duplex.open(parent_sock), add_job_fields)
    listener.start()
    try:
        fd = child_sock.fileno()
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(fd)], pass_fds=[fd], timeout=60, check=False
        )
        child_sock.close()
        assert child.returncode == 0
    finally:
        listener.stop()
        target.removeHandler(handler)
    (line,) = output.getvalue().strip().splitlines()
    record: dict[str, Any] = json.loads(line)
    assert record["message"] == "race_handled"
    assert record["kind"] == "dropped_user_turn" and record["action"] == "answered"
    assert record["call_id"] == "call_123" and record["room"] == "room-1"
    assert record["name_"] == "TurnKeeper"  # a reserved LogRecord key, renamed not lost
    assert record["job_id"] == "AJ_1"


def test_an_app_that_configures_structlog_gets_our_records_through_its_chain() -> None:
    seen: list[dict[str, Any]] = []

    def keep(_logger: Any, _method: str, event_dict: dict[str, Any]) -> Any:
        seen.append(dict(event_dict))
        raise structlog.DropEvent

    structlog.configure(processors=[keep])
    try:
        get_logger("agent").bind(call_id="c").info("race_detected", kind="k")
    finally:
        structlog.reset_defaults()
    assert seen == [{"event": "race_detected", "call_id": "c", "kind": "k"}]
