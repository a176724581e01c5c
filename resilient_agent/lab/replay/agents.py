"""The agents of a replayed call: the one that took the call, and those it handed over to.

The first agent is built on the base class that runs the replay (a plain ``Agent`` for the
fidelity, ``ResilientAgent`` or the app's class for the verdict), with the recorded id. Each
agent the report hands over to is rebuilt with its recorded id and its own recorded tools
(:mod:`.handoffs` says how each handoff was made):

- an ``AgentTask`` (plain livekit, as every task is) awaited by the tool run that awaited it,
  at the recorded offset, or by the task whose ``on_enter`` awaited it (a ``TaskGroup``); it
  asks its recorded question on entry, says its recorded lines, and completes through the tool
  run that completed it, or the recorded time after its entry (after its last subtask), or
  never (cancelled when the session closes);
- a plain handoff target (on the base class) returned by the tool that returned it, or put in
  place by ``session.update_agent`` at the recorded time.

A tool the plan reads as livekit's ``EndCallTool`` whose goodbye never came is livekit's own
(``ToolRunPlan.livekit_end_call``): its hang-up waits for the goodbye's speech, however that
ends, which a recorded run cannot say.

A tool run answers as the recorded run did (see :func:`replay_run`); what follows a task it
awaited is timed from the task's return, so a task that completes later than recorded (the
caller's words recovered) delays the rest of the run as it would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import (
    NOT_GIVEN,
    Agent,
    AgentTask,
    RunContext,
    function_tool,
    get_job_context,
    llm,
)
from livekit.agents.beta.tools import EndCallTool

from ..._session.cut_in import cut_in
from .handoffs import TaskEntry, every_task
from .plan import AppSay, ReplayPlan, ToolRunPlan, ToolSay

__all__ = [
    "GREETING_INSTRUCTIONS",
    "INSTRUCTIONS",
    "SESSION_CLOSE_LAG_S",
    "agent_factory",
    "entry_instructions",
]

GREETING_INSTRUCTIONS = "Greet the caller (replayed)."
INSTRUCTIONS = "You are the agent of a replayed call."
# livekit 1.8.9 closes a session this long after it was asked to, waiting for the caller's last
# words (``session_close_transcript_timeout``'s default)
SESSION_CLOSE_LAG_S = 2.0


def entry_instructions(agent: str) -> str:
    """The instructions a replayed agent asks its recorded entry answer with."""
    return f"Say what [{agent}] said as it took the call (replayed)."


def agent_factory(plan: ReplayPlan) -> Callable[[type[Agent]], Agent]:
    """Builds the replayed call's first agent on a base class (each call its own cast)."""

    def build(base: type[Agent]) -> Agent:
        return _Cast(plan, base).first()

    return build


def _class_name(agent_id: str) -> str:
    """A class name livekit turns back into ``agent_id`` (an ``AgentTask``'s id is its class's)."""
    return "".join(part[:1].upper() + part[1:] for part in agent_id.split("_")) or "Task"


@dataclass
class _Runs:
    """One tool's recorded runs: the n-th call answers as the n-th run did."""

    runs: Sequence[ToolRunPlan]
    next_run: Iterator[ToolRunPlan] = field(init=False)

    def __post_init__(self) -> None:
        self.next_run = iter(self.runs)

    def take(self) -> ToolRunPlan:
        return next(self.next_run, self.runs[-1])


