"""The chain: order, short-circuit, error isolation and validation messages."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

import pytest

from resilient_agent import (
    HOOKS,
    InterruptDecision,
    Middleware,
    MiddlewareError,
    MiddlewareSpec,
    ProtectionDecision,
    ResumeDecision,
    ShutdownDecision,
    SpeechDecision,
    ToolCall,
    ToolOutcome,
)
from resilient_agent._engine.chain import MiddlewareChain, _parameter_count

CTX: Any = object()  # the chain passes the context through untouched


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Recorder(Middleware):
    def __init__(self, label: str, log: list[str]) -> None:
        self.label = label
        self.log = log

    @property
    def display_name(self) -> str:
        return self.label

    async def on_session_start(self, ctx: Any) -> None:
        self.log.append(f"start:{self.label}")

    async def on_tool_exit(self, ctx: Any, call: ToolCall, outcome: ToolOutcome) -> None:
        self.log.append(f"exit:{self.label}")

    async def wrap_tool_call(self, ctx: Any, call: ToolCall, call_next: Any) -> Any:
        self.log.append(f"in:{self.label}")
        result = await call_next(call)
        self.log.append(f"out:{self.label}")
        return result


class First(Recorder):
    position = "first"


class Last(Recorder):
    position = "last"


def test_list_order_then_position_and_each_middleware_sees_events_in_order() -> None:
    log: list[str] = []
    chain = MiddlewareChain(
        [Last("z", log), Recorder("a", log), First("f", log), Recorder("b", log)]
    )
    assert [mw.display_name for mw in chain.middleware] == ["f", "a", "b", "z"]
    assert [mw.display_name for mw in chain.listeners("on_tool_exit")] == ["f", "a", "b", "z"]
    run(chain.notify("on_session_start", CTX))
    run(chain.notify("on_tool_exit", CTX, ToolCall("t"), ToolOutcome()))
    # notify hooks promise no order across middleware, only each one's own events in order
    for label in "fabz":
        assert [e for e in log if e.endswith(f":{label}")] == [f"start:{label}", f"exit:{label}"]


def test_wrap_is_an_onion_with_the_first_middleware_outermost() -> None:
    log: list[str] = []
    chain = MiddlewareChain([Recorder("a", log), Recorder("b", log)])

    async def body(call: ToolCall) -> str:
        log.append(f"body:{call.arguments['x']}")
        return "ok"

    assert run(chain.wrap_tool_call(CTX, ToolCall("t", {"x": 1}), body)) == "ok"
    assert log == ["in:a", "in:b", "body:1", "out:b", "out:a"]


def test_wrap_can_veto_transform_and_retry() -> None:
    calls: list[dict[str, Any]] = []

    class Veto(Middleware):
        async def wrap_tool_call(self, ctx: Any, call: ToolCall, call_next: Any) -> Any:
            if call.name == "forbidden":
                return "refused"
            return await call_next(call.override(arguments={**call.arguments, "y": 2}))

    class Retry(Middleware):
        async def wrap_tool_call(self, ctx: Any, call: ToolCall, call_next: Any) -> Any:
            try:
                return await call_next(call)
            except ConnectionError:
                return await call_next(call)

    attempts = iter([ConnectionError(), None])

    async def body(call: ToolCall) -> str:
        calls.append(dict(call.arguments))
        failure = next(attempts)
        if failure is not None:
            raise failure
        return "booked"

    chain = MiddlewareChain([Veto(), Retry()])
    assert run(chain.wrap_tool_call(CTX, ToolCall("forbidden"), body)) == "refused"
    assert calls == []
    assert run(chain.wrap_tool_call(CTX, ToolCall("book", {"x": 1}), body)) == "booked"
    assert calls == [{"x": 1, "y": 2}, {"x": 1, "y": 2}]


def test_tool_call_is_immutable() -> None:
    call = ToolCall("t", {"x": 1})
    with pytest.raises(AttributeError):
        call.name = "other"  # type: ignore[misc]
    assert call.override(name="other").name == "other" and call.name == "t"


def test_decide_returns_the_first_answer_and_skips_failures() -> None:
    errors: list[str] = []

    class Broken(Middleware):
        def decide_speech(self, ctx: Any, speech: Any) -> SpeechDecision | None:
            raise RuntimeError("boom")

    class Abstain(Middleware):
        def decide_speech(self, ctx: Any, speech: Any) -> SpeechDecision | None:
            return None

    class Protect(Middleware):
        def decide_speech(self, ctx: Any, speech: Any) -> SpeechDecision | None:
            return SpeechDecision.protect("tool")

    class Allow(Middleware):
        def decide_speech(self, ctx: Any, speech: Any) -> SpeechDecision | None:
            return SpeechDecision.allow()

    chain = MiddlewareChain(
        [Broken(), Abstain(), Protect(), Allow()],
        on_error=lambda mw, hook, exc, _action: errors.append(f"{mw.display_name}.{hook}"),
    )
    assert chain.decide("decide_speech", CTX, None) == SpeechDecision.protect("tool")
    assert errors == ["Broken.decide_speech"]


def test_a_failing_notify_hook_is_reported_and_the_chain_goes_on() -> None:
    log: list[str] = []
    errors: list[str] = []

    class Failing(Middleware):
        async def on_session_start(self, ctx: Any) -> None:
            raise ValueError("bad")

    chain = MiddlewareChain(
        [Failing(), Recorder("after", log)],
        on_error=lambda mw, hook, exc, _action: errors.append(f"{mw.display_name}.{hook}:{exc}"),
    )
    run(chain.notify("on_session_start", CTX))
    assert errors == ["Failing.on_session_start:bad"]
    assert log == ["start:after"]


def test_a_hung_notify_hook_is_cut_at_its_budget_and_the_chain_goes_on() -> None:
    log: list[str] = []
    errors: list[tuple[str, str]] = []

    class Hangs(Middleware):
        hook_budget_s = 0.05

        async def on_session_start(self, ctx: Any) -> None:
            await asyncio.sleep(60.0)

    chain = MiddlewareChain(
        [Hangs(), Recorder("after", log)],
        on_error=lambda mw, hook, exc, action: errors.append((f"{mw.display_name}.{hook}", action)),
    )
    run(chain.notify("on_session_start", CTX))
    assert errors == [("Hangs.on_session_start", "cancelled")]
    assert log == ["start:after"]


def test_only_overridden_hooks_are_dispatched() -> None:
    chain = MiddlewareChain([Recorder("a", [])])
    assert chain.handles("wrap_tool_call") and chain.handles("on_session_start")
    assert not chain.handles("on_user_state") and not chain.handles("decide_speech")


def test_unknown_hook_names_the_middleware_and_suggests_the_fix() -> None:
    class Typo(Middleware):
        async def on_user_stat(self, ctx: Any, ev: Any) -> None: ...

    with pytest.raises(MiddlewareError) as err:
        MiddlewareChain([Typo()])
    assert "middleware 'Typo'" in str(err.value)
    assert "unknown hook 'on_user_stat'" in str(err.value)
    assert "rename it to 'on_user_state'" in str(err.value)


def test_async_decide_and_sync_notify_are_rejected() -> None:
    class AsyncDecide(Middleware):
        async def decide_speech(self, ctx: Any, speech: Any) -> Any:  # type: ignore[override]
            return None

    class SyncNotify(Middleware):
        def on_session_start(self, ctx: Any) -> None:  # type: ignore[override]
            return None

    with pytest.raises(MiddlewareError, match="decide hooks run synchronously"):
        MiddlewareChain([AsyncDecide()])
    with pytest.raises(MiddlewareError, match=r"write 'async def on_session_start"):
        MiddlewareChain([SyncNotify()])


def test_wrong_hook_signature_is_rejected() -> None:
    class TooFew(Middleware):
        async def on_user_state(self, ctx: Any) -> None:  # type: ignore[override]
            return None

    with pytest.raises(MiddlewareError, match=r"declare it as on_user_state\(self, ctx, ev\)"):
        MiddlewareChain([TooFew()])


def _plain(a, b): ...  # type: ignore[no-untyped-def]
def _defaults(a, b=1, *, c=2): ...  # type: ignore[no-untyped-def]
def _positional_only(a, /, b, *args, c, **kwargs): ...  # type: ignore[no-untyped-def]
def _star(*args, **kwargs): ...  # type: ignore[no-untyped-def]
def _with_locals(a):  # type: ignore[no-untyped-def]
    b = c = a
    return b, c


@functools.wraps(_plain)
def _wrapping(*args, **kwargs): ...  # type: ignore[no-untyped-def]


def _declared(*args): ...  # type: ignore[no-untyped-def]


_declared.__signature__ = inspect.signature(_defaults)  # type: ignore[attr-defined]


class _CallableHook:
    def __call__(self, ctx: Any, ev: Any) -> None: ...


@pytest.mark.parametrize(
    "function",
    [
        _plain,
        _defaults,
        _positional_only,
        _star,
        _with_locals,
        _wrapping,
        _declared,
        _CallableHook(),
    ],
)
def test_a_hooks_parameter_count_is_what_inspect_signature_lists(function: Any) -> None:
    # the validation reads a plain function's count off its code; anything else is asked of
    # inspect.signature, and both must agree with it
    assert _parameter_count(function) == len(inspect.signature(function).parameters)


def test_a_wrapped_hook_is_checked_by_the_signature_it_declares() -> None:
    def takes_ctx_only(self: Any, ctx: Any) -> None: ...

    @functools.wraps(takes_ctx_only)
    async def on_user_state(*args: Any) -> None: ...

    class Wrapped(Middleware):
        pass

    Wrapped.on_user_state = on_user_state  # type: ignore[method-assign,assignment]
    with pytest.raises(MiddlewareError, match=r"takes \(self, ctx\), the hook passes"):
        MiddlewareChain([Wrapped()])


def test_a_hook_typo_in_a_mixin_is_found_and_the_first_by_name_is_named() -> None:
    class Mixin:
        async def on_user_stat(self, ctx: Any, ev: Any) -> None: ...

        async def decide_speeh(self, ctx: Any, speech: Any) -> None: ...

    class Mixed(Middleware, Mixin):
        pass

    with pytest.raises(MiddlewareError, match="unknown hook 'decide_speeh'"):
        MiddlewareChain([Mixed()])


def test_middlewares_own_hook_like_names_are_all_hooks() -> None:
    # the unknown-hook check reads only the classes above Middleware: one of Middleware's own
    # would otherwise be reported against every middleware
    own = {a for klass in Middleware.__mro__ for a in vars(klass)}
    assert not [a for a in own if a.startswith(("on_", "decide_", "wrap_")) and a not in HOOKS]


def test_duplicates_bad_positions_versions_and_non_middleware() -> None:
    class Named(Middleware):
        name = "guard"

    class Other(Middleware):
        name = "guard"

    class Sideways(Middleware):
        position = "middle"  # type: ignore[assignment]

    class Future(Middleware):
        api_version = 99

    with pytest.raises(MiddlewareError, match="appears twice"):
        MiddlewareChain([Named(), Other()])
    with pytest.raises(MiddlewareError, match="position='middle'"):
        MiddlewareChain([Sideways()])
    with pytest.raises(MiddlewareError, match="middleware API 99"):
        MiddlewareChain([Future()])
    with pytest.raises(MiddlewareError, match="is not a Middleware"):
        MiddlewareChain([object()])  # type: ignore[list-item]


def test_spec_validates_options_early_and_builds_fresh_instances() -> None:
    class Guard(Middleware):
        def __init__(self, *, threshold: float = 1.0) -> None:
            self.threshold = threshold

    with pytest.raises(MiddlewareError) as err:
        MiddlewareSpec(Guard, treshold=2.0)
    assert "middleware 'Guard', options" in str(err.value)
    assert "use only these options: threshold" in str(err.value)
    with pytest.raises(MiddlewareError, match="is not a Middleware subclass"):
        MiddlewareSpec(dict)  # type: ignore[arg-type]
    spec = MiddlewareSpec(Guard, threshold=2.0)
    first, second = spec.build(), spec.build()
    assert first is not second and first.threshold == second.threshold == 2.0  # type: ignore[attr-defined]


# one right answer per decide hook; every other decide hook's answer is a wrong one for it
_RIGHT_ANSWERS: dict[str, Any] = {
    "decide_speech": SpeechDecision.allow(),
    "decide_shutdown": ShutdownDecision.now(),
    "decide_interrupt": InterruptDecision.defer(),
    "decide_protection": ProtectionDecision.protect(),
    "decide_resume": ResumeDecision.play(),
}


def test_every_decide_hook_has_a_right_answer_here() -> None:
    assert set(_RIGHT_ANSWERS) == {name for name, spec in HOOKS.items() if spec.kind == "decide"}


@pytest.mark.parametrize("hook", sorted(_RIGHT_ANSWERS))
@pytest.mark.parametrize("wrong", ["another hook's decision", "a string"])
def test_a_wrong_decide_answer_is_reported_and_treated_as_none(hook: str, wrong: str) -> None:
    errors: list[str] = []
    other = next(answer for name, answer in _RIGHT_ANSWERS.items() if name != hook)
    bad = other if wrong == "another hook's decision" else "yes"

    def answering(label: str, answer: Any) -> Middleware:
        def decide(self: Middleware, ctx: Any, request: Any) -> Any:
            return answer

        kind = type(label, (Middleware,), {hook: decide})
        return kind()  # type: ignore[no-any-return]

    chain = MiddlewareChain(
        [answering("Wrong", bad), answering("Right", _RIGHT_ANSWERS[hook])],
        on_error=lambda mw, name, exc, _action: errors.append(f"{mw.display_name}.{name}: {exc}"),
    )
    assert chain.decide(hook, CTX, None) == _RIGHT_ANSWERS[hook]
    assert len(errors) == 1 and errors[0].startswith(f"Wrong.{hook}: {hook} answered")
