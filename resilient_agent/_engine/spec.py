"""Lazy middleware specs: the class and its options, validated when the agent is built."""

from __future__ import annotations

import inspect
from typing import Any

from .errors import MiddlewareError
from .hooks import Middleware
from .options import OptionChecker, close_match

__all__ = ["MiddlewareSpec", "build_middleware", "middleware_entries"]


class MiddlewareSpec:
    """``MiddlewareSpec(cls, **options)``: build ``cls(**options)`` later, validated now.

    The options' names are checked now; their values when the spec is built, which
    ``ResilientAgent(...)`` does at construction, so a bad value never reaches a call.

    Raises:
        MiddlewareError: ``cls`` is not a ``Middleware`` subclass, or an option is not one of
            its constructor's parameters.
    """

    def __init__(self, cls: type[Middleware], /, **options: Any) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Middleware)):
            fix = "pass a class that subclasses resilient_agent.Middleware"
            if isinstance(cls, Middleware):
                fix = (
                    f"pass the class, MiddlewareSpec({type(cls).__name__}, **options), or put "
                    "the instance itself in middleware=[...]"
                )
            elif isinstance(cls, str):
                fix += f" (the class itself, imported, not its name {cls!r})"
            OptionChecker("MiddlewareSpec").fail(
                "cls", cls, "is not a Middleware subclass", fix=fix
            )
        name = cls.name or cls.__name__
        signature = inspect.signature(cls)
        try:
            signature.bind(**options)
        except TypeError as exc:
            accepted = [p for p in signature.parameters if p not in ("self", "args", "kwargs")]
            typos = [
                f"did you mean {close!r} for {given!r}? "
                for given in options
                if given not in accepted and (close := close_match(given, accepted))
            ]
            raise MiddlewareError(
                name,
                f"bad options {sorted(options)} ({exc})",
                fix=f"{''.join(typos)}use only these options: {', '.join(accepted) or 'none'}",
                hook="options",
            ) from exc
        self.cls = cls
        self.options = dict(options)

    def build(self) -> Middleware:
        """A new instance."""
        return self.cls(**self.options)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"MiddlewareSpec({self.cls.__name__}{', ' if opts else ''}{opts})"


def build_middleware(entry: Middleware | MiddlewareSpec) -> Middleware:
    """An instance from an instance or a spec; anything else is left to validation."""
    return entry.build() if isinstance(entry, MiddlewareSpec) else entry


def middleware_entries(middleware: object) -> list[Middleware | MiddlewareSpec]:
    """``ResilientAgent(middleware=...)`` checked: a list of middleware instances and specs.

    Raises:
        OptionError: ``middleware`` is a string, a single middleware, a class, or not a list,
            or an entry is not a ``Middleware`` instance or a ``MiddlewareSpec``.
    """
    check = OptionChecker("ResilientAgent")
    example = "middleware=[ToolGuard(), MiddlewareSpec(Watchdog, quiet_s=3.0)]"
    if isinstance(middleware, (Middleware, MiddlewareSpec)):
        check.fail(
            "middleware",
            middleware,
            "is a single middleware, not a list",
            fix=f"put it in a list: middleware=[{_entry_name(middleware)}(...)]",
        )
    if isinstance(middleware, type) and issubclass(middleware, Middleware):
        check.fail(
            "middleware",
            middleware,
            "is a middleware class, not a list of middleware",
            fix=f"put an instance in a list: middleware=[{middleware.__name__}()]",
        )
    if isinstance(middleware, str):
        check.fail(
            "middleware",
            middleware,
            "is a string, not a list of middleware",
            fix=f"pass instances or specs, e.g. {example}; plugin names go in plugins=[...]",
        )
    entries: list[Middleware | MiddlewareSpec] = []
    listed: list[object] = check.sequence(
        "middleware", middleware, fix=f"pass a list, e.g. {example}"
    )
    for index, entry in enumerate(listed):
        if isinstance(entry, (Middleware, MiddlewareSpec)):
            entries.append(entry)
            continue
        if isinstance(entry, type) and issubclass(entry, Middleware):
            fix = f"pass an instance, {entry.__name__}(), or MiddlewareSpec({entry.__name__}, ...)"
        elif isinstance(entry, str):
            fix = (
                "pass the middleware itself (e.g. ToolGuard() from resilient_agent.middleware); "
                "plugin names go in plugins=[...]"
            )
        else:
            fix = "pass instances of resilient_agent.Middleware subclasses or MiddlewareSpecs"
        check.fail(
            f"middleware[{index}]", entry, "is not a Middleware or a MiddlewareSpec", fix=fix
        )
    return entries


def _entry_name(entry: Middleware | MiddlewareSpec) -> str:
    return entry.cls.__name__ if isinstance(entry, MiddlewareSpec) else type(entry).__name__
