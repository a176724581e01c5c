"""Hang up only when the farewell was heard: the first-party ``decide_shutdown`` policy."""

from __future__ import annotations

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    OptionChecker,
    ShutdownDecision,
    ShutdownRequest,
)

__all__ = ["ConditionalHangup"]


class ConditionalHangup(Middleware):
    """Keeps the call when the caller interrupted the farewell or spoke after it began.

    A request made while the farewell is still playing waits for it. A request with no farewell
    is judged from the moment it was made. Words the caller said that no reply has taken in
    yet also keep the call.

    Args:
        tail_pad_s: Seconds between the end of the farewell and the hang-up, so telephony
            buffers play the last syllable.
    """

    def __init__(self, *, tail_pad_s: float = 0.3) -> None:
        check = OptionChecker(self.display_name)
        self.tail_pad_s = check.number("tail_pad_s", tail_pad_s, ge=0, le=10)

    def decide_shutdown(
        self, ctx: MiddlewareContext, request: ShutdownRequest
    ) -> ShutdownDecision | None:
        """Wait for the farewell, then hang up unless the caller spoke."""
        farewell = request.farewell
        if farewell is not None and not farewell.handle.done():
            return ShutdownDecision.wait(farewell.handle, "farewell still playing")
        if farewell is not None and farewell.handle.interrupted:
            return ShutdownDecision.veto("the caller interrupted the farewell")
        since = farewell.created_at if farewell is not None else request.requested_at
        if ctx.state.user_spoke_since(since):
            return ShutdownDecision.veto("the caller spoke after the farewell began")
        if ctx.state.pending_words.any_undelivered():
            return ShutdownDecision.veto("the caller's last words are not answered yet")
        return ShutdownDecision.now("farewell heard", tail_pad_s=self.tail_pad_s)
