"""livekit's count of unrecoverable TTS errors in a row: one count per session, across handoffs.

livekit (``AgentSession._on_error``) closes the session at the unrecoverable TTS error after
``conn_options.max_unrecoverable_errors`` in a row, and starts counting again when the agent
speaks. It counts per session, whatever agent is active: a count kept by one middleware
instance would start again at 0 with the next agent's chain (a handoff), and miss the errors
livekit reports while the chains change hands. :class:`TtsFailureCount` is the session's one
count (``ctx.shared``), fed by the session's ``error`` and ``agent_state_changed`` events from the
first middleware that asks until the session ends, whichever agent is active meanwhile.
"""

from __future__ import annotations

from livekit.agents import tts
from livekit.agents.voice import events as lk_events

from resilient_agent import MiddlewareContext

__all__ = ["TtsFailureCount"]

_KEY = "TtsFailureCount"


class TtsFailureCount:
    """Unrecoverable TTS errors since the agent last spoke, as livekit counts them."""

    display_name = "TtsFailureCount"
    """The name a failing listener of the count is reported under."""

    def __init__(self, max_failures: int) -> None:
        self.failures = 0
        self._max_failures = max_failures

    @classmethod
    def of(cls, ctx: MiddlewareContext) -> TtsFailureCount:
        """The session's count, listening to the session from the first ask until its end."""

        def build() -> TtsFailureCount:
            count = cls(ctx.session.conn_options.max_unrecoverable_errors)
            # owned by the count, not by the middleware asking: a handoff does not remove them
            ctx.listen(ctx.session, "error", count._on_error, by=count)
            ctx.listen(ctx.session, "agent_state_changed", count._on_agent_state, by=count)
            return count

        found = ctx.shared(_KEY, build)
        assert found is not None
        return found

    @property
    def may_fail_again(self) -> bool:
        """Whether one more unrecoverable TTS error leaves the session open."""
        return self.failures < self._max_failures

    def _on_error(self, ev: lk_events.ErrorEvent) -> None:
        if isinstance(ev.error, tts.TTSError) and not ev.error.recoverable:
            self.failures += 1

    def _on_agent_state(self, ev: lk_events.AgentStateChangedEvent) -> None:
        if ev.new_state == "speaking":
            self.failures = 0
