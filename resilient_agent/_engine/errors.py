"""Errors raised when middleware is misconfigured, always at construction, never mid-call."""

from __future__ import annotations

__all__ = ["MiddlewareError", "MiddlewareNotUsed", "PluginError"]


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


class PluginError(MiddlewareError):
    """A middleware plugin could not be loaded; raised when the agent is built or prewarmed.

    The plugin is unknown, its entry point does not import or resolve, it is not a middleware, or
    it was written for another middleware API version. ``middleware`` holds the plugin's name.

    Attributes:
        plugin: The plugin's name (its entry point name).
        distribution: ``"name version"`` of the distribution that declares the entry point, or
            None when the name is not installed at all.
    """

    def __init__(
        self, plugin: str, problem: str, *, fix: str, distribution: str | None = None
    ) -> None:
        super().__init__(plugin, problem, fix=fix, hook="plugin")
        source = f" (from {distribution})" if distribution else ""
        # the plugin's own wording replaces MiddlewareError's "middleware 'x', hook:" prefix
        self.args = (f"plugin {plugin!r}{source}: {problem}. Fix: {fix}",)
        self.plugin = plugin
        self.distribution = distribution
