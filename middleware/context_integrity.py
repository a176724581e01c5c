"""An inference's context repaired before the LLM when a function call and its output are unpaired.

OpenAI's Responses API, Gemini and Anthropic reject a chat context holding a function call
without its output, or an output without its call, and every later turn of the call then fails
the same way: the caller hears nothing for the rest of the call. :class:`ContextIntegrity`
checks the context of every inference, as the LLM is about to get it (after every other
middleware's edits), with the rule the lab's strict LLM fake applies
(:func:`~resilient_agent.middleware.tool_pairs.unpaired_tool_items`):

* a function call without its output gets one saying its result is unavailable, made as livekit
  makes the placeholder output of a tool still running (same name and call id, created with the
  call, inserted by creation time);
* an output without its call is dropped.

Both are reported (``race_detected``, then ``race_handled`` with the action ``repaired``, naming
the call ids), and the repaired copy goes on to the LLM. Only the inference is repaired: the
agent's context and ``session.history`` stay as livekit keeps them. A well-formed context goes on
untouched, as the very same request, so the call runs as on livekit alone.

It also keeps a tool reply from answering a question again (:mod:`.answered_turns`): a tool
called before the caller's question and done after it reads, in the provider's format, as a
context ending in that question. When a reply started for that question (while the tool ran)
says something (it is under way, not yet in the context), the tool reply's inference goes
without it (reported as
``tool_reply_reanswers``, action ``question_left_to_its_reply``) and voices the tool's result.
The same holds for a question asked after the tool's output, while its preamble still plays,
that has a reply of its own queued behind the preamble (a typed message): the tool reply, the
first inference to carry the tool's output, goes without it. A tool's output is one livekit
committed to ``session.history``, as it does before the tool reply
(``tests/test_fuzz_explore_found.py`` fails if it stops); the placeholder of a tool still running
is not.
A reply whose speech was interrupted answers nothing any more: what the caller heard of it is in
the context, after the question, and one cut before a sound left the question unanswered (the
caller spoke on and livekit interrupted it), so later inferences keep the question. A reply
made while the caller still speaks answers only the message its context ends in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from livekit.agents import llm
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import (
    InferenceNext,
    InferenceRequest,
    Middleware,
    MiddlewareContext,
    ToolCall,
    ToolOutcome,
    never_waits,
)

from .answered_turns import (
    question_answered,
    questions_after_new_results,
    questions_answered,
    questions_answered_elsewhere,
)
from .tool_pairs import UnpairedToolItems, unpaired_tool_items

__all__ = ["UNAVAILABLE_RESULT", "ContextIntegrity"]

MALFORMED_CONTEXT = "malformed_context"
"""The race kind a repaired context is reported under."""

TOOL_REPLY_REANSWERS = "tool_reply_reanswers"
"""The race kind of a tool reply that would have answered a question another reply answers."""

# how long a tool reply waits for the other reply's first words before keeping the question:
# that reply plays first anyway, and one still silent by then may never speak (a stalled LLM)
_FIRST_WORDS_WAIT_S = 2.0

UNAVAILABLE_RESULT = "The tool call's result is unavailable."
"""The output given to a function call that has none (livekit words its own placeholder output
for a tool still running ``The tool call is still in progress.``)."""

# the id of the output made for a call, after livekit's ``{call.id}_running_output``: stable
# across inferences, so each repair of the same call makes the same item
_UNAVAILABLE_OUTPUT_ID = "{call_item_id}_unavailable_output"


class ContextIntegrity(Middleware):
    """Repairs an inference's context a provider would reject (on by default).

    ``position = "last"``, and last in the defaults: it is the innermost ``wrap_llm_request`` of
    the chain (the first middleware is outermost), so it sees the context as the app's
    ``llm_node`` gets it, after every other middleware's edits (the TurnKeeper's merged words
    among them), wherever an app adds its own ``normal`` or ``first`` middleware.

    Attributes:
        repaired_contexts: Inferences repaired so far.
        questions_left_to_their_reply: Tool replies that went without a question another
            reply was answering.
    """

    name = "ContextIntegrity"
    position = "last"

    def __init__(self) -> None:
        self.repaired_contexts = 0
        self.questions_left_to_their_reply = 0
        # per user message, each reply started for it while a tool ran, or while a tool's
        # result waited for its reply
        self._replies: dict[str, list[_Reply]] = {}
        # ids of the tools' results an inference carried: the first to carry one is its
        # tool's reply
        self._outputs_carried: set[str] = set()
        self._results_awaiting_reply = False

    @never_waits
    async def on_tool_exit(
        self, ctx: MiddlewareContext, call: ToolCall, outcome: ToolOutcome
    ) -> None:
        """Note that a tool's result waits for its reply (livekit makes it after the preamble)."""
        self._results_awaiting_reply = True

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        """Pass a well-formed context on untouched; repair and report a malformed one."""
        new_results = self._new_results(ctx, request.chat_ctx)
        after_new_results = questions_after_new_results(request.chat_ctx, new_results)
        if new_results:
            self._outputs_carried.update(new_results)
            self._results_awaiting_reply = False
        if self._replies:
            request = await self._without_questions_answered_elsewhere(
                ctx, request, after_new_results
            )
        # only a tool running now, or one whose reply is still to come, can be followed by a
        # reply that voices its result and answers these questions again
        watched = ctx.state.tools_in_flight or self._results_awaiting_reply
        questions = _questions_of(ctx, request.chat_ctx) if watched else []
        result = await self._checked(ctx, request, call_next)
        if not questions or result is None:
            return result
        spoke: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        reply = _Reply(spoke, request.speech)
        for question in questions:
            self._replies.setdefault(question, []).append(reply)
        if isinstance(result, AsyncIterable) and not isinstance(result, str):
            return _watched(result, spoke)
        spoke.set_result(bool(result))
        return result

    def _new_results(self, ctx: MiddlewareContext, chat_ctx: llm.ChatContext) -> set[str]:
        """The ids of the tools' results in ``chat_ctx`` no earlier inference carried.

        livekit commits a tool's output to the session's history before it makes the tool's
        reply; the placeholder output it gives a call still running never is (and
        livekit-agents 1.8.0 gives the placeholder a new id at each inference).
        """
        unseen = {
            i.id
            for i in chat_ctx.items
            if i.type == "function_call_output" and i.id not in self._outputs_carried
        }
        if not unseen:
            return unseen
        return {
            i.id
            for i in ctx.session.history.items
            if i.type == "function_call_output" and i.id in unseen
        }

    async def _without_questions_answered_elsewhere(
        self, ctx: MiddlewareContext, request: InferenceRequest, after_new_results: list[str]
    ) -> InferenceRequest:
        candidates = questions_answered_elsewhere(request.chat_ctx, self._replies)
        candidates += [q for q in after_new_results if q in self._replies and q not in candidates]
        questions = [q for q in candidates if await _a_reply_speaks(self._replies[q])]
        if not questions:
            return request
        details = {"questions": questions}
        ctx.race_detected(self, TOOL_REPLY_REANSWERS, details=details)
        left_out = set(questions)
        chat_ctx = llm.ChatContext([i for i in request.chat_ctx.items if i.id not in left_out])
        self.questions_left_to_their_reply += 1
        ctx.race_handled(
            self,
            TOOL_REPLY_REANSWERS,
            "question_left_to_its_reply",
            details=details,
            counts={"questions_left_to_their_reply": 1},
        )
        return request.override(chat_ctx=chat_ctx)

    async def _checked(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        unpaired = unpaired_tool_items(request.chat_ctx)
        if not unpaired:
            return await call_next(request)
        details = {
            "calls_without_output": list(unpaired.calls_without_output),
            "outputs_without_call": list(unpaired.outputs_without_call),
        }
        ctx.race_detected(self, MALFORMED_CONTEXT, details=details)
        repaired = _repaired(request.chat_ctx, unpaired)
        self.repaired_contexts += 1
        ctx.race_handled(
            self,
            MALFORMED_CONTEXT,
            "repaired",
            details=details,
            counts={"repaired_contexts": 1},
        )
        return await call_next(request.override(chat_ctx=repaired))


def _repaired(chat_ctx: llm.ChatContext, unpaired: UnpairedToolItems) -> llm.ChatContext:
    """A copy of ``chat_ctx`` with an output for each call without one, and no orphan output."""
    orphans = set(unpaired.outputs_without_call)
    repaired = llm.ChatContext(
        [
            item
            for item in chat_ctx.items
            if not (item.type == "function_call_output" and item.call_id in orphans)
        ]
    )
    missing = set(unpaired.calls_without_output)
    for call in list(repaired.items):
        if call.type != "function_call" or call.call_id not in missing:
            continue
        missing.discard(call.call_id)  # a call id given twice gets one output
        repaired.insert(
            llm.FunctionCallOutput(
                id=_UNAVAILABLE_OUTPUT_ID.format(call_item_id=call.id),
                call_id=call.call_id,
                name=call.name,
                output=UNAVAILABLE_RESULT,
                is_error=False,
                created_at=call.created_at,
            )
        )
    return repaired


def _questions_of(ctx: MiddlewareContext, chat_ctx: llm.ChatContext) -> list[str]:
    """The user messages an inference of ``chat_ctx`` answers: all it ends in.

    While the caller is still speaking, only the last: the words before it may be the start of
    what they are saying (a typed message's reply carries the spoken words heard so far), whose
    rest a later reply gets, and that reply must see them whole.
    """
    if not ctx.state.caller_speaking:
        return questions_answered(chat_ctx)
    last = question_answered(chat_ctx)
    return [last] if last is not None else []


@dataclass(frozen=True)
class _Reply:
    """A reply started for a question while a tool ran, or while a tool's result waited.

    Attributes:
        spoke: Whether its inference said something (resolved at its first text or its end).
        speech: Its speech, when livekit told; an interrupted one no longer answers.
    """

    spoke: asyncio.Future[bool]
    speech: SpeechHandle | None

    @property
    def live(self) -> bool:
        """Whether it may still be heard: its speech was not interrupted."""
        return self.speech is None or not self.speech.interrupted

    @property
    def speaks(self) -> bool:
        """Whether it said something and may still be heard."""
        return self.live and self.spoke.done() and self.spoke.result()


async def _a_reply_speaks(replies: list[_Reply]) -> bool:
    """Whether one of ``replies`` says something, waiting a little for those still silent."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _FIRST_WORDS_WAIT_S
    while not any(r.speaks for r in replies):
        pending = [r.spoke for r in replies if r.live and not r.spoke.done()]
        if not pending or loop.time() >= deadline:
            return False
        await asyncio.wait(pending, timeout=deadline - loop.time(), return_when="FIRST_COMPLETED")
    return True


async def _watched(stream: AsyncIterable[Any], spoke: asyncio.Future[bool]) -> AsyncIterator[Any]:
    """``stream`` as it is, resolving ``spoke`` at its first text (True) or its end (False)."""
    try:
        async for chunk in stream:
            if not spoke.done() and _text_of(chunk):
                spoke.set_result(True)
            yield chunk
    finally:
        if not spoke.done():
            spoke.set_result(False)


def _text_of(chunk: Any) -> str:
    if isinstance(chunk, str):
        return chunk.strip()
    delta = getattr(chunk, "delta", None)
    return ((getattr(delta, "content", None) or "") if delta is not None else "").strip()
