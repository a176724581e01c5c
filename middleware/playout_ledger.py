"""Which audio segments the session's output has not reported as played out yet.

livekit waits for the audio output's ``playback_finished`` report after it clears an interrupted
speech, with no bound of its own but the 5 s INTERRUPTION_TIMEOUT. A sink that stops the audio
and loses that report (a network stall in the playout path) holds the caller's next answer. The
ledger counts captured segments against reports, through public API only, so the watchdog can
tell that case from a speech that waits for a running tool, and report on the sink's behalf.
"""

from __future__ import annotations

from typing import Any

from livekit.agents.voice.io import AudioOutput

from resilient_agent import Middleware, MiddlewareContext, get_logger, has_capability

__all__ = ["PlayoutLedger", "playout_ledger_supported"]

logger = get_logger("middleware.playout_ledger")


def playout_ledger_supported(output: AudioOutput) -> bool:
    """Whether ``output`` counts its captured segments (livekit 1.7+); reported once if not."""
    return has_capability(
        output,
        "captured_playout_segments",
        feature="Watchdog playout ledger",
        livekit_change="AudioOutput.captured_playout_segments, added in livekit-agents 1.7",
    )


class PlayoutLedger:
    """Counts the playout reports of one audio output.

    Args:
        ctx: The session's context: the listeners go through its fault boundary.
        by: The middleware the ledger reports for (a failing listener is named after it).
        output: The session's audio output (the top of livekit's output chain).
        clock: The loop clock, to estimate how far a cleared segment played.
    """

    def __init__(
        self, ctx: MiddlewareContext, by: Middleware, output: AudioOutput, clock: Any
    ) -> None:
        self.output = output
        self._clock = clock
        self._captured_before = output.captured_playout_segments
        self._reports = 0
        self._started_at: float | None = None
        # inside the fault boundary, under the middleware's name
        self._stop_listening = (
            ctx.listen(output, "playback_started", self._on_started, by=by),
            ctx.listen(output, "playback_finished", self._on_finished, by=by),
        )

    def detach(self) -> None:
        """Stop listening to the output."""
        for stop in self._stop_listening:
            stop()

    def _on_started(self, _ev: object) -> None:
        self._started_at = self._clock()

    def _on_finished(self, _ev: object) -> None:
        self._reports += 1
        self._started_at = None
        if self.unreported < 0:
            # the report of a segment that was already playing when we attached
            self._captured_before -= 1

    @property
    def playing(self) -> bool:
        """Whether a segment is playing out now: started, and its playout not reported yet."""
        return self._started_at is not None and self.unreported > 0

    @property
    def unreported(self) -> int:
        """Segments captured since attaching whose playout was never reported."""
        return self.output.captured_playout_segments - self._captured_before - self._reports

    def report_cleared_segment(self) -> bool:
        """Report the oldest unreported segment as interrupted, as the sink should have.

        Returns:
            False when every segment was reported (nothing to release).
        """
        if self.unreported <= 0:
            return False
        started = self._started_at
        position = max(self._clock() - started, 0.0) if started is not None else 0.0
        self.output.on_playback_finished(playback_position=position, interrupted=True)
        logger.warning(
            "playout_reported_for_sink",
            output=self.output.label,
            playback_position=round(position, 2),
            why="the audio output stopped a cleared segment but never reported its playout",
        )
        return True
