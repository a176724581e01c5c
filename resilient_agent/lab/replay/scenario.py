"""A replay plan as a lab :class:`~resilient_agent.testing.Scenario`.

The caller says each recorded turn at its recorded times (the words the STT transcribed, and
placeholder words where the report has no transcript of speech the VAD heard); the scripted LLM
answers each recorded user message or tool output with the recorded text and tool calls after
the recorded delays; each tool says what it said at its recorded offsets and returns its
recorded output after its recorded duration. The agent is built on whichever base class runs it,
so the same replay runs on a plain ``Agent`` (fidelity) and on ``ResilientAgent`` (verdict).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from livekit.agents import Agent, RunContext, function_tool, get_job_context, llm

from ...testing import LLMRule, Scenario, ToolCallScript, Utterance
from ...testing.vad import VADFault
from .plan import AppSay, CallerTurn, ReplayPlan, ReportError, ToolRunPlan

__all__ = ["GREETING_INSTRUCTIONS", "replay_scenario", "turn_words"]

GREETING_INSTRUCTIONS = "Greet the caller (replayed)."
INSTRUCTIONS = "You are the agent of a replayed call."
# livekit 1.8.9 closes a session this long after it was asked to, waiting for the caller's last
# words (``session_close_transcript_timeout``'s default)
SESSION_CLOSE_LAG_S = 2.0
_TAIL_S = 1.0


def turn_words(index: int, turn: CallerTurn) -> tuple[str, ...]:
    """The words the replayed caller says in ``turn``: the heard ones after placeholders."""
    return tuple(f"unheard{index}w{j}" for j in range(turn.unheard)) + turn.heard


def replay_scenario(
    plan: ReplayPlan,
    name: str = "replay/call",
    *,
    app: bool = False,
    tool_mocks: Mapping[str, Callable[..., Any]] | None = None,
) -> Scenario:
    """The lab scenario that replays ``plan``.

    Args:
        plan: The recorded call.
        name: The scenario's name.
        app: The agent is the app's own class, built as the app builds it: its tools run (or
            their ``tool_mocks``) instead of the recorded ones, and it greets as it does.
        tool_mocks: Tool name to the callable run instead of that tool of the app's class.
    """
    utterances = tuple(
        Utterance(t.start, t.end, " ".join(turn_words(i, t)), expect_reply=False)
        for i, t in enumerate(plan.turns)
    )
    # livekit closes the session that long after the caller leaves the room
    caller_leaves_at = (
        max(plan.close_at - SESSION_CLOSE_LAG_S, 0.0)
        if plan.caller_left and plan.close_at is not None
        else None
    )
    if plan.close_at is not None and (plan.caller_left or plan.app_hung_up):
        duration = plan.close_at + _TAIL_S
    elif plan.script_end is not None:
        duration = plan.script_end
    else:
        duration = plan.end_at + _TAIL_S
    duration = max([duration, *(u.end + 0.1 for u in utterances)])
    try:
        return _scenario(plan, name, app, tool_mocks, utterances, duration, caller_leaves_at)
    except ValueError as exc:  # the scenario's own checks: the report's timings disagree
        raise ReportError(f"the call cannot be replayed: {exc}") from None


def _scenario(
    plan: ReplayPlan,
    name: str,
    app: bool,
    tool_mocks: Mapping[str, Callable[..., Any]] | None,
    utterances: tuple[Utterance, ...],
    duration: float,
    caller_leaves_at: float | None,
) -> Scenario:
    unended = [i for i, t in enumerate(plan.turns) if not t.ended]
    return Scenario(
        name=name,
        vad_fault=VADFault("no_end_of_speech", unended[0]) if unended else VADFault(),
        family="replay",
        description="A call replayed from livekit's session report.",
        agent=_app_factory if app else _agent_factory(plan),
        utterances=utterances,
        llm=_rules(plan, app),
        # the line the app hung up after was its farewell: the contracts judge the hang-up by it
        farewell=plan.farewell,
        duration=round(duration, 3),
        session_options=_session_options(plan),
        caller_leaves_at=caller_leaves_at,
        talk_over_tolerance=None,
        tool_mocks=dict(tool_mocks or {}),
    )


def _app_factory(base: type[Agent]) -> Agent:
    """The app's own agent (``base`` is its class), as the app builds it."""
    from ..catalog.own_tools import build_app_agent

    return build_app_agent(base)


def _session_options(plan: ReplayPlan) -> dict[str, Any]:
    options = plan.options
    interruption: dict[str, Any] = {}
    for key, lab_key in (
        ("min_interruption_duration", "min_duration"),
        ("min_interruption_words", "min_words"),
        ("allow_interruptions", "enabled"),
        ("discard_audio_if_uninterruptible", "discard_audio_if_uninterruptible"),
    ):
        if key in options:
            interruption[lab_key] = options[key]
    result: dict[str, Any] = {"interruption": interruption} if interruption else {}
    if "max_tool_steps" in options:
        result["max_tool_steps"] = options["max_tool_steps"]
    if plan.close_transcript_timeout is not None:
        result["session_close_transcript_timeout"] = plan.close_transcript_timeout
    return result


