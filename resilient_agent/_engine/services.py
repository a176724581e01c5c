"""What one middleware offers the others of its session, found by type through the context.

Middleware never reach each other through ``ctx.agent.middleware``: the agent active now may be
a plain ``Agent`` (or a livekit task) served by the chain of the ``ResilientAgent`` before it,
which has no chain of its own. A middleware offers a service in its ``setup`` instead,
``ctx.provide(WordRecovery, self)``, and another asks for it when it needs it,
``ctx.service(WordRecovery)`` (None when no middleware of the session offers it). The kind is a
class the service is an instance of; the offer is withdrawn when the middleware that made it
closes (or sits the session out).
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["Services"]

_T = TypeVar("_T")


class Services:
    """The services middleware of one session offer, by kind."""

    def __init__(self) -> None:
        # kind -> (service, the middleware that offered it)
        self._offered: dict[type[Any], tuple[Any, object]] = {}

    def provide(self, kind: type[_T], service: _T, by: object) -> None:
        """Offer ``service`` as ``kind`` (replacing an earlier offer of that kind).

        Raises:
            TypeError: ``service`` is not an instance of ``kind``.
        """
        if not isinstance(service, kind):
            raise TypeError(f"{service!r} is offered as {kind.__name__} but is not one")
        self._offered[kind] = (service, by)

    def get(self, kind: type[_T]) -> _T | None:
        """The service offered as ``kind``, or None."""
        found = self._offered.get(kind)
        return None if found is None else found[0]

    def release(self, by: object) -> None:
        """Withdraw every offer ``by`` made."""
        self._offered = {k: v for k, v in self._offered.items() if v[1] is not by}
