"""The agents of a recorded call and how they handed it over (``agent_handoff`` items).

livekit adds an ``agent_handoff`` item to the chat (and a ``conversation_item_added`` event)
each time another agent takes the call: the first agent, an ``AgentTask`` awaited by a tool or
by another task's ``on_enter`` (a ``TaskGroup``'s subtasks), the agent it hands back to when the
task completes, and a plain handoff (a tool returning an agent, or ``session.update_agent``).
The report does not say which of these a handoff was; the events' order does:

- a handoff while a tool of the agent is running (it started and has not ended) is a task that
  tool awaits; a handoff from a task to another while no tool of the task runs is a subtask of
  its ``on_enter``; a handoff back to the agent that awaited a task is that task completing,
  through the task's tool that ended just before it, or on its own (a ``TaskGroup`` after its
  last subtask), or never (cancelled when the session closed);
- any other handoff is plain: through the tool of the agent that ended just before it (a tool
  returning the agent), or that ended earlier with nothing to reply (a bare handoff) and the
  agent's ``on_exit`` took the time between, or at its time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Handoff", "TaskEntry", "WorkflowReader", "every_task"]

# a handoff this close after a tool ended followed that tool (livekit hands over as it ends)
_SAME_MOMENT_S = 1e-3

_Ended = tuple[str, str | None, float]
"""A tool call that ended: its id, its agent, when."""


@dataclass(frozen=True)
class Handoff:
    """One ``agent_handoff``: another agent took the call.

    Attributes:
        at: Seconds from the start of the call.
        old: The agent that had it (None for the first agent).
        new: The agent that took it.
    """

    at: float
    old: str | None
    new: str


@dataclass(frozen=True)
class TaskEntry:
    """An ``AgentTask`` awaited by a tool run or by another task's ``on_enter``.

    Attributes:
        agent: The task's agent id.
        offset: Seconds after its awaiter started (the tool run, or the task's entry; after the
            previous subtask returned, for a task's later subtasks) that it was entered.
        completes_after: Seconds after its entry (after its last subtask returned, when it
            had any) that it completed; None if it never did (cancelled at the close).
        by_tool: One of its own tool runs completed it as it ended (``self.complete``).
        subtasks: The tasks its ``on_enter`` awaited, in order.
        entered_at: Seconds from the start of the call when it was entered.
        lasted: Seconds from its entry to its completion; None if it never completed.
    """

    agent: str
    offset: float
    completes_after: float | None
    by_tool: bool = False
    subtasks: tuple[TaskEntry, ...] = ()
    entered_at: float = 0.0
    lasted: float | None = None


def every_task(tasks: Sequence[TaskEntry]) -> list[TaskEntry]:
    """``tasks`` and their subtasks, at every depth."""
    return [t for task in tasks for t in (task, *every_task(task.subtasks))]


@dataclass
class _OpenTask:
    agent: str
    parent: str
    entered: float
    offset: float
    call_id: str | None
    subtasks: list[TaskEntry] = field(default_factory=list)
    last_returned: float | None = None
    completed: float | None = None
    by_tool: bool = False

    def frozen(self, closed_at: float | None) -> TaskEntry:
        done = self.completed
        if done is not None and closed_at is not None and done >= closed_at - _SAME_MOMENT_S:
            done = None  # handed back as the session closed: cancelled, not completed
        since = self.last_returned if self.subtasks and self.last_returned else self.entered
        return TaskEntry(
            agent=self.agent,
            offset=round(self.offset, 3),
            completes_after=None if done is None else round(done - since, 3),
            by_tool=self.by_tool and done is not None,
            subtasks=tuple(self.subtasks),
            entered_at=round(self.entered, 3),
            lasted=None if done is None else round(done - self.entered, 3),
        )


@dataclass
class WorkflowReader:
    """Reads the handoffs of a report in event order (fed by the plan's reader).

    Attributes:
        first: The first agent's id (None when the report has no handoff).
        current: The agent that has the call.
        handoffs: Every handoff, in order.
        tasks: Per tool call id: the tasks that run awaited, in order.
        returned_by: Tool call ids that returned the agent of a plain handoff, to that agent.
        exit_after: Tool call ids that returned an agent, to the seconds between their end and
            the handoff (the old agent's ``on_exit``).
        timed: Plain handoffs no tool made: (seconds, the new agent).
        completers: Tool call ids that completed their task.
    """

    first: str | None = None
    current: str | None = None
    handoffs: list[Handoff] = field(default_factory=list)
    tasks: dict[str, list[TaskEntry]] = field(default_factory=dict)
    returned_by: dict[str, str] = field(default_factory=dict)
    exit_after: dict[str, float] = field(default_factory=dict)
    timed: list[tuple[float, str]] = field(default_factory=list)
    completers: set[str] = field(default_factory=set)
    _open: list[_OpenTask] = field(default_factory=list)
    _pending: list[tuple[_OpenTask, _OpenTask | None]] = field(default_factory=list)

    def handoff(
        self,
        at: float,
        old: str | None,
        new: str,
        running: dict[str, float],
        last_ended: _Ended | None,
        bare: _Ended | None = None,
    ) -> None:
        """One ``agent_handoff`` item.

        Args:
            at: Its time.
            old: The agent that had the call.
            new: The agent that takes it.
            running: The tool calls of ``old`` still running: call id to start time.
            last_ended: The last tool call that ended: (call id, its agent, when).
            bare: The last tool call of ``old`` that ended since the last handoff with
                nothing for the LLM to reply to (a tool returning an agent), if any.
        """
        self.handoffs.append(Handoff(round(at, 3), old, new))
        self.current = new
        if old is None:
            self.first = self.first or new
            return
        just_ended = (
            last_ended
            if last_ended is not None
            and last_ended[1] == old
            and at - last_ended[2] <= _SAME_MOMENT_S
            else None
        )
        top = self._open[-1] if self._open else None
        if top is not None and top.agent == old and top.parent == new:
            self._complete(top, at, just_ended)
            return
        if just_ended is not None and just_ended[0] not in self.completers:
            self.returned_by[just_ended[0]] = new  # the tool returned the agent
            return
        if running:
            call_id, started = max(running.items(), key=lambda kv: kv[1])
            self._enter(_OpenTask(new, old, at, at - started, call_id))
            return
        if top is not None and top.agent == old:
            since = top.last_returned if top.last_returned is not None else top.entered
            self._enter(_OpenTask(new, old, at, at - since, None))
            return
        if bare is not None and bare[0] not in self.returned_by:
            self.returned_by[bare[0]] = new
            self.exit_after[bare[0]] = round(at - bare[2], 3)
            return
        self.timed.append((round(at, 3), new))

    def _enter(self, task: _OpenTask) -> None:
        self._open.append(task)

    def _complete(self, task: _OpenTask, at: float, just_ended: _Ended | None) -> None:
        self._open.pop()
        task.completed = at
        if just_ended is not None:
            task.by_tool = True
            self.completers.add(just_ended[0])
        parent = self._open[-1] if self._open and self._open[-1].agent == task.parent else None
        if task.call_id is None and parent is not None:
            parent.last_returned = at
        self._pending.append((task, parent))

    def entries(self, closed_at: float | None) -> None:
        """Freeze every task read (still open ones never completed) into :attr:`tasks`."""
        for task in reversed(self._open):
            parent = self._open[self._open.index(task) - 1] if self._open.index(task) else None
            self._pending.append((task, parent if task.call_id is None else None))
        self._open.clear()
        # a subtask is frozen before its parent (it completed first)
        for task, parent in self._pending:
            entry = task.frozen(closed_at)
            if task.call_id is not None:
                self.tasks.setdefault(task.call_id, []).append(entry)
            elif parent is not None:
                parent.subtasks.append(entry)
        self._pending.clear()
