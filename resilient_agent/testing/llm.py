"""A scripted LLM: replies and tool calls chosen from the context it is given.

Rules are matched against the last item of the chat context: a user message (by the words it
contains), or a tool output (by tool name); or against the instructions a request was made with
(``generate_reply(instructions=...)``, or an agent's own given after a handoff): the system
messages that follow that last item. livekit's placeholder for a tool that is still running
(``The tool call is still in progress.``) is not that tool's output and is skipped. Answers
are a pure function of the context, so livekit's preemptive generation, which may ask twice for
the same turn, gets the same answer.
Like the real providers, it rejects a malformed context (a function call without its output, or
an output without its call) with a non-retryable 400, and records why
(:attr:`LLMRequest.malformed`); the lab's contracts fail such a call. The rule is the one the
``ContextIntegrity`` middleware repairs by (:mod:`resilient_agent.middleware.tool_pairs`).
Every request is recorded with the user text it saw, so a test can ask whether given words
reached the LLM.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit.agents import APIStatusError, APITimeoutError, llm, utils
from livekit.agents.llm import ChatContext, Tool
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)
from resilient_agent.middleware.tool_pairs import malformed_context
from typing_extensions import Never, override

from .refusals import ConnectRefusals
from .schedule import delivery_wait

__all__ = [
    "KEEP_ALIVE_S",
    "LLMRequest",
    "LLMRule",
    "ScriptedAnswer",
    "ScriptedLLM",
    "ToolCallScript",
    "malformed_context",
]


@dataclass(frozen=True)
class ToolCallScript:
    """A tool call the LLM makes.

    Attributes:
        name: The function tool to call.
        arguments: Its JSON arguments.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LLMRule:
    """One scripted answer.

    Attributes:
        text: What the assistant says (may be empty when it only calls tools).
        tool_calls: Tools it calls after the text.
        when_user_says: Match a user message containing this word (case-insensitive).
        after_tool: Match the turn that follows this tool's output.
        after_agent_line: Match a context that ends in an assistant message containing this
            text (case-insensitive): a reply asked for again right after the agent's own line,
            nothing from the caller or a tool since (a line its server cut short).
        when_instructed: Match a request whose context ends in instructions containing this
            text (case-insensitive): system messages after its last user message or tool
            output, as ``generate_reply(instructions=...)`` leaves them (an ``AgentTask``'s
            ``on_enter`` asking its question).
        ttft: Seconds to the first token.
        duration: Seconds until the whole answer (tool calls included) is out.
        hangs_before: Requests this rule answers before this many seconds of call time never
            produce a token (a provider that accepts the request and then hangs).
        times_out_before: Requests this rule answers before this many seconds of call time
            fail as a provider's HTTP client does: nothing for ``conn_options.timeout``
            seconds, then ``APITimeoutError`` (livekit retries it ``max_retry`` times).
        keeps_alive_before: Requests this rule answers before this many seconds of call time
            send a role-only chunk, then an empty delta every ``KEEP_ALIVE_S``, and never a
            token (a provider that keeps the stream alive and stalls before its first token:
            each chunk resets a client's read timeout, so the stream never times out).
        silent_answers: On a realtime model, the first this many replies by this rule come
            with no audio (Gemini Live's silent turn); a pipeline LLM ignores it.
        silent_as: How such a reply comes: ``text`` (its text, no audio) or ``empty``
            (nothing but the end of the turn).
        cut_after_words: On a Gemini realtime model, the first spoken reply by this rule stops
            after this many of its words and its server fails (1011) as the reply's generation
            would have ended (``duration``), before its turn is complete: a replay of a reply
            its server cut, whose played words the report has. A pipeline LLM ignores it.
        cut_audio_seconds: With ``cut_after_words``, how long those words' audio plays (a
            replay's cut line, as long as the recorded call played it) instead of the voice's
            length for them.
        fails_after_reply: On a Gemini realtime model, the first spoken reply by this rule
            comes whole and its server fails (1011) this many seconds after it was asked for,
            before its turn is complete (as it waits for the reply's playout): a replay of a
            whole reply whose server failed while it played. A pipeline LLM ignores it.
    """

    text: str = ""
    tool_calls: tuple[ToolCallScript, ...] = ()
    when_user_says: str | None = None
    after_tool: str | None = None
    when_instructed: str | None = None
    after_agent_line: str | None = None
    ttft: float = 0.3
    duration: float = 0.5
    hangs_before: float | None = None
    times_out_before: float | None = None
    keeps_alive_before: float | None = None
    silent_answers: int = 0
    silent_as: Literal["text", "empty"] = "text"
    cut_after_words: int | None = None
    cut_audio_seconds: float | None = None
    fails_after_reply: float | None = None

    def hangs_at(self, call_time: float) -> bool:
        """Whether a request made at ``call_time`` seconds hangs."""
        return self.hangs_before is not None and call_time < self.hangs_before

    def keeps_alive_at(self, call_time: float) -> bool:
        """Whether a request made at ``call_time`` seconds keeps alive without a token."""
        return self.keeps_alive_before is not None and call_time < self.keeps_alive_before

    def times_out_at(self, call_time: float) -> bool:
        """Whether a request made at ``call_time`` seconds times out."""
        return self.times_out_before is not None and call_time < self.times_out_before

    def matches(
        self,
        last_user_text: str | None,
        last_tool: str | None,
        instructions: str = "",
        last_agent_text: str | None = None,
    ) -> bool:
        """Whether this rule answers a context ending as described.

        Args:
            last_user_text: The last user message, if the context ends in one.
            last_tool: The tool whose output ends the context, if any.
            instructions: The system messages after that last item, joined.
            last_agent_text: The last assistant message, if the context ends in one.
        """
        if self.when_instructed is not None:
            return self.when_instructed.lower() in instructions.lower()
        if self.after_agent_line is not None:
            return (
                last_agent_text is not None
                and self.after_agent_line.lower() in last_agent_text.lower()
            )
        if self.after_tool is not None:
            return last_tool == self.after_tool
        if last_tool is not None:
            return False
        if self.when_user_says is None:
            return True
        return last_user_text is not None and self.when_user_says.lower() in last_user_text.lower()


