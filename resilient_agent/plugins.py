"""Middleware plugins: third-party middleware found by entry point and loaded by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .hooks import Middleware
    from .spec import MiddlewareSpec

__all__ = ["load_plugins"]


def load_plugins(names: Sequence[str]) -> list[Middleware | MiddlewareSpec]:
    """Load the named plugins, in order (none yet: plugin discovery is not built)."""
    if names:
        from .errors import MiddlewareError

        raise MiddlewareError(
            ", ".join(names),
            "plugins are not supported by this version",
            fix="pass the middleware instances through middleware=[...] instead",
            hook="plugins",
        )
    return []
