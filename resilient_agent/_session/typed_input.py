"""Typed input livekit refuses while a handoff drains, kept for the chain that wants it.

livekit refuses ``session.generate_reply(user_input=...)`` and ``interrupt()`` while the old
agent's activity drains. A middleware that keeps typed input (TurnKeeper) asks for it through
:meth:`~.state.MiddlewareContext.hold_input_through_handoff`; while one does, each handoff gets
fresh :class:`~.handoff_gates.HandoffGates` that hand such input to it instead of losing it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession

from .._engine.log import get_logger
from .._livekit.handoff_gates import HandoffGates
from .._livekit.interception import Interceptor

__all__ = ["HandoffInput"]

logger = get_logger("runtime")


class HandoffInput:
    """The keepers of typed input, and the gates of the handoff under way.

    Args:
        session: The session.
    """

    def __init__(self, session: AgentSession[Any]) -> None:
        self._session = session
        self._keepers: list[Callable[[str], None]] = []
        self._gates = Interceptor()

    def hold(self, keep: Callable[[str], None]) -> Callable[[], None]:
        """``keep`` gets the text of each input livekit refuses while a handoff drains."""
        self._keepers.append(keep)

        def release() -> None:
            if keep in self._keepers:
                self._keepers.remove(keep)

        return release

    def handoff_begins(self) -> None:
        """Gate the handoff that begins, if a chain keeps typed input."""
        if self._keepers:
            # fresh gates for each handoff: they stop deferring interrupts at its switch
            self.handoff_over()
            HandoffGates(self._session, self._keep_refused).install(self._gates)

    def handoff_over(self) -> None:
        """Put livekit's methods back: the handoff that led here is over."""
        self._gates.restore_all()

    def _keep_refused(self, text: str) -> None:
        keepers = self._keepers
        if keepers:
            keepers[-1](text)  # the active chain's keeper (the last to ask)
            return
        logger.warning(
            "user_input_lost",
            words=len(text.split()),
            why="livekit refused it during a handoff and no middleware keeps typed input",
        )