@dataclass(frozen=True)
class LLMRequest:
    """One call to the LLM as the lab saw it.

    Attributes:
        at: Loop seconds when the request was made.
        user_texts: The text of every user message in its context.
        last_user_text: The last user message, if the context ends in one.
        last_tool: The tool whose output ends the context, if any.
        reply: The text the LLM answered with.
        tool_calls: Names of the tools it called.
        hung: The request hung (its rule's ``hangs_before``, or ``keeps_alive_before``: chunks
            without a token) and answered nothing.
        timed_out: The request timed out (its rule's ``times_out_before``).
        malformed: Why a provider would have rejected its context (see
            :func:`malformed_context`); a strict LLM rejected it.
    """

    at: float
    user_texts: tuple[str, ...]
    last_user_text: str | None
    last_tool: str | None
    reply: str
    tool_calls: tuple[str, ...]
    hung: bool = False
    timed_out: bool = False
    malformed: str | None = None


KEEP_ALIVE_S = 1.0
"""Seconds between the empty chunks of a request that keeps alive without a token."""

# livekit flags the function call of the pair it injects for a tool still running (its output
# says "The tool call is still in progress."): the pair is not the tool's result
_RUNNING_PLACEHOLDER_KEY = "__lk_running_placeholder__"


def _running_placeholders(chat_ctx: ChatContext) -> set[str]:
    """Ids of the outputs livekit injected for tools still running (not their results)."""
    flagged = {
        i.call_id
        for i in chat_ctx.items
        if i.type == "function_call" and i.extra.get(_RUNNING_PLACEHOLDER_KEY)
    }
    return {
        i.id for i in chat_ctx.items if i.type == "function_call_output" and i.call_id in flagged
    }


