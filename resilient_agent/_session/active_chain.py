"""Which chain runs the session's hooks, and the hand-over from one chain to the next.

At a handoff to another ``ResilientAgent`` the old chain closes before the new one is built, so
the app's own middleware instances the old one ran are free for the new one. livekit goes on
emitting events meanwhile: they wait in a backlog and reach the new chain's queues in order,
before anything the new chain sees later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .chain_run import ChainRun

__all__ = ["ActiveChain"]


Submit = Callable[..., None]
"""``(hook, *args, urgent=False)``: queue a notify hook (:meth:`.ChainRun.submit`)."""


def _nowhere(hook: str, *args: Any, urgent: bool = False) -> None:
    """No chain to queue for, and no hand-over to keep it for: dropped."""


class ActiveChain:
    """The session's active :class:`~.chain_run.ChainRun`, and the events of a hand-over."""

    def __init__(self) -> None:
        self.run: ChainRun | None = None
        """The active chain's run (None before the first is set up, and during a hand-over);
        set by :meth:`hand_over` only."""
        self._backlog: list[tuple[str, tuple[Any, ...], bool]] | None = None
        self._handing_over: asyncio.Lock | None = None
        self.submit: Submit = _nowhere
        """Queue ``hook`` for the active chain, or for the next one during a hand-over.

        The active run's own ``submit`` while there is one (no step between the session's
        listeners and the chain for every event), the backlog's during a hand-over, else
        nothing: kept so by :meth:`_route` at each change.
        """

    def _route(self) -> None:
        if self.run is not None:
            self.submit = self.run.submit
        elif self._backlog is not None:
            self.submit = self._keep
        else:
            self.submit = _nowhere

    def _keep(self, hook: str, *args: Any, urgent: bool = False) -> None:
        assert self._backlog is not None
        self._backlog.append((hook, args, urgent))

    async def hand_over(
        self,
        build: Callable[[], ChainRun],
        *,
        begun: Callable[[], None],
        old_closed: Callable[[], None],
    ) -> ChainRun:
        """Close the active chain (a handoff), then start the one ``build`` makes.

        Args:
            build: Makes the new chain's run; called once the old chain has closed.
            begun: Told as the hand-over begins (after any hand-over before it).
            old_closed: Told when the old chain has closed (before ``build``).
        """
        if self._handing_over is None:
            self._handing_over = asyncio.Lock()
        async with self._handing_over:
            begun()
            old, self.run = self.run, None
            self._route()
            if old is not None:
                # events from here on wait for the new chain's queues
                self._backlog = []
                self._route()
                await old.close("handoff")
                old_closed()
            new = build()
            new.start_queues()
            new.submit("on_session_start")
            backlog, self._backlog = self._backlog, None
            self.run = new
            self._route()
            for hook, args, urgent in backlog or ():
                new.submit(hook, *args, urgent=urgent)
            await new.set_up()
            return new
