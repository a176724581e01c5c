"""Errors raised when middleware is misconfigured, always at construction, never mid-call."""

from __future__ import annotations

__all__ = ["MiddlewareError", "MiddlewareNotUsed"]


class MiddlewareError(Exception):
    """A middleware, hook or option is invalid.

    Attributes:
        middleware: The middleware's name.
        hook: The hook or option concerned, if any.
        fix: What to change.
    """

    def __init__(self, middleware: str, problem: str, *, fix: str, hook: str | None = None):
        where = f"middleware {middleware!r}" + (f", {hook}" if hook else "")
        super().__init__(f"{where}: {problem}. Fix: {fix}")
        self.middleware = middleware
        self.hook = hook
        self.fix = fix


class MiddlewareNotUsed(Exception):
    """Raised by :meth:`Middleware.setup` to leave a middleware out of this session's chain."""
