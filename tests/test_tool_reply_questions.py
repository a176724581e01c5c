"""A tool reply does not answer again a question another reply is already answering.

livekit's provider formats move a tool's output next to its call: a tool called before the
caller's question and done after it makes the tool reply's context end, on the wire, in that
question (see ``middleware/answered_turns.py``). Each shape is built by hand and run through a
chain of ContextIntegrity, whose ``call_next`` stands for the app's ``llm_node``; the race on the
real plugins is in ``tests/test_provider_stacks.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
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
    questions_after_new_results,
    questions_answered,
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


_PLACEHOLDER = "The tool call is still in progress."


def _question(created_at: float = 16.9) -> ChatContext:
    """The reply to the question, while the tool still runs (livekit's placeholder pair).

    The placeholder output gets a new id each time, as livekit-agents 1.8.0 gives it at each
    inference (later versions keep one id per call).
    """
    ctx = ChatContext.empty()
    ctx.add_message(role="user", content="please book a table", id="item_book", created_at=2.2)
    ctx.insert(FunctionCall(id="c", call_id="call_1", name="book_table", arguments="{}"))
    ctx.items[-1] = ctx.items[-1].model_copy(update={"created_at": 2.8})
    ctx.insert(
        FunctionCallOutput(
            call_id="call_1",
            name="book_table",
            output=_PLACEHOLDER,
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


def _typed(*, with_result: bool) -> ChatContext:
    """A message typed at 10.07 s over a protected preamble; the tool was done at 5.5 s.

    Without the result: the typed reply's context, the preamble still playing. With it: the tool
    reply's, made when the preamble ended (livekit merges the typed message in).
    """
    ctx = ChatContext.empty()
    ctx.add_message(role="user", content="book a table", id="item_book", created_at=3.0)
    if with_result:
        ctx.add_message(role="assistant", content="Let me check.", created_at=3.0)
        ctx.insert(
            FunctionCall(
                id="c", call_id="call_1", name="book_table", arguments="{}", created_at=3.5
            )
        )
        ctx.insert(
            FunctionCallOutput(
                id="item_out",
                call_id="call_1",
                name="book_table",
                output="booked",
                is_error=False,
                created_at=5.5,
            )
        )
    ctx.add_message(role="user", content="bridge harbor", id="item_spoken", created_at=10.07)
    ctx.add_message(role="user", content="any quiet seats", id="item_typed", created_at=10.07)
    return ctx


def test_the_messages_an_inference_ends_in_are_the_questions_it_answers() -> None:
    assert questions_answered(_typed(with_result=False)) == [
        "item_book",
        "item_spoken",
        "item_typed",
    ]
    assert questions_answered(_typed(with_result=True)) == ["item_spoken", "item_typed"]
    assert questions_answered(_booking(answered=True)) == []


def test_questions_after_a_result_no_earlier_inference_carried_are_the_tool_replys() -> None:
    tool_reply = _typed(with_result=True)
    assert questions_after_new_results(tool_reply, {"item_out"}) == ["item_spoken", "item_typed"]
    # a later inference carrying the same result (a retried reply) is not the tool reply
    assert questions_after_new_results(tool_reply, set()) == []
    # a question answered since is not asked again
    answered = _booking(answered=True)
    outputs = {i.id for i in answered.items if i.type == "function_call_output"}
    assert questions_after_new_results(answered, outputs) == []


def _run(
    contexts: list[ChatContext],
    replies: tuple[Any, ...] = ("At ten.", "Booked."),
    *,
    tool_running: bool = True,
    cut: bool = False,
    caller_speaking_at_first: bool = False,
) -> tuple[list[ChatContext], list[Any]]:
    """Each context through a chain of ContextIntegrity while ``book_table`` runs.

    Each inference answers the next of ``replies`` (text, or a stream of chunks) and is read to
    its end, as livekit reads it. Unless ``tool_running``, the tool has already returned. The
    session's history holds every tool output of ``contexts`` but the placeholders: livekit
    commits a tool's output there before its tool reply, never a placeholder. Each inference is
    made for a speech of its own; with ``cut``, the speeches of the earlier ones are interrupted
    before it. With ``caller_speaking_at_first``, the caller speaks during the first.
    """
    history = ChatContext(
        [
            item
            for chat_ctx in contexts
            for item in chat_ctx.items
            if item.type == "function_call_output" and item.output != _PLACEHOLDER
        ]
    )
    emitted: list[Any] = []
    state = ConversationState()
    if tool_running:
        state.tools_in_flight[1] = ToolCall(name="book_table")
    ctx = MiddlewareContext(
        session=SimpleNamespace(history=history),  # type: ignore[arg-type]
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
        if not tool_running:
            await chain.notify("on_tool_exit", ctx, ToolCall(name="book_table"), None)
        speeches: list[SpeechHandle] = []
        for index, chat_ctx in enumerate(contexts):
            for earlier in speeches if cut else []:
                earlier.interrupt()
            state.user_state = (
                "speaking" if caller_speaking_at_first and index == 0 else "listening"
            )
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


def test_a_tool_reply_goes_without_a_message_typed_after_its_result_that_has_its_own_reply() -> (
    None
):
    got, emitted = _run([_typed(with_result=False), _typed(with_result=True)], tool_running=False)
    assert got[1].items[-1].type == "function_call_output"
    assert [e.details for e in emitted if isinstance(e, RaceHandledEvent)] == [
        {"questions": ["item_spoken", "item_typed"]}
    ]


def test_a_message_after_the_result_with_no_reply_of_its_own_is_left_to_the_tool_reply() -> None:
    # spoken over the protected preamble: livekit skips the turn, the tool reply answers it
    tool_reply = _typed(with_result=True)
    got, emitted = _run([tool_reply], tool_running=False)
    assert got[0] is tool_reply and emitted == []


def test_a_reply_made_while_the_tool_still_runs_is_no_tool_reply_whatever_its_placeholders_id() -> (
    None
):
    # livekit-agents 1.8.0 gives the running tool's placeholder output a new id at each inference:
    # the second reply's context carries an output no earlier inference carried, yet it is no
    # tool reply and keeps the questions it ends in (fuzz seed 18, call 67, on 1.8.0: the first
    # question's reply, cut before it was heard, was taken for its answer, and it went unanswered)
    first = _question()
    second = _question()
    second.add_message(role="user", content="and parking", id="item_parking", created_at=17.5)
    assert {i.id for i in first.items} != {i.id for i in second.items}
    got, emitted = _run([first, second], replies=("At ten.", "At ten, and yes."))
    assert got[1] is second and emitted == []


def test_a_question_whose_reply_was_interrupted_stays_in_the_tool_reply() -> None:
    # the caller spoke on, and livekit cut the reply waiting behind the tool's speech before a
    # sound (fuzz/4711-532): nothing answers the question unless a later reply keeps it
    tool_reply = _booking()
    got, emitted = _run([_question(), tool_reply], cut=True)
    assert got[1] is tool_reply and emitted == []


def test_a_typed_messages_reply_made_while_the_caller_speaks_answers_only_that_message() -> None:
    # fuzz/4711-193: the spoken words before the typed message are the start of what the caller
    # is still saying, and the tool reply, which gets the rest, keeps them
    got, emitted = _run(
        [_typed(with_result=False), _typed(with_result=True)],
        tool_running=False,
        caller_speaking_at_first=True,
    )
    assert [i.id for i in got[1].items if i.type == "message" and i.role == "user"] == [
        "item_book",
        "item_spoken",
    ]
    assert [e.details for e in emitted if isinstance(e, RaceHandledEvent)] == [
        {"questions": ["item_typed"]}
    ]
