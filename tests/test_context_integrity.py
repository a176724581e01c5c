"""ContextIntegrity: an inference's context a provider would reject is repaired, and reported.

The middleware runs in a chain with a fake ``call_next`` standing for the app's ``llm_node``: a
context livekit itself would send malformed is hard to provoke from app code, so each shape is
built by hand. The strict fake's rule (``malformed_context``) judges what ``call_next`` got.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from livekit.agents.llm import ChatContext, FunctionCall, FunctionCallOutput
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.context_integrity import UNAVAILABLE_RESULT, ContextIntegrity
from resilient_agent.middleware.turn_keeper import TurnKeeper

from resilient_agent import (
    ConversationState,
    InferenceRequest,
    Middleware,
    MiddlewareContext,
    RaceDetectedEvent,
    RaceHandledEvent,
)
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent.testing import run_virtual
from resilient_agent.testing.llm import malformed_context

# livekit's flag on the call of the pair it injects for a tool still running
_RUNNING_PLACEHOLDER_KEY = "__lk_running_placeholder__"


def _call(call_id: str, created_at: float) -> FunctionCall:
    return FunctionCall(
        id=f"item_{call_id}",
        call_id=call_id,
        name="check_terrace",
        arguments="{}",
        created_at=created_at,
    )


def _output(call_id: str, created_at: float) -> FunctionCallOutput:
    return FunctionCallOutput(
        call_id=call_id,
        name="check_terrace",
        output="open",
        is_error=False,
        created_at=created_at,
    )


def _context(*items: Any) -> ChatContext:
    ctx = ChatContext.empty()
    ctx.add_message(role="user", content="is the terrace open", created_at=1.0)
    ctx.items.extend(items)
    ctx.add_message(role="user", content="and the bar", created_at=9.0)
    return ctx


def _running_pair(call_id: str, created_at: float) -> list[Any]:
    """The pair livekit injects for a tool still running (``_inject_running_tool_calls``)."""
    call = _call(call_id, created_at).model_copy(
        update={"id": f"item_{call_id}_running", "extra": {_RUNNING_PLACEHOLDER_KEY: True}}
    )
    output = FunctionCallOutput(
        id=f"item_{call_id}_running_output",
        call_id=call_id,
        name=call.name,
        output="The tool call is still in progress.",
        is_error=False,
        created_at=created_at,
    )
    return [call, output]


def _infer(chat_ctx: ChatContext) -> tuple[InferenceRequest, InferenceRequest, list[Any]]:
    """Run one inference through a chain of ContextIntegrity.

    Returns:
        The request given to the chain, the one its ``call_next`` got, and the events emitted.
    """
    emitted: list[Any] = []
    ctx = MiddlewareContext(
        session=SimpleNamespace(history=ChatContext.empty()),  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=emitted.append,
    )
    chain = MiddlewareChain([ContextIntegrity()])
    request = InferenceRequest(chat_ctx=chat_ctx, tools=[], model_settings=None)
    got: list[InferenceRequest] = []

    async def llm_node(inner: InferenceRequest) -> str:
        got.append(inner)
        return "the reply"

    async def main() -> Any:
        return await chain.wrap_llm_request(ctx, request, llm_node)

    assert run_virtual(main()) == "the reply"
    (inner,) = got
    return request, inner, emitted


def _races(emitted: list[Any]) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    return [
        (ev.type, ev.kind, getattr(ev, "action", None), ev.details)
        for ev in emitted
        if isinstance(ev, (RaceDetectedEvent, RaceHandledEvent))
    ]


def test_a_call_without_its_output_gets_one_saying_the_result_is_unavailable() -> None:
    chat_ctx = _context(_call("call_1", 2.0), _call("call_2", 3.0), _output("call_2", 3.5))
    assert malformed_context(chat_ctx) is not None

    request, inner, _ = _infer(chat_ctx)

    assert malformed_context(inner.chat_ctx) is None
    added = [i for i in inner.chat_ctx.items if all(i is not j for j in chat_ctx.items)]
    assert [(i.type, i.call_id, i.name) for i in added] == [
        ("function_call_output", "call_1", "check_terrace")
    ]
    (output,) = added
    assert isinstance(output, FunctionCallOutput)
    assert output.output == UNAVAILABLE_RESULT and not output.is_error
    assert output.id == "item_call_1_unavailable_output"
    # right after its call, by creation time, as livekit inserts its own placeholders
    ids = [i.id for i in inner.chat_ctx.items]
    assert ids.index(output.id) == ids.index("item_call_1") + 1
    # only the inference is repaired: the context livekit gave is as it was
    assert request.chat_ctx is chat_ctx and all(i is not output for i in chat_ctx.items)
    assert (inner.tools, inner.model_settings) == (request.tools, request.model_settings)


def test_an_output_without_its_call_is_dropped() -> None:
    orphan = _output("call_gone", 2.0)
    kept = [_call("call_2", 3.0), _output("call_2", 3.5)]
    chat_ctx = _context(orphan, *kept)

    _, inner, _ = _infer(chat_ctx)

    assert malformed_context(inner.chat_ctx) is None
    kept_ids = [id(i) for i in chat_ctx.items if i is not orphan]
    assert [id(i) for i in inner.chat_ctx.items] == kept_ids
    assert any(i is orphan for i in chat_ctx.items)


def test_the_repair_is_reported_naming_the_call_ids() -> None:
    chat_ctx = _context(
        _output("call_gone", 1.5), _call("call_b", 2.0), _call("call_a", 3.0), _output("x", 4.0)
    )

    _, _, emitted = _infer(chat_ctx)

    details = {
        "calls_without_output": ["call_a", "call_b"],
        "outputs_without_call": ["call_gone", "x"],
    }
    assert _races(emitted) == [
        ("race_detected", "malformed_context", None, details),
        ("race_handled", "malformed_context", "repaired", details),
    ]
    assert {ev.middleware for ev in emitted} == {"ContextIntegrity"}
    assert emitted[-1].counts == {"repaired_contexts": 1}


def test_a_well_formed_context_passes_as_the_same_request_with_no_event() -> None:
    chat_ctx = _context(_call("call_1", 2.0), _output("call_1", 2.5))

    request, inner, emitted = _infer(chat_ctx)

    assert inner is request and inner.chat_ctx is chat_ctx
    assert emitted == []


def test_livekits_running_placeholder_pairs_are_left_alone() -> None:
    pair = _running_pair("call_running", 2.0)
    chat_ctx = _context(*pair)

    request, inner, emitted = _infer(chat_ctx)
    assert inner is request and emitted == []

    # beside a call that is repaired, the placeholder pair goes on as it was
    broken = _context(*pair, _call("call_lost", 3.0))
    _, inner, _ = _infer(broken)
    assert malformed_context(inner.chat_ctx) is None
    running = [i for i in inner.chat_ctx.items if getattr(i, "call_id", None) == "call_running"]
    assert len(running) == 2 and all(a is b for a, b in zip(running, pair, strict=True))


def test_it_is_the_innermost_llm_request_wrap_of_the_default_chain() -> None:
    class Mine(Middleware):
        async def wrap_llm_request(
            self, ctx: MiddlewareContext, request: InferenceRequest, call_next: Any
        ) -> Any:
            return await call_next(request)

    for chain in ([*default_middleware(), Mine()], [Mine(), *default_middleware()]):
        wraps = MiddlewareChain(chain).listeners("wrap_llm_request")
        assert isinstance(wraps[-1], ContextIntegrity)
        assert any(isinstance(mw, TurnKeeper) for mw in wraps[:-1])
