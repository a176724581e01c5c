"""Which middleware instance runs in each session, without copying anything.

* A ``MiddlewareSpec`` is built (and so validated) when the agent is built; that instance runs
  the agent's first session, and every later session gets a new one from the spec.
* An instance the app passes is the live one, in every session of the agent: a flag the app
  sets on it is seen at once, and a lock or a client it holds is used as is. It keeps
  per-session state in ``setup`` (which runs at the start of each session). It may be live in
  one session at a time; a second session that would share it runs without it (reported).
* ``Middleware.for_session()`` can still give another instance per session.

``agent.middleware`` is a :class:`MiddlewareView` of the live instances: ``agent.middleware[0]``
or ``agent.middleware["TurnKeeper"]``.

Which session an app-given instance is live in is written on the instance itself (the claim of
the :class:`SessionInstances` that runs it), not in a registry of the process: it lives and dies
with the instance, and two processes' (or two tests') sessions never see each other's claims.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from .chain import ErrorReporter, MiddlewareChain
from .errors import MiddlewareError
from .hooks import Middleware
from .spec import MiddlewareSpec, build_middleware

__all__ = ["MiddlewareView", "SessionInstances"]

# the attribute an app-given instance carries while it is live in a session: the claim (the
# SessionInstances running it). The name is the library's, out of the way of the app's own.
_CLAIM = "_resilient_agent_live_in"


class MiddlewareView(Sequence[Middleware]):
    """The chain's instances in dispatch order; ``view["Name"]`` finds one by its name."""

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self._items = tuple(middleware)

    @overload
    def __getitem__(self, key: int) -> Middleware: ...

    @overload
    def __getitem__(self, key: slice) -> tuple[Middleware, ...]: ...

    @overload
    def __getitem__(self, key: str) -> Middleware: ...

    def __getitem__(self, key: int | slice | str) -> Middleware | tuple[Middleware, ...]:
        """By position, or by ``display_name``.

        Raises:
            KeyError: No middleware has that name (the message lists the names there are).
        """
        if not isinstance(key, str):
            return self._items[key]
        for mw in self._items:
            if mw.display_name == key:
                return mw
        names = ", ".join(mw.display_name for mw in self._items) or "none"
        raise KeyError(f"no middleware named {key!r} in this chain (there are: {names})")

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Middleware]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"MiddlewareView({[mw.display_name for mw in self._items]})"


class SessionInstances:
    """The agent's middleware recipes: the prototypes, and each session's live instances.

    Raises:
        MiddlewareError: An entry is invalid (at construction, like every configuration error).
    """

    def __init__(self, entries: Sequence[Middleware | MiddlewareSpec]) -> None:
        built = [build_middleware(entry) for entry in entries]
        self._spec_of = {
            id(mw): entry
            for mw, entry in zip(built, entries, strict=True)
            if isinstance(entry, MiddlewareSpec)
        }
        self.prototype = MiddlewareChain(built)
        self._unused = set(self._spec_of)
        self._claimed: list[Middleware] = []

    def for_session(self, on_error: ErrorReporter) -> MiddlewareChain:
        """This session's chain; an instance that cannot run in it is reported and left out."""
        live: list[Middleware] = []
        for mw in self.prototype.middleware:
            try:
                instance = self._instance(mw)
            except Exception as exc:
                on_error(mw, "for_session", exc, "disabled_for_session")
                continue
            if instance is not None:
                live.append(instance)
            else:
                busy = MiddlewareError(
                    mw.display_name,
                    "this instance is already live in another session",
                    fix="pass a MiddlewareSpec(cls, ...) so each session gets its own instance",
                    hook="session",
                )
                on_error(mw, "session", busy, "disabled_for_session")
        return MiddlewareChain(live, on_error=on_error)

    def release(self) -> None:
        """The session is over: the app's instances may run in another one."""
        for claimed in self._claimed:
            if vars(claimed).get(_CLAIM) is self:
                object.__delattr__(claimed, _CLAIM)
        self._claimed.clear()

    def _instance(self, mw: Middleware) -> Middleware | None:
        spec = self._spec_of.get(id(mw))
        if spec is not None:
            if id(mw) in self._unused:
                self._unused.discard(id(mw))
                return mw
            return spec.build()
        if vars(mw).get(_CLAIM) is not None:
            return None
        instance = mw.for_session()
        # past a frozen dataclass's __setattr__: the claim is the library's, not a field
        object.__setattr__(mw, _CLAIM, self)
        self._claimed.append(mw)
        return instance
