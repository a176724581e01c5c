"""The session's speeches as the core follows them: which tool made each, and when each ended."""

from __future__ import annotations

import time

from .._engine.requests import SpeechInfo

__all__ = ["SpeechRecord"]

# How many finished speeches' end times are kept (the shutdown gate looks at recent farewells).
_KEEP_DONE_TIMES = 64


class SpeechRecord:
    """The last speech each tool made, and the end times of recent speeches (by id)."""

    def __init__(self) -> None:
        self._last_by_tool: dict[str, SpeechInfo] = {}
        self._done_at: dict[str, float] = {}

    def created(self, info: SpeechInfo) -> None:
        """A speech was created (attributed to the tool whose body made it, if any)."""
        if info.tool is not None:
            self._last_by_tool[info.tool] = info

    def finished(self, info: SpeechInfo) -> None:
        """A speech is done (played out or interrupted)."""
        self._done_at[info.id] = time.time()
        if len(self._done_at) > _KEEP_DONE_TIMES:
            self._done_at.pop(next(iter(self._done_at)))

    def farewell_of(self, tool: str | None) -> SpeechInfo | None:
        """The last speech ``tool`` created in this session, if any."""
        return self._last_by_tool.get(tool) if tool is not None else None

    def done_at(self, speech_id: str) -> float | None:
        """When the speech ended (``time.time()``), if it did recently."""
        return self._done_at.get(speech_id)
