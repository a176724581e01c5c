"""What a leaving chain hands the next one in the same session, and what the session shares.

A chain closes with ``reason="handoff"`` when the next ``ResilientAgent`` of the session enters:
each middleware may leave state for its successor with :meth:`Carried.carry` in its ``aclose``,
and the successor picks it up with :meth:`Carried.take` in its ``setup``. What nobody takes by
the end of the successor's setup is given to its ``on_untaken`` callback and logged, so words a
middleware carried are never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .log import get_logger

__all__ = ["Carried", "SessionObjects"]

logger = get_logger("carry")

_T = TypeVar("_T")


class Carried:
    """State in transit between two chains of one session, by key."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[Any, Callable[[Any], None] | None]] = {}

    def carry(self, key: str, value: Any, on_untaken: Callable[[Any], None] | None = None) -> None:
        """Leave ``value`` under ``key`` for the next chain (replacing what was left there).

        Args:
            key: Usually the middleware's name.
            value: What the successor takes.
            on_untaken: Called with ``value`` when no successor takes it (its chain lacks that
                middleware, or the session ends first); it logs what it drops.
        """
        self._items[key] = (value, on_untaken)

    def take(self, key: str) -> Any | None:
        """What the previous chain left under ``key`` (once), or None."""
        item = self._items.pop(key, None)
        return None if item is None else item[0]

    def drop_untaken(self, why: str) -> None:
        """Give what nobody took to its ``on_untaken`` callback and log each key."""
        items, self._items = self._items, {}
        for key, (value, on_untaken) in items.items():
            logger.info("carried_state_not_taken", key=key, why=why)
            if on_untaken is not None:
                try:
                    on_untaken(value)
                except Exception as exc:
                    logger.error("carried_state_release_failed", key=key, exc_info=exc)


class SessionObjects:
    """Objects middleware share for the whole session (one audio level meter, say)."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}

    def get_or_build(self, key: str, build: Callable[[], _T | None]) -> _T | None:
        """The session's object under ``key``, built on first use; None is not kept."""
        found = self._objects.get(key)
        if found is None:
            found = build()
            if found is not None:
                self._objects[key] = found
        return found

    def clear(self) -> list[Any]:
        """The session is over: the objects it shared, forgotten from now on."""
        objects = list(self._objects.values())
        self._objects.clear()
        return objects
