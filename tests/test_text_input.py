"""Typed chat messages (RoomIO text input) and ``session.interrupt()`` over protected speech."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from livekit.agents import Agent
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.turn_keeper import TurnKeeper
from structlog.testing import capture_logs

from resilient_agent import (
    ConversationState,
    InterruptDecision,
    InterruptRequest,
    Middleware,
    MiddlewareContext,
    ResilientAgent,
)
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent._livekit.interception import Interceptor
from resilient_agent._livekit.speech_gates import InterruptGate
from resilient_agent._session.chain_run import ChainRun
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import CallWorld, Scenario, Typed, heard_sentences, run_scenario
from resilient_agent.testing.runner import TEXT_INPUT_FAILED_LOG

NOTICE = "This call is recorded for quality and training purposes, thank you for waiting."
TYPED = "do you have a table for two tonight"
DEFERRED = "deferred_to_protected_speech"


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def user_messages(world: CallWorld) -> list[str]:
    return [
        i.text_content or ""
        for i in world.session.history.items
        if i.type == "message" and i.role == "user"
    ]


def notice_heard_to_the_end(world: CallWorld) -> bool:
    return all(s.complete for s in heard_sentences(world) if s.text and s.text in NOTICE)


def race_actions(outcome: Any) -> list[tuple[str, str]]:
    return [(e["kind"], e.get("action", "")) for e in outcome.race_events]


def test_a_message_typed_over_protected_speech_is_lost_on_a_plain_agent() -> None:
    world, outcome = run_scenario(catalog("lost_words/typed_over_protected_say"), Agent)
    # livekit's default callback raised from session.interrupt(); RoomIO only logs it
    assert world.logs.count(TEXT_INPUT_FAILED_LOG) == 1
    assert outcome.lost_words == len(TYPED.split())
    assert TYPED not in user_messages(world)


def test_a_message_typed_over_protected_speech_is_answered_after_it() -> None:
    with capture_logs() as logs:
        world, outcome = run_scenario(
            catalog("lost_words/typed_over_protected_say"), ResilientAgent
        )
    assert outcome.passed, outcome.reasons
    assert world.logs.count(TEXT_INPUT_FAILED_LOG) == 0
    assert user_messages(world) == [TYPED]
    assert notice_heard_to_the_end(world)
    # the typed turn pins user_state to "speaking" for no time at all: that is not speech whose
    # audio livekit withheld, so nothing is re-transcribed
    assert race_actions(outcome) == [("protected_speech_interrupt", "deferred_to_protected_speech")]
    deferred = [e for e in logs if e.get("action") == DEFERRED]
    assert len(deferred) == 1 and deferred[0]["event"] == "race_handled"
    assert "protected" in deferred[0]["details"]["why"]


def _interrupting_agent(*, protected: bool, force: bool, at: float, seen: dict[str, Any]) -> Any:
    """Says the notice from on_enter, then the app calls ``session.interrupt()`` at ``at``."""

    def build(base: type[Agent]) -> Agent:
        class Interrupting(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="Be brief.")

            async def on_enter(self) -> None:
                seen["speech"] = self.session.say(NOTICE, allow_interruptions=not protected)
                self._probe = asyncio.get_running_loop().create_task(self._interrupt_later())

            async def _interrupt_later(self) -> None:
                await asyncio.sleep(at)  # app code on the virtual clock, not test synchronisation
                seen["shadowed"] = "interrupt" in vars(self.session)
                try:
                    future = self.session.interrupt(force=force)
                except RuntimeError as exc:
                    seen["raised"] = str(exc)
                    return
                seen["done_at_once"] = future.done()
                await future
                seen["awaited"] = True

        return Interrupting()

    return build


def _interrupt_scenario(**kwargs: Any) -> Scenario:
    return Scenario(
        name="t/interrupt",
        family="t",
        description="",
        agent=_interrupting_agent(**kwargs),
        utterances=(),
        duration=9.0,
    )


def test_interrupt_over_protected_speech_raises_on_a_plain_agent() -> None:
    seen: dict[str, Any] = {}
    run_scenario(_interrupt_scenario(protected=True, force=False, at=2.0, seen=seen), Agent)
    assert "does not allow interruptions" in seen["raised"]


def test_interrupt_over_protected_speech_defers_to_it_instead_of_raising() -> None:
    seen: dict[str, Any] = {}
    scenario = _interrupt_scenario(protected=True, force=False, at=2.0, seen=seen)
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert "raised" not in seen
    assert seen["done_at_once"] and seen["awaited"]
    assert not seen["speech"].interrupted
    assert notice_heard_to_the_end(world)
    assert race_actions(outcome) == [("protected_speech_interrupt", "deferred_to_protected_speech")]


def test_a_forced_interrupt_still_cuts_protected_speech() -> None:
    seen: dict[str, Any] = {}
    scenario = _interrupt_scenario(protected=True, force=True, at=2.0, seen=seen)
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert seen["speech"].interrupted
    assert not notice_heard_to_the_end(world)
    assert race_actions(outcome) == []


def test_interrupting_an_interruptible_speech_is_left_to_livekit() -> None:
    seen: dict[str, Any] = {}
    scenario = _interrupt_scenario(protected=False, force=False, at=2.0, seen=seen)
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert seen["speech"].interrupted
    assert not notice_heard_to_the_end(world)
    assert seen["awaited"]
    assert race_actions(outcome) == []


def test_interrupt_is_shadowed_only_while_the_agent_runs() -> None:
    seen: dict[str, Any] = {}
    scenario = _interrupt_scenario(protected=True, force=False, at=2.0, seen=seen)
    world, _ = run_scenario(scenario, ResilientAgent)
    assert seen["shadowed"]
    assert "interrupt" not in vars(world.session)  # restored when the agent left


def test_keep_text_input_off_leaves_interrupt_as_livekit_has_it() -> None:
    class WithoutTextInput(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            middleware = [
                TurnKeeper(keep_text_input=False) if isinstance(m, TurnKeeper) else m
                for m in default_middleware()
            ]
            super().__init__(*args, middleware=middleware, **kwargs)

    seen: dict[str, Any] = {}
    scenario = _interrupt_scenario(protected=True, force=False, at=2.0, seen=seen)
    run_scenario(scenario, WithoutTextInput)
    assert "does not allow interruptions" in seen["raised"]


def test_a_typed_message_is_answered_with_its_latency_from_its_arrival() -> None:
    scenario = Scenario(
        name="t/typed",
        family="t",
        description="",
        agent=lambda base: base(instructions="Be brief."),
        utterances=(),
        typed=(Typed(1.0, "what time do you open"),),
        duration=6.0,
    )
    world, outcome = run_scenario(scenario, Agent)
    assert outcome.passed, outcome.reasons
    assert user_messages(world) == ["what time do you open"]
    # no endpointing for text: the scripted LLM's whole answer (0.5 s), then the TTS's first byte
    assert outcome.reply_latencies_s[0] == pytest.approx(0.5 + 0.15, abs=0.01)


def test_typed_messages_are_validated() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        Typed(-1.0, "hello")
    with pytest.raises(ValueError, match="at least one word"):
        Typed(1.0, "  ")
    with pytest.raises(ValueError, match="typed after duration"):
        Scenario(
            name="t/late",
            family="t",
            description="",
            agent=lambda base: base(instructions="x"),
            utterances=(),
            typed=(Typed(30.0, "hello"),),
        )


# -- a reply queued behind the protected speech (found by the fuzzer: fuzz/7-1621) ------------
QUEUED_REPLY = "lost_words/typed_over_filler_with_reply_queued"
QUESTION = "what is on the menu tonight and do you have anything without nuts"
CORNER = "any quiet corner seats"


def test_text_typed_over_a_filler_is_lost_on_a_plain_agent() -> None:
    world, outcome = run_scenario(catalog(QUEUED_REPLY), Agent)
    assert world.logs.count(TEXT_INPUT_FAILED_LOG) == 1
    assert CORNER not in user_messages(world)
    assert outcome.lost_words == len(CORNER.split())


def test_text_typed_over_a_filler_cancels_the_queued_reply_it_makes_stale() -> None:
    world, outcome = run_scenario(catalog(QUEUED_REPLY), ResilientAgent)
    assert outcome.passed, outcome.reasons
    # each said once, in order: the question's reply was cut before a frame of it played, and
    # the typed message's reply was made with the question in its context
    assert user_messages(world) == [QUESTION, CORNER]
    answer = next(r for r in world.llm.requests if r.last_user_text == CORNER)
    assert answer.user_texts == (QUESTION, CORNER)
    heard = [s.text for s in heard_sentences(world) if s.heard > 0]
    assert not any("without nuts" in text for text in heard), heard
    # answered as soon as the filler was over
    filler_end = max(
        (s.started_at or 0.0) + s.length for s in heard_sentences(world) if "think about" in s.text
    )
    typed_latency = outcome.reply_latencies_s[1]
    assert typed_latency is not None
    assert 6.0 + typed_latency == pytest.approx(filler_end, abs=0.05)


WORDS_OVER_FILLER = "lost_words/typed_after_words_over_filler"
TABLE = "is there a quiet table in the corner near the window for two"


def test_words_said_before_a_typed_message_are_answered_with_it() -> None:
    world, outcome = run_scenario(catalog(WORDS_OVER_FILLER), ResilientAgent)
    assert outcome.passed, outcome.reasons
    # once each, in the order said: the pending words just before the typed message
    assert user_messages(world) == ["what is on the menu", "and any vegan options", TABLE]
    answer = next(r for r in world.llm.requests if r.last_user_text == TABLE)
    assert answer.user_texts == ("what is on the menu", "and any vegan options", TABLE)
    assert ("dropped_user_words", "merged_before_input") in race_actions(outcome)
    # one reply for both: nothing is answered after the typed message's reply
    assert [r.last_user_text for r in world.llm.requests] == ["what is on the menu", TABLE]


def _queue_agent(seen: dict[str, Any]) -> Any:
    """Says the notice protected with three speeches queued, then interrupts at 2 s."""

    def build(base: type[Agent]) -> Agent:
        class Queued(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="Be brief.")

            async def on_enter(self) -> None:
                session = self.session
                session.say(NOTICE, allow_interruptions=False)
                seen["first"] = session.say("Our first special is soup.")
                seen["protected"] = session.say("Please note.", allow_interruptions=False)
                seen["last"] = session.say("Our last special is pie.")
                self._probe = asyncio.get_running_loop().create_task(self._interrupt_later())

            async def _interrupt_later(self) -> None:
                await asyncio.sleep(2.0)  # app code on the virtual clock
                try:
                    future = self.session.interrupt()
                except RuntimeError as exc:
                    seen["raised"] = str(exc)
                    return
                await future
                seen["awaited"] = {k: seen[k].done() for k in ("first", "protected", "last")}

        return Queued()

    return build


def _queue_scenario(seen: dict[str, Any]) -> Scenario:
    return Scenario(
        name="t/queue", family="t", description="", agent=_queue_agent(seen), utterances=()
    )


def test_interrupt_over_protected_speech_leaves_the_queue_on_a_plain_agent() -> None:
    seen: dict[str, Any] = {}
    run_scenario(dataclasses.replace(_queue_scenario(seen), duration=14.0), Agent)
    assert "does not allow interruptions" in seen["raised"]
    assert not any(seen[k].interrupted for k in ("first", "protected", "last"))


def test_a_deferred_interrupt_interrupts_the_queue_as_livekit_does() -> None:
    seen: dict[str, Any] = {}
    world, _ = run_scenario(
        dataclasses.replace(_queue_scenario(seen), duration=14.0), ResilientAgent
    )
    assert notice_heard_to_the_end(world)
    # livekit's rule for its queue: interruptible speeches up to the first protected one go,
    # it and those behind it play
    assert seen["first"].interrupted
    assert not seen["protected"].interrupted and not seen["last"].interrupted
    # the future is done once the speeches it interrupted are
    assert seen["awaited"] == {"first": True, "protected": False, "last": False}
    heard = {s.text for s in heard_sentences(world) if s.complete}
    assert {"Please note.", "Our last special is pie."} <= heard
    assert "Our first special is soup." not in heard


class _Speech:
    def __init__(self, *, protected: bool) -> None:
        self.id = "speech_1"
        self.allow_interruptions = not protected
        self.interrupted = False

    def done(self) -> bool:
        return False


class _Session:
    """Just what the interrupt gate reads: ``current_speech`` and ``interrupt``."""

    def __init__(self, current: _Speech | None, fail_with: str | None = None) -> None:
        self.current_speech = current
        self.fail_with = fail_with
        self.calls: list[bool] = []

    def interrupt(self, *, force: bool = False) -> asyncio.Future[None]:
        self.calls.append(force)
        if self.fail_with == "protected":
            raise RuntimeError("This generation handle does not allow interruptions")
        if self.fail_with == "closing":
            self.current_speech = None  # the refusal had another cause than the speech
            raise RuntimeError("AgentSession isn't running")
        future: asyncio.Future[None] = asyncio.Future()
        future.set_result(None)
        return future


class _Defer(Middleware):
    def __init__(self) -> None:
        self.asked: list[Any] = []

    def decide_interrupt(
        self, ctx: MiddlewareContext, request: InterruptRequest
    ) -> InterruptDecision | None:
        self.asked.append(request.speech)
        return InterruptDecision.defer("test")


def _gate(session: _Session) -> tuple[Interceptor, _Defer]:
    deferring = _Defer()
    ctx = MiddlewareContext(
        session=session,  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=lambda _ev: None,
    )
    interceptor = Interceptor()
    run = ChainRun(
        MiddlewareChain([deferring]),
        ctx,
        farewell_of=lambda _t: None,
        speech_done_at=lambda _id: None,
    )
    InterruptGate(run).install(interceptor)
    return interceptor, deferring


def test_a_refusal_for_another_reason_is_raised_as_livekit_raised_it() -> None:
    session = _Session(_Speech(protected=True), fail_with="closing")
    _gate(session)

    async def call() -> None:
        with pytest.raises(RuntimeError, match="isn't running"):
            session.interrupt()

    asyncio.run(call())


def test_the_deferral_calls_livekit_first_and_asks_the_chain_about_the_protected_speech() -> None:
    speech = _Speech(protected=True)
    session = _Session(speech, fail_with="protected")
    _, deferring = _gate(session)

    async def call() -> None:
        assert session.interrupt().done()

    asyncio.run(call())
    assert session.calls == [False]  # livekit's interrupt ran (background speeches)
    assert deferring.asked == [speech]


def test_an_interruptible_speech_is_not_asked_about() -> None:
    session = _Session(_Speech(protected=False))
    _, deferring = _gate(session)

    async def call() -> None:
        assert session.interrupt().done()

    asyncio.run(call())
    assert deferring.asked == []


def test_the_gate_is_restored_when_the_interceptor_restores() -> None:
    session = _Session(None)
    interceptor, _ = _gate(session)
    assert "interrupt" in vars(session)
    interceptor.restore_all()
    assert "interrupt" not in vars(session)