class ScriptedLLM(llm.LLM[Never]):
    """LLM answering by :class:`LLMRule`; the fallback echoes the user (``"Sure: <words>."``).

    Args:
        rules: The scripted answers.
        fallback_ttft: Seconds to the first token of the fallback answer.
        clock: Call time, for the rules' ``*_before`` times.
        refused: The provider refuses its first attempts (429 or 503): each of livekit's
            attempts (its retries included) is one, as a plugin makes one HTTP request each.

    Attributes:
        refusals: Attempts refused so far.
    """

    def __init__(
        self,
        rules: Sequence[LLMRule] = (),
        *,
        fallback_ttft: float = 0.3,
        clock: Callable[[], float] | None = None,
        refused: ConnectRefusals | None = None,
    ) -> None:
        super().__init__()
        self.rules = tuple(rules)
        self.fallback_ttft = fallback_ttft
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self.requests: list[LLMRequest] = []
        self.refused = refused
        self.refusals = 0

    def refuses_attempt(self) -> int | None:
        """The status this attempt is refused with, or None when it is served."""
        if self.refused is None or self.refusals >= self.refused.first:
            return None
        self.refusals += 1
        return self.refused.status

    @property
    @override
    def model(self) -> str:
        return "scripted-llm"

    @property
    @override
    def provider(self) -> str:
        return "resilient_agent.testing"

    def answer_for(self, chat_ctx: ChatContext) -> tuple[LLMRule, str | None, str | None]:
        """The rule answering ``chat_ctx``, with the last user text and last tool name."""
        last_user_text: str | None = None
        last_tool: str | None = None
        last_agent_text: str | None = None
        running = _running_placeholders(chat_ctx)
        # livekit's deferred tool reply ends the context in a system message asking to voice
        # the tool's result: that reply follows the tool's output
        items = [
            (index, i)
            for index, i in enumerate(chat_ctx.items)
            if (i.type == "function_call_output" and i.id not in running)
            or (i.type == "message" and i.role != "system")
        ]
        after = 0
        if items:
            after, last = items[-1]
            if last.type == "function_call_output":
                last_tool = last.name
            elif last.type == "message" and last.role == "user":
                last_user_text = last.text_content
            elif last.type == "message" and last.role == "assistant":
                last_agent_text = last.text_content
        instructions = "\n".join(
            i.text_content or ""
            for i in chat_ctx.items[after:]
            if i.type == "message" and i.role == "system"
        )
        for rule in self.rules:
            if rule.matches(last_user_text, last_tool, instructions, last_agent_text):
                return rule, last_user_text, last_tool
        if last_tool is not None:
            return LLMRule(text="Done.", ttft=self.fallback_ttft), None, last_tool
        echo = f"Sure: {last_user_text}." if last_user_text else "How can I help?"
        return LLMRule(text=echo, ttft=self.fallback_ttft), last_user_text, None

    def answer(self, chat_ctx: ChatContext, *, tools_allowed: bool = True) -> ScriptedAnswer:
        """Choose and record the answer to ``chat_ctx``, whoever serialises it.

        :meth:`chat` streams it as livekit chunks; a wire emulator
        (:mod:`resilient_agent.testing.emulators`) writes it in a provider's wire shape.

        Args:
            chat_ctx: The context the request carries.
            tools_allowed: False when the request forbids tool calls (``tool_choice="none"``).
        """
        rule, last_user_text, last_tool = self.answer_for(chat_ctx)
        calls = rule.tool_calls if tools_allowed else ()
        user_texts = tuple(
            i.text_content or "" for i in chat_ctx.items if i.type == "message" and i.role == "user"
        )
        hangs = rule.hangs_at(self._clock())
        keeps_alive = not hangs and rule.keeps_alive_at(self._clock())
        times_out = rule.times_out_at(self._clock())
        malformed = malformed_context(chat_ctx)
        self.requests.append(
            LLMRequest(
                at=asyncio.get_running_loop().time(),
                user_texts=user_texts,
                last_user_text=last_user_text,
                last_tool=last_tool,
                reply=rule.text,
                tool_calls=tuple(c.name for c in calls),
                hung=hangs or keeps_alive,
                timed_out=times_out,
                malformed=malformed,
            )
        )
        return ScriptedAnswer(rule, calls, hangs, times_out, malformed, keeps_alive)

    @override
    def chat(
        self,
        *,
        chat_ctx: ChatContext,
        tools: list[Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> ScriptedLLMStream:
        answer = self.answer(chat_ctx, tools_allowed=tool_choice != "none")
        return ScriptedLLMStream(
            self,
            chat_ctx=chat_ctx,
            tools=tools or [],
            conn_options=conn_options,
            rule=answer.rule,
            calls=answer.calls,
            hangs=answer.hangs,
            times_out=answer.times_out,
            malformed=answer.malformed,
            keeps_alive=answer.keeps_alive,
        )


@dataclass(frozen=True)
class ScriptedAnswer:
    """What :class:`ScriptedLLM` answers one request with.

    Attributes:
        rule: The rule answering it (its text and timing).
        calls: The tool calls it makes (none when the request forbids tools).
        hangs: It never produces a token.
        times_out: It produces nothing until the client's timeout.
        malformed: Why a provider rejects its context, if it does.
        keeps_alive: It sends chunks without a token until it is cancelled.
    """

    rule: LLMRule
    calls: tuple[ToolCallScript, ...]
    hangs: bool
    times_out: bool
    malformed: str | None
    keeps_alive: bool = False


class ScriptedLLMStream(llm.LLMStream):
    """The streamed answer of :class:`ScriptedLLM`."""

    def __init__(
        self,
        owner: ScriptedLLM,
        *,
        chat_ctx: ChatContext,
        tools: list[Tool],
        conn_options: APIConnectOptions,
        rule: LLMRule,
        calls: tuple[ToolCallScript, ...],
        hangs: bool = False,
        times_out: bool = False,
        malformed: str | None = None,
        keeps_alive: bool = False,
    ) -> None:
        super().__init__(owner, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)
        self._owner = owner
        self._keeps_alive = keeps_alive
        self._malformed = malformed
        self._rule = rule
        self._calls = calls
        self._hangs = hangs
        self._times_out = times_out

    async def _run(self) -> None:
        refused = self._owner.refuses_attempt()
        if refused is not None:
            # what the openai and google plugins raise on a 429 or 503 (retryable)
            raise APIStatusError(f"scripted LLM: refused ({refused})", status_code=refused)
        if self._malformed is not None:
            # what OpenAI's Responses API, Gemini and Anthropic answer (livekit/agents#5092)
            raise APIStatusError(
                f"scripted LLM: invalid request: {self._malformed}",
                status_code=400,
                retryable=False,
            )
        if self._hangs:
            await asyncio.Future()  # until livekit cancels the request
        if self._keeps_alive:
            await self._keep_alive()
        if self._times_out:
            # what a provider's HTTP client does when no answer comes within the timeout
            await asyncio.sleep(self._conn_options.timeout)
            raise APITimeoutError("scripted LLM: no answer within the timeout")
        rule = self._rule
        request_id = utils.shortuuid("llm_")
        await asyncio.sleep(delivery_wait("llm", rule.ttft))
        words = rule.text.split(" ") if rule.text else []
        for i, word in enumerate(words):
            delta = word if i == 0 else " " + word
            self._event_ch.send_nowait(
                llm.ChatChunk(id=request_id, delta=llm.ChoiceDelta(role="assistant", content=delta))
            )
        remaining = rule.duration - rule.ttft
        wait = delivery_wait("llm", remaining)
        if wait > 0:
            await asyncio.sleep(wait)
        if self._calls:
            self._event_ch.send_nowait(
                llm.ChatChunk(
                    id=request_id,
                    delta=llm.ChoiceDelta(
                        role="assistant",
                        tool_calls=[
                            llm.FunctionToolCall(
                                name=call.name,
                                arguments=json.dumps(call.arguments),
                                call_id=utils.shortuuid("call_"),
                            )
                            for call in self._calls
                        ],
                    ),
                )
            )

    async def _keep_alive(self) -> Never:
        """A role-only chunk, then empty deltas, until livekit cancels the request."""
        request_id = utils.shortuuid("llm_")
        await asyncio.sleep(delivery_wait("llm", self._rule.ttft))
        self._event_ch.send_nowait(
            llm.ChatChunk(id=request_id, delta=llm.ChoiceDelta(role="assistant", content=""))
        )
        while True:
            await asyncio.sleep(delivery_wait("llm", KEEP_ALIVE_S))
            self._event_ch.send_nowait(
                llm.ChatChunk(id=request_id, delta=llm.ChoiceDelta(role="assistant"))
            )