class _Cast:
    """The agents of one replayed call, built as the call reaches them."""

    def __init__(self, plan: ReplayPlan, base: type[Agent]) -> None:
        self.plan = plan
        self.base = base
        self.first_id = plan.first_agent
        grouped: dict[tuple[str | None, str], list[ToolRunPlan]] = {}
        for run in plan.tool_runs:
            owner = None if run.agent == self.first_id else run.agent
            grouped.setdefault((owner, run.name), []).append(run)
        # a tool's runs per agent (None: the first agent), shared by every instance of it
        self.runs = {key: _Runs(runs) for key, runs in grouped.items()}
        self.entry_answers = {a.on_enter for a in plan.answers if a.on_enter is not None}
        self.greets = any(
            a.after_user is None
            and a.after_tool is None
            and a.on_enter is None
            and a.after_line is None
            for a in plan.answers
        )
        self.started = False
        self.session: Any = None
        self.background: set[asyncio.Task[None]] = set()
        self.exit_after = 0.0
        self.task_ids = {t.agent for r in plan.tool_runs for t in every_task(r.tasks)}
        self.turn_lines: dict[str, list[AppSay]] = {}
        for say in plan.app_says:
            if say.on_turn is not None:
                self.turn_lines.setdefault(say.on_turn, []).append(say)

    def tools(self, agent_id: str | None, owner: Agent) -> list[llm.Tool | llm.Toolset]:
        """The replayed tools of ``agent_id`` (None: the first agent's)."""
        key = None if agent_id == self.first_id else agent_id
        return [
            EndCallTool(end_instructions=runs.runs[0].output)
            if any(r.livekit_end_call for r in runs.runs)
            else self._tool(name, runs, owner)
            for (agent, name), runs in self.runs.items()
            if agent == key
        ]

    def first(self) -> Agent:
        cast = self

        class ReplayedAgent(self.base):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__(
                    instructions=INSTRUCTIONS, id=cast.first_id, tools=cast.tools(None, self)
                )

            async def on_exit(self) -> None:
                await cast.exit()

            async def on_user_turn_completed(
                self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
            ) -> None:
                cast.turn_completed(self, new_message)
                await super().on_user_turn_completed(turn_ctx, new_message)

            async def on_enter(self) -> None:
                if cast.started:  # handed the call back: it has it again
                    cast.entered(self, cast.first_id)
                    return
                cast.started = True
                cast.start(self)

        return ReplayedAgent()

    def start(self, agent: Agent) -> None:
        """What the first agent does as the call starts: the app's lines, hang-up, greeting."""
        loop = asyncio.get_running_loop()
        _hang_up_as_recorded(agent, self.plan)
        if self.plan.app_says:
            # a task's lines are the task's to say
            lines = [s for s in self.plan.app_says if s.agent not in self.task_ids]
            self.keep(loop.create_task(_say_lines(agent, lines, loop.time())))
        for at, target in self.plan.timed_handoffs:
            loop.call_later(max(0.0, at - loop.time()), functools.partial(self.hand_to, target))
        self.session = agent.session
        if self.greets:
            greeting = agent.session.generate_reply(instructions=GREETING_INSTRUCTIONS)
            if self.plan.greeting_protected:
                # as a realtime app protects it: livekit drops the argument under server turns
                greeting.allow_interruptions = False

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold a background task until it is done (the loop keeps only weak references)."""
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def hand_to(self, agent_id: str) -> None:
        """A plain handoff no tool made (``session.update_agent``)."""
        self.session.update_agent(self.agent(agent_id))

    async def exit(self) -> None:
        """An agent hands the call over: its ``on_exit`` takes as long as recorded."""
        delay, self.exit_after = self.exit_after, 0.0
        # an on_exit that took no time must not yield either: livekit's drain pauses the
        # scheduling right after it, before a caller's turn waiting on the loop can get a reply
        if delay > 0:
            await asyncio.sleep(delay)

    def entered(self, agent: Agent, agent_id: str | None) -> None:
        """An agent handed the call: it answers its entry as recorded."""
        if agent_id in self.entry_answers and agent_id is not None:
            agent.session.generate_reply(instructions=entry_instructions(agent_id))

    def turn_completed(self, agent: Agent, message: llm.ChatMessage) -> None:
        """The caller's turn is committed: the line the app said on it, as it did."""
        lines = self.turn_lines.get(message.text_content or "")
        if lines and lines[0].agent in (None, agent.id):
            _say(agent, lines.pop(0))

    def agent(self, agent_id: str) -> Agent:
        """A plain handoff target, on the base class."""
        if agent_id == self.first_id:
            return self.first()
        cast = self

        class ReplayedTarget(self.base):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__(
                    instructions=INSTRUCTIONS, id=agent_id, tools=cast.tools(agent_id, self)
                )

            async def on_enter(self) -> None:
                cast.entered(self, agent_id)

            async def on_exit(self) -> None:
                await cast.exit()

            async def on_user_turn_completed(
                self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
            ) -> None:
                cast.turn_completed(self, new_message)
                await super().on_user_turn_completed(turn_ctx, new_message)

        return ReplayedTarget()

    def task(self, entry: TaskEntry) -> AgentTask[None]:
        """A replayed ``AgentTask`` (livekit names a task after its class)."""
        cast = self

        async def on_enter(task: AgentTask[None]) -> None:
            await cast.run_task(task, entry)

        protected = entry.agent in self.plan.protected_tasks

        def init(task: AgentTask[None]) -> None:
            AgentTask.__init__(
                task,
                instructions=INSTRUCTIONS,
                tools=cast.tools(entry.agent, task),
                # as the recorded task was built, when its question was said protected
                allow_interruptions=False if protected else NOT_GIVEN,
            )

        cls = type(_class_name(entry.agent), (AgentTask,), {"__init__": init, "on_enter": on_enter})
        replayed: AgentTask[None] = cls()
        return replayed

    async def run_task(self, task: AgentTask[None], entry: TaskEntry) -> None:
        """A task's ``on_enter``: its entry answer, its lines, its subtasks, its completion."""
        loop = asyncio.get_running_loop()
        self.entered(task, entry.agent)
        lines = [
            s
            for s in self.plan.app_says
            if s.agent == entry.agent
            and entry.entered_at - 1e-3 <= s.at
            and (entry.lasted is None or s.at < entry.entered_at + entry.lasted)
        ]
        if lines:
            self.keep(loop.create_task(_say_lines(task, lines, loop.time() - entry.entered_at)))
        since = loop.time()
        for sub in entry.subtasks:
            await asyncio.sleep(max(0.0, since + sub.offset - loop.time()))
            child = self.task(sub)
            # as a TaskGroup shares its conversation: each subtask starts from it, and what the
            # subtask heard is merged back for the next
            await child.update_chat_ctx(task.chat_ctx.copy())
            try:
                await child
            except Exception as exc:  # a subtask cancelled as the session closed
                # as a TaskGroup does: the awaiter gets the subtask's error
                if not task.done():
                    task.complete(exc)
                return
            shared = task.chat_ctx.copy()
            shared.merge(child.chat_ctx.copy(), exclude_instructions=True)
            await task.update_chat_ctx(shared)
            since = loop.time()
        if entry.by_tool or entry.completes_after is None:
            return  # its tool completes it, or nothing did

        def complete() -> None:
            if not task.done():
                task.complete(None)

        if entry.subtasks:  # as a TaskGroup: it completes from its on_enter
            await asyncio.sleep(max(0.0, since + entry.completes_after - loop.time()))
            complete()
        else:
            loop.call_later(max(0.0, since + entry.completes_after - loop.time()), complete)

    def _tool(self, name: str, runs: _Runs, owner: Agent) -> llm.RawFunctionTool[..., Any]:
        cast = self

        async def run(raw_arguments: dict[str, Any], ctx: RunContext[Any]) -> Any:
            return await cast.replay_run(runs.take(), ctx, owner)

        schema = {
            "name": name,
            "description": f"The replayed {name} tool.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        }
        return function_tool(run, raw_schema=schema)

    async def replay_run(self, run: ToolRunPlan, ctx: RunContext[Any], owner: Agent) -> Any:
        """One tool run as recorded: its lines, its tasks, its hang-up, its output."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        late = 0.0  # how much later than recorded the tasks it awaited returned

        async def until(offset: float) -> None:
            await asyncio.sleep(max(0.0, started + late + offset - loop.time()))

        steps: list[tuple[float, ToolSay | TaskEntry | None]] = [(s.offset, s) for s in run.says]
        steps += [(t.offset, t) for t in run.tasks]
        if run.protects_after is not None:
            steps.append((run.protects_after, None))  # None: its disallow_interruptions()
        for offset, step in sorted(steps, key=lambda s: s[0]):
            await until(offset)
            if step is None:
                ctx.disallow_interruptions()
                continue
            if isinstance(step, ToolSay):
                with cut_in() if step.cut_in else contextlib.nullcontext():
                    said = ctx.session.say(step.text, allow_interruptions=not step.protected)
                if step.awaited:
                    await said
                continue
            await self.task(step)
            if step.lasted is not None:
                late = loop.time() - (started + step.offset + step.lasted)
        if run.hangs_up_after is not None:
            await until(run.hangs_up_after)
            await asyncio.sleep(_pad_left(owner, self.plan))
            get_job_context().shutdown(reason="replayed hang-up")
            if run.duration is not None and run.hangs_up_after >= run.duration:
                return _output(run)  # it hung up as it ended
        if run.duration is None:
            await asyncio.Event().wait()  # it never ended in the recording
        await until(run.duration or 0.0)
        if run.completes_task and isinstance(owner, AgentTask) and not owner.done():
            owner.complete(None)
        if run.is_error:
            raise llm.ToolError(run.output)
        if run.hands_off_to is not None:
            target = self.agent(run.hands_off_to)
            self.exit_after = run.exit_after
            return (target, run.output) if run.output else target
        return _output(run)


def _output(run: ToolRunPlan) -> str | None:
    """What the run returned: nothing (None) asks the LLM for no reply."""
    return None if not run.reply_required and not run.output else run.output


def _own_pad(agent: Agent) -> float:
    """Seconds ``agent`` waits on its own after a hang-up is asked (its middleware's pad)."""
    middleware = getattr(agent, "middleware", ())
    pads = [getattr(m, "tail_pad_s", 0.0) for m in middleware]
    return max([p for p in pads if isinstance(p, int | float)], default=0.0)


def _pad_left(agent: Agent, plan: ReplayPlan) -> float:
    """What of the recorded agent's hang-up pad the replay waits: what ``agent`` does not."""
    return max(0.0, plan.hang_up_pad - _own_pad(agent))


def _hang_up_as_recorded(agent: Agent, plan: ReplayPlan) -> None:
    """Close the session when the recorded app did: after its goodbye line, or at that time.

    The recorded agent asked ``plan.hang_up_pad`` before the close implies: the replay asks
    then and waits the part of that pad the agent it runs on does not wait itself.
    """
    if not plan.app_hung_up or any(
        r.hangs_up_after is not None or r.livekit_end_call for r in plan.tool_runs
    ):
        return  # a tool hangs up
    loop = asyncio.get_running_loop()
    session = agent.session
    pad = _pad_left(agent, plan)

    def ask() -> None:
        if plan.close_reason == "job_shutdown":
            get_job_context().shutdown(reason="replayed hang-up")
        else:
            session.shutdown()

    def hang_up() -> None:
        if pad > 0:
            loop.call_later(pad, ask)
        else:
            ask()

    line = plan.hang_up_after_line
    if line is None:
        assert plan.close_at is not None  # app_hung_up
        asked = plan.close_at - SESSION_CLOSE_LAG_S - plan.hang_up_pad
        loop.call_later(max(0.0, asked), hang_up)
        return

    def after_line(ev: Any) -> None:
        item = ev.item
        if item.type == "message" and item.role == "assistant" and item.text_content == line:
            # as livekit's EndCallTool does: once the speech that said it is done
            speech = session.current_speech
            if speech is None or speech.done():
                hang_up()
            else:
                speech.add_done_callback(lambda _: hang_up())

    session.on("conversation_item_added", after_line)


async def _say_lines(agent: Agent, says: Sequence[AppSay], started: float) -> None:
    """Say each line at its call time (``started`` is the loop time of the call's start)."""
    loop = asyncio.get_running_loop()
    for say in says:
        if say.on_turn is not None:
            continue  # said on the caller's turn (see _Cast.turn_completed)
        await asyncio.sleep(max(0.0, started + say.at - loop.time()))
        _say(agent, say)


def _say(agent: Agent, say: AppSay) -> None:
    """Say the app's line as it did: a cut-in inside ``cut_in()``."""
    with cut_in() if say.cut_in else contextlib.nullcontext():
        agent.session.say(say.text, allow_interruptions=not say.protected)
