"""The one place the library's events are counted, traced, logged and emitted.

Every race, action and failure of a session becomes one :class:`~.events.ResilientEvent`: the
call report counts it, the current livekit span carries it, one structured log record tells it,
and the ``events`` emitter of the agent whose chain runs (and of the agent the call started
with) emits it.
"""

from __future__ import annotations

from typing import Any, Protocol

from livekit.agents import AgentSession, get_job_context, utils

from .._engine.events import (
    MiddlewareErrorEvent,
    ResilientEvent,
    ResilientEventTypes,
    UnknownToolEvent,
)
from .._engine.log import get_logger
from .._engine.state import Named, name_of
from .._engine.tool_names import fix_for
from .report import CallReport, CallReporter
from .tracing import RaceTelemetry

__all__ = ["EventHub", "EventOwner", "session_fields"]

# the records keep the name they had when the runtime wrote them
logger = get_logger("runtime")


class EventOwner(Protocol):
    """An agent whose ``events`` tell what the library saw and did: a ``ResilientAgent``."""

    events: utils.EventEmitter[ResilientEventTypes]


def session_fields(call_id: str) -> dict[str, str]:
    """The ids every record of this session carries (room and job when a job runs).

    Raises:
        Exception: The job context is a stand-in without ``job``/``room``; the caller reports
            it and logs with the call id alone.
    """
    fields = {"call_id": call_id}
    try:
        job = get_job_context()
    except RuntimeError:
        return fields
    fields["job_id"] = job.job.id
    fields["room"] = job.room.name or job.job.room.name
    return fields


class EventHub:
    """Counts, traces, logs and emits one session's events.

    Args:
        session: The session (its spans carry the races).
        root: The agent the call started with: its ``events`` tell the whole call.
    """

    def __init__(self, session: AgentSession[Any], root: EventOwner) -> None:
        self.reporter = CallReporter(utils.shortuuid("call_"))
        self.telemetry = RaceTelemetry(session, self.report)
        self.log = logger.bind(call_id=self.reporter.call_id)
        self.root = root
        self.owner = root
        """The agent whose chain runs (it hears every event, as ``root`` does)."""

    def bind_job_fields(self, fallback: Named | str) -> None:
        """Log with the job's and room's ids from now on (the call id alone without a job)."""
        try:
            self.log = logger.bind(**session_fields(self.reporter.call_id))
        except Exception as exc:
            self.report_error(fallback, "log_fields", exc, "logged_with_call_id_only")

    def emit(self, event: ResilientEvent, *, exc: BaseException | None = None) -> None:
        """Count, trace, log and emit ``event``, to the running agent and the call's first."""
        self.reporter.record(event)
        self.telemetry.record(event)  # on livekit's current span, and measured
        # one structured record per race, action and failure, beside the event on our emitter
        fields = event.model_dump(exclude={"type", "created_at"})
        if isinstance(event, MiddlewareErrorEvent):
            self.log.error(event.type, exc_info=exc, **fields)
        elif isinstance(event, UnknownToolEvent):
            self.log.warning(event.type, fix=fix_for(event), **fields)
        else:
            self.log.info(event.type, **fields)
        self.owner.events.emit(event.type, event)
        if self.root is not self.owner:
            self.root.events.emit(event.type, event)

    def report_error(
        self, mw: Named | str, hook: str, exc: BaseException, action: str = "continued_without_it"
    ) -> None:
        """One ``middleware_error`` event for a failing piece, named."""
        event = MiddlewareErrorEvent(
            middleware=name_of(mw), hook=hook, error=repr(exc), action=action
        )
        self.emit(event, exc=exc)

    def report(self) -> CallReport:
        """What the chain saw and did in this session so far."""
        return self.reporter.report()
