"""structlog for the app, rendered into stdlib records that LiveKit's log handlers format.

LiveKit owns the handlers: JSON in production, colors in dev, and in job processes a queue that
pickles each record to the worker. So structlog never renders here: it turns each event into a
stdlib ``LogRecord`` whose fields are record attributes, and LiveKit's formatter writes them out
as JSON fields next to its own ``level``, ``timestamp``, ``job_id`` and ``room``.
resilient-agent's own logs follow this configuration too (see its docs/observability.md).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["configure_logging"]

# ``logging`` raises if ``extra`` names a LogRecord attribute ("name", "args", "message", ...)
_RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
# ... except these, which render_to_log_kwargs passes to logging as keyword arguments
_LOG_KWARGS = frozenset({"exc_info", "stack_info", "stacklevel"})


def rename_reserved_keys(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Rename fields that collide with LogRecord attributes: ``name`` becomes ``name_``."""
    for key in [k for k in event_dict if k in _RESERVED and k not in _LOG_KWARGS]:
        event_dict[f"{key}_"] = event_dict.pop(key)
    return event_dict


def configure_logging() -> None:
    """Configure structlog for this process; call it once per process before logging."""
    structlog.configure(
        processors=[
            # room and job ids bound in the entrypoint
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            rename_reserved_keys,
            # no add_log_level or TimeStamper: LiveKit's formatter adds level and timestamp
            structlog.stdlib.render_to_log_kwargs,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
