"""The library's logging: structured stdlib records, never any configuration of its own.

Importing ``resilient_agent`` configures neither ``logging`` nor structlog and adds no handler.
Records go to stdlib loggers under ``resilient_agent.*`` with their fields as ``extra``, so
LiveKit's JSON logs (and its job-process log forwarding, which pickles records) carry them as
fields. When the app has configured structlog, the library logs through the app's configuration
instead, so both agree (see docs/observability.md). A tool that reports races itself (the lab)
can silence the library for a block with :func:`library_logs_silenced`, whatever the app
configured.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, MutableMapping
from contextvars import ContextVar
from typing import Any

import structlog

__all__ = ["get_logger", "library_logs_silenced"]

# a context variable, so the tasks a silenced block starts (the session's) are silenced too
_SILENCED: ContextVar[bool] = ContextVar("resilient_agent_logs_silenced", default=False)

# LogRecord attributes a field must not overwrite; exc_info and friends are meant for logging
_RESERVED = (frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}) - {
    "exc_info",
    "stack_info",
    "stacklevel",
}


def _rename_reserved(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    # a field named like a LogRecord attribute ("name", "args") would make logging raise
    for key in [k for k in event_dict if k in _RESERVED]:
        event_dict[f"{key}_"] = event_dict.pop(key)
    return event_dict


class _LibraryLogger:
    """Logs through the app's structlog configuration if there is one, else straight to stdlib."""

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}
        self._own = structlog.wrap_logger(
            structlog.stdlib.LoggerFactory()(name),
            processors=[
                structlog.contextvars.merge_contextvars,
                _rename_reserved,
                structlog.stdlib.render_to_log_kwargs,
            ],
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    def bind(self, **fields: Any) -> _LibraryLogger:
        """A logger that adds ``fields`` to every record."""
        return _LibraryLogger(self._name, {**self._context, **fields})

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(self._name)
        return self._own

    def _log(self, method: str, event: str, fields: dict[str, Any]) -> None:
        if _SILENCED.get():
            return
        getattr(self._target(), method)(event, **{**self._context, **fields})

    def debug(self, event: str, **fields: Any) -> None:
        """Log at DEBUG."""
        self._log("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log at INFO."""
        self._log("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log at WARNING."""
        self._log("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log at ERROR (pass ``exc_info=exc`` for a traceback)."""
        self._log("error", event, fields)


def get_logger(name: str) -> _LibraryLogger:
    """The logger for ``resilient_agent.<name>``."""
    return _LibraryLogger(f"resilient_agent.{name}")


@contextlib.contextmanager
def library_logs_silenced() -> Iterator[None]:
    """Drop the library's log records while the block (and every task it starts) runs.

    Silencing the ``resilient_agent`` stdlib loggers is not enough: an app that configured
    structlog with its own printer gets the library's records through that printer.
    """
    token = _SILENCED.set(True)
    try:
        yield
    finally:
        _SILENCED.reset(token)
