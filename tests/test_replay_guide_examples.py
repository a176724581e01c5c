"""docs/replay.md's examples of what a replay reads from a report's evidence, run as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from resilient_agent.lab.cli import main

GUIDE = Path(__file__).parents[1] / "docs" / "replay.md"

REALTIME_AGENT_RECORD = "resilient-agent lab --quiet --agent livekit.agents:Agent --only 'realtime/gemini/(reply_cut_by_server_error|question_over_livekit_goodbye)$' --record reports"  # noqa: E501
REALTIME_CUT_REPLAY = (
    "resilient-agent replay reports/Agent/realtime__gemini__reply_cut_by_server_error.json"
)
REALTIME_BARGE_IN_REPLAY = (
    "resilient-agent replay reports/Agent/realtime__gemini__question_over_livekit_goodbye.json"
)
REALTIME_HUNG_RECORD = "resilient-agent lab --quiet --agent resilient_agent:ResilientAgent --only 'realtime/openai/livekit_goodbye_never_comes$' --record reports"  # noqa: E501
REALTIME_HUNG_REPLAY = "resilient-agent replay reports/ResilientAgent/realtime__openai__livekit_goodbye_never_comes.json --hang-up-pad 0.3"  # noqa: E501
PIPELINE_RECORD = "resilient-agent lab --quiet --agent resilient_agent:ResilientAgent --only 'stall/(llm_hangs|lost_playout_report)$' --record reports"  # noqa: E501
PIPELINE_HANG_REPLAY = "resilient-agent replay reports/ResilientAgent/stall__llm_hangs.json"
PIPELINE_PLAYOUT_REPLAY = (
    "resilient-agent replay reports/ResilientAgent/stall__lost_playout_report.json"
)
TYPED_RECORD = "resilient-agent lab --quiet --only 'lost_words/typed_while_caller_speaks_in_handoff$' --record reports"  # noqa: E501
TYPED_REPLAY = (
    "resilient-agent replay reports/Agent/lost_words__typed_while_caller_speaks_in_handoff.json"
)
VAD_RECORD = "resilient-agent lab --quiet --only 'vad/stuck_plain_agent$' --record reports"
VAD_REPLAY = (
    "resilient-agent replay reports/ResilientAgent/vad__stuck_plain_agent.json --hang-up-pad 0.3"
)


def _shown_after(command: str) -> list[list[str]]:
    """The output blocks the guide shows after the bash block holding ``command``."""
    text = GUIDE.read_text(encoding="utf-8")
    after = text.index("\n```\n", text.index(command)) + len("\n```\n")
    blocks = re.findall(r"```\n(.*?)```", text[after:], flags=re.S)
    return [[line for line in block.splitlines() if line != "..."] for block in blocks]


def _printed(commands: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    out = []
    for command in commands:
        main(shlex.split(command)[1:])
        out.append(capsys.readouterr().out)
    return "\n".join(out)


@pytest.mark.parametrize(
    ("record", "replays", "blocks"),
    [
        (REALTIME_AGENT_RECORD, [REALTIME_CUT_REPLAY, REALTIME_BARGE_IN_REPLAY], 2),
        (REALTIME_HUNG_RECORD, [REALTIME_HUNG_REPLAY], 1),
        (TYPED_RECORD, [TYPED_REPLAY], 1),
        (VAD_RECORD, [VAD_REPLAY], 1),
        (PIPELINE_RECORD, [PIPELINE_HANG_REPLAY, PIPELINE_PLAYOUT_REPLAY], 2),
    ],
)
def test_what_the_guide_shows_a_replay_reading_is_printed(
    record: str,
    replays: list[str],
    blocks: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    _printed([record], capsys)
    printed = _printed(replays, capsys)
    shown = _shown_after(replays[-1])
    if record == REALTIME_HUNG_RECORD:
        shown = _shown_after(REALTIME_CUT_REPLAY)[2:]
    for block in shown[:blocks]:
        for line in block:
            assert line in printed, (line, printed)
