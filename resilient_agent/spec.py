"""Lazy middleware specs: the class and its options, validated when the agent is built."""

from __future__ import annotations

import inspect
from typing import Any

from .errors import MiddlewareError
from .hooks import Middleware

__all__ = ["MiddlewareSpec", "build_middleware"]


class MiddlewareSpec:
    """``MiddlewareSpec(cls, **options)``: build ``cls(**options)`` later, validated now.

    Raises:
        MiddlewareError: ``cls`` is not a ``Middleware`` subclass, or an option is not one of
            its constructor's parameters.
    """

    def __init__(self, cls: type[Middleware], /, **options: Any) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Middleware)):
            raise MiddlewareError(
                repr(cls),
                "is not a Middleware subclass",
                fix="pass a class that subclasses resilient_agent.Middleware",
            )
        name = cls.name or cls.__name__
        signature = inspect.signature(cls)
        try:
            signature.bind(**options)
        except TypeError as exc:
            accepted = [p for p in signature.parameters if p not in ("self", "args", "kwargs")]
            raise MiddlewareError(
                name,
                f"bad options {sorted(options)} ({exc})",
                fix=f"use only these options: {', '.join(accepted) or 'none'}",
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
