"""A tool reply does not answer again a question another reply is already answering.

livekit's provider formats move a tool's output next to its call: a tool called before the
caller's question and done after it makes the tool reply's context end, on the wire, in that
question (see ``middleware/answered_turns.py``). Each shape is built by hand and run through a
chain of ContextIntegrity, whose ``call_next`` stands for the app's ``llm_node``; the race on the
real plugins is in ``tests/test_provider_stacks.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from livekit.agents.llm import (
    ChatChunk,
    ChatContext,
    ChoiceDelta,
    FunctionCall,
    FunctionCallOutput,
    FunctionToolCall,
)
from livekit.agents.voice.speech_handle import SpeechHandle
from resilient_agent.middleware.answered_turns import (
    question_answered,
    questions_answered_elsewhere,
)
from resilient_agent.middleware.context_integrity import ContextIntegrity

from resilient_agent import (
    ConversationState,
    InferenceRequest,
    MiddlewareContext,
    RaceDetectedEvent,
    RaceHandledEvent,
    ToolCall,
)
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent.testing import run_virtual


def _booking(*, question_at: float = 16.9, answered: bool = False) -> ChatContext:
    """Book a table (a tool called at 2.8 s, done at 17.5 s), a question at ``question_at``."""
    ctx = ChatContext.empty()
    ctx.add_message(role="system", content="You are a restaurant assistant.", created_at=0.0)
    ctx.add_message(role="user", content="please book a table", id="item_book", created_at=2.2)
    ctx.insert(
        FunctionCall(
            id="item_call",
            call_id="call_1",
            name="book_table",
            arguments="{}",
            created_at=2.8,
        )
    )
    ctx.add_message(
        role="user", content="what time do you close", id="item_close", created_at=question_at
    )
    if answered:
        ctx.add_message(role="assistant", content="At ten.", created_at=question_at + 0.5)
    ctx.insert(
        FunctionCallOutput(
            call_id="call_1", name="book_table", output="booked", is_error=False, created_at=17.5
        )
    )
    return ctx


def _question(created_at: float = 16.9) -> ChatContext:
    """The reply to the question, while the tool still runs (livekit's placeholder pair)."""
    ctx = ChatContext.empty()
    ctx.add_message(role="user", content="please book a table", id="item_book", created_at=2.2)
    ctx.insert(FunctionCall(id="c", call_id="call_1", name="book_table", arguments="{}"))
    ctx.items[-1] = ctx.items[-1].model_copy(update={"created_at": 2.8})
    ctx.insert(
        FunctionCallOutput(
            call_id="call_1",
            name="book_table",
            output="The tool call is still in progress.",
            is_error=False,
            created_at=2.8,
        )
    )
    ctx.add_message(
        role="user", content="what time do you close", id="item_close", created_at=created_at
    )
    return ctx


def test_the_question_a_reply_is_answering_is_found_in_a_tool_reply_that_ends_after_it() -> None:
    assert question_answered(_question()) == "item_close"
    assert questions_answered_elsewhere(_booking(), {"item_close"}) == ["item_close"]
    # nobody answers it: the tool reply must (livekit's own rule)
    assert questions_answered_elsewhere(_booking(), set()) == []
    # its answer is in the context: the wire does not end in it
    assert questions_answered_elsewhere(_booking(answered=True), {"item_close"}) == []
    # asked after the tool's output: the context ends in it on the wire as in time
    assert questions_answered_elsewhere(_booking(question_at=18.0), {"item_close"}) == []


def _run(
    contexts: list[ChatContext],
    replies: tuple[Any, ...] = ("At ten.", "Booked."),
    *,
    cut: bool = False,
) -> tuple[list[ChatContext], list[Any]]:
    """Each context through a chain of ContextIntegrity while ``book_table`` runs.

    Each inference answers the next of ``replies`` (text, or a stream of chunks) and is read to
    its end, as livekit reads it. Each is made for a speech of its own; with ``cut``, the
    speeches of the earlier ones are interrupted before it.
    """
    emitted: list[Any] = []
    state = ConversationState()
    state.tools_in_flight[1] = ToolCall(name="book_table")
    ctx = MiddlewareContext(
        session=None,  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=state,
        emit=emitted.append,
    )
    chain = MiddlewareChain([ContextIntegrity()])
    got: list[ChatContext] = []
    answers = iter(replies)

    async def llm_node(inner: InferenceRequest) -> Any:
        got.append(inner.chat_ctx)
        answer = next(answers)
        if isinstance(answer, str):
            return answer

        async def stream() -> AsyncIterator[Any]:
            for chunk in answer:
                yield chunk

        return stream()

    async def main() -> None:
        speeches: list[SpeechHandle] = []
        for chat_ctx in contexts:
            for earlier in speeches if cut else []:
                earlier.interrupt()
            speeches.append(SpeechHandle.create(allow_interruptions=True))
            request = InferenceRequest(
                chat_ctx=chat_ctx, tools=[], model_settings=None, speech=speeches[-1]
            )
            result = await chain.wrap_llm_request(ctx, request, llm_node)
            if not isinstance(result, str):
                async for _ in result:
                    pass

    run_virtual(main())
    return got, emitted


def test_the_tool_reply_goes_without_the_question_its_reply_answers_and_says_so() -> None:
    tool_reply = _booking()
    got, emitted = _run([_question(), tool_reply])

    assert [i.id for i in got[1].items if i.type == "message" and i.role == "user"] == ["item_book"]
    assert got[1].items[-1].type == "function_call_output"
    # only the inference goes without it: the context livekit gave is as it was
    assert any(i.id == "item_close" for i in tool_reply.items)
    races = [
        (ev.type, ev.kind, getattr(ev, "action", None))
        for ev in emitted
        if isinstance(ev, (RaceDetectedEvent, RaceHandledEvent))
    ]
    assert races == [
        ("race_detected", "tool_reply_reanswers", None),
        ("race_handled", "tool_reply_reanswers", "question_left_to_its_reply"),
    ]


def test_a_tool_reply_whose_question_no_reply_answers_keeps_it() -> None:
    tool_reply = _booking()
    got, emitted = _run([tool_reply])
    assert got[0] is tool_reply and emitted == []


def test_a_question_whose_reply_only_called_a_tool_stays_for_the_tool_reply_to_answer() -> None:
    # an AgentTask's last turn: its reply is a tool call that ends the task, and the tool
    # reply of the tool that awaited the task answers it (livekit's rule)
    call = FunctionToolCall(name="confirm", arguments="{}", call_id="call_2")
    only_a_tool = (ChatChunk(id="r", delta=ChoiceDelta(role="assistant", tool_calls=[call])),)
    tool_reply = _booking()
    got, emitted = _run([_question(), tool_reply], replies=(only_a_tool, "Booked."))
    assert got[1] is tool_reply and emitted == []


def test_a_streamed_reply_that_speaks_answers_its_question() -> None:
    words = (ChatChunk(id="r", delta=ChoiceDelta(role="assistant", content="At ten.")),)
    got, _ = _run([_question(), _booking()], replies=(words, "Booked."))
    assert got[1].items[-1].type == "function_call_output"


def test_a_question_whose_reply_was_interrupted_stays_in_the_tool_reply() -> None:
    # the caller spoke on, and livekit cut the reply waiting behind the tool's speech before a
    # sound (fuzz/4711-532): nothing answers the question unless a later reply keeps it
    tool_reply = _booking()
    got, emitted = _run([_question(), tool_reply], cut=True)
    assert got[1] is tool_reply and emitted == []