def _rules(plan: ReplayPlan, app: bool = False) -> tuple[LLMRule, ...]:
    rules: list[LLMRule] = []
    seen: set[tuple[str | None, str | None]] = set()
    for answer in plan.answers:
        key = (answer.after_user, answer.after_tool)
        if key in seen:
            continue  # the same context answered again (a retry): the first answer stands
        seen.add(key)
        calls = tuple(ToolCallScript(c.name, dict(c.arguments)) for c in answer.tool_calls)
        # the app greets with its own instructions: its greeting answers any context that no
        # recorded rule does
        greeting = answer.after_tool is None and answer.after_user is None
        rules.append(
            LLMRule(
                answer.text,
                calls,
                when_user_says=answer.after_user,
                after_tool=answer.after_tool,
                when_instructed=GREETING_INSTRUCTIONS if greeting and not app else None,
                ttft=answer.ttft,
                duration=max(answer.duration, answer.ttft),
            )
        )
    for message in plan.user_messages:
        if message.split() and (message, None) not in seen:
            # the recorded LLM never answered it (it failed, or the call moved on): nor does
            # the replay's
            rules.append(LLMRule("", when_user_says=message))
            seen.add((message, None))
    answered = {a.after_tool for a in plan.answers}
    for run in plan.tool_runs:
        if run.name not in answered:
            # the recorded call never answered this tool's output: nor does the replay
            rules.append(LLMRule("", after_tool=run.name))
            answered.add(run.name)
    # a longer user message first: a short one may be a part of it; a catch-all last
    return tuple(
        sorted(
            rules,
            key=lambda r: (
                r.when_user_says is None and r.after_tool is None and r.when_instructed is None,
                -len(r.when_user_says or ""),
            ),
        )
    )


def _agent_factory(plan: ReplayPlan) -> Callable[[type[Agent]], Agent]:
    greets = any(a.after_user is None and a.after_tool is None for a in plan.answers)

    def build(base: type[Agent]) -> Agent:
        class ReplayedAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                runs: dict[str, list[ToolRunPlan]] = {}
                for run in plan.tool_runs:
                    runs.setdefault(run.name, []).append(run)
                super().__init__(
                    instructions=INSTRUCTIONS,
                    tools=[_replayed_tool(name, r) for name, r in runs.items()],
                )

            async def on_enter(self) -> None:
                _hang_up_as_recorded(self.session, plan)
                if plan.app_says:
                    asyncio.get_running_loop().create_task(_app_says(self, plan.app_says))
                if greets:
                    self.session.generate_reply(instructions=GREETING_INSTRUCTIONS)

        return ReplayedAgent()

    return build


def _hang_up_as_recorded(session: Any, plan: ReplayPlan) -> None:
    """Close the session when the recorded app did: after its goodbye line, or at that time."""
    if not plan.app_hung_up or any(r.hangs_up_after is not None for r in plan.tool_runs):
        return
    loop = asyncio.get_running_loop()

    def hang_up() -> None:
        if plan.close_reason == "job_shutdown":
            get_job_context().shutdown(reason="replayed hang-up")
        else:
            session.shutdown()

    line = plan.hang_up_after_line
    if line is None:
        assert plan.close_at is not None  # app_hung_up
        loop.call_later(max(0.0, plan.close_at - SESSION_CLOSE_LAG_S), hang_up)
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


async def _app_says(agent: Agent, says: Sequence[AppSay]) -> None:
    started = asyncio.get_running_loop().time()
    for say in says:
        await asyncio.sleep(max(0.0, started + say.at - asyncio.get_running_loop().time()))
        agent.session.say(say.text, allow_interruptions=not say.protected)


def _replayed_tool(name: str, runs: Sequence[ToolRunPlan]) -> llm.RawFunctionTool[..., Any]:
    """A tool answering its n-th call as its n-th recorded run did."""
    calls = iter(runs)
    last = runs[-1]

    async def run(raw_arguments: dict[str, Any], ctx: RunContext[Any]) -> str:
        recorded = next(calls, last)
        return await _replay_run(recorded, ctx)

    schema = {
        "name": name,
        "description": f"The replayed {name} tool.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
    }
    return function_tool(run, raw_schema=schema)


async def _replay_run(run: ToolRunPlan, ctx: RunContext[Any]) -> str:
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def until(offset: float) -> None:
        await asyncio.sleep(max(0.0, started + offset - loop.time()))

    for say in run.says:
        await until(say.offset)
        await ctx.session.say(say.text, allow_interruptions=not say.protected)
    if run.hangs_up_after is not None:
        await until(run.hangs_up_after)
        get_job_context().shutdown(reason="replayed hang-up")
        if run.duration is not None and run.hangs_up_after >= run.duration:
            return run.output  # it hung up as it ended
    if run.duration is None:
        await asyncio.Event().wait()  # it never ended in the recording
    await until(run.duration or 0.0)
    if run.is_error:
        raise llm.ToolError(run.output)
    return run.output
