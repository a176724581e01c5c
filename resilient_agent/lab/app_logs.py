"""Keeping an app's own log lines out of the lab's output (``--app-logs`` lets them through).

The lab prints its verdicts; an app under ``--agent`` logs as it would in production, through
the root logger's handlers (or Python's last-resort handler when it has none), and through
structlog, which prints to stdout until the app's entrypoint configures it, which the lab never
runs. For the run, the root logger gets a handler that drops every record, and an unconfigured
structlog a processor that drops every event; both are restored afterwards.
livekit's and the library's loggers are the lab's own business (:func:`.run.quiet_logs`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["app_logs_silenced"]


def _drop(logger: Any, method: str, event: Any) -> Any:
    """A structlog processor that drops every event."""
    import structlog

    raise structlog.DropEvent


@contextlib.contextmanager
def app_logs_silenced() -> Iterator[None]:
    """Drop the app's log records (stdlib and unconfigured structlog) while the block runs."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [logging.NullHandler()]
    structlog = sys.modules.get("structlog")
    configured_here = structlog is not None and not structlog.is_configured()
    if configured_here:
        assert structlog is not None
        structlog.configure(processors=[_drop])
    try:
        yield
    finally:
        root.handlers = saved
        if configured_here:
            assert structlog is not None
            structlog.reset_defaults()
