"""Text typed while livekit hands the session to the next agent (RoomIO's default text input)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from livekit.agents import Agent, llm
from livekit.agents.voice import events as lk_events
from resilient_agent.middleware.turn_keeper import Fragment
from resilient_agent.middleware.turn_keeper.handover import CARRY_KEY, CarriedWords

from resilient_agent import ResilientAgent
from resilient_agent._livekit.handoff_gates import HandoffGates
from resilient_agent._livekit.interception import Interceptor
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.testing import CallWorld, Scenario, Typed, run_scenario
from resilient_agent.testing.runner import TEXT_INPUT_FAILED_LOG

TYPED_DURING_HANDOFF = next(s for s in scenarios() if s.name == "lost_words/typed_during_handoff")
TYPED = TYPED_DURING_HANDOFF.typed[0].text


def user_messages(world: CallWorld) -> list[str]:
    return [
        i.text_content or ""
        for i in world.session.history.items
        if i.type == "message" and i.role == "user"
    ]


def test_text_typed_during_a_handoff_is_lost_on_a_plain_agent() -> None:
    world, outcome = run_scenario(TYPED_DURING_HANDOFF, Agent)
    # session.interrupt() raised on the draining protected message; RoomIO only logs it
    assert world.logs.count(TEXT_INPUT_FAILED_LOG) == 1
    assert outcome.lost_words == len(TYPED.split())
    assert not any(TYPED in m for m in user_messages(world))


def test_text_typed_during_a_handoff_is_answered_by_the_next_agent() -> None:
    world, outcome = run_scenario(TYPED_DURING_HANDOFF, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [m for m in user_messages(world) if TYPED in m] == [TYPED]


def _typed_at(delay: float, at: float) -> Scenario:
    return dataclasses.replace(
        TYPED_DURING_HANDOFF,
        agent=agents.protected_handoff_agent(delay_s=delay),
        typed=(Typed(at, TYPED, reply_within=12.0),),
        duration=25.0,
    )


# typed before the handoff, while the old activity drains, and after the message: 4.0-10.0 s
@pytest.mark.parametrize("delay", [0.3, 1.5, 3.0])
@pytest.mark.parametrize("at", [4.5, 6.0, 8.5, 10.5])
def test_text_typed_around_a_handoff_keeps_every_word(delay: float, at: float) -> None:
    _, outcome = run_scenario(_typed_at(delay, at), ResilientAgent)
    assert outcome.lost_words == 0, outcome.reasons
    assert outcome.passed, outcome.reasons


# -- the gates alone --------------------------------------------------------------------------


class _Speech:
    id = "speech_1"

    def __init__(self, *, protected: bool) -> None:
        self.allow_interruptions = not protected
        self.interrupted = False

    def done(self) -> bool:
        return False


class _Session:
    """What the gates touch: current_speech, interrupt, generate_reply and the emitter."""

    def __init__(self, current: _Speech | None) -> None:
        self.current_speech = current
        self.paused = True
        self.handlers: dict[str, list[Callable[[Any], None]]] = {}

    def interrupt(self, *, force: bool = False) -> asyncio.Future[None]:
        speech = self.current_speech
        if speech is not None and not speech.allow_interruptions and not force:
            raise RuntimeError("This generation handle does not allow interruptions")
        future: asyncio.Future[None] = asyncio.Future()
        future.set_result(None)
        return future

    def generate_reply(self, *, user_input: Any = None) -> str:
        if self.paused:
            raise RuntimeError("cannot schedule new speech, the speech scheduling is draining")
        return "handle"

    def on(self, event: str, handler: Callable[[Any], None]) -> None:
        self.handlers.setdefault(event, []).append(handler)

    def off(self, event: str, handler: Callable[[Any], None]) -> None:
        self.handlers[event].remove(handler)

    def emit(self, event: str, ev: Any) -> None:
        for handler in list(self.handlers.get(event, [])):
            handler(ev)


def _gated(session: _Session) -> tuple[list[str], Callable[[], None]]:
    kept: list[str] = []
    interceptor = Interceptor()
    HandoffGates(session, kept.append).install(interceptor)  # type: ignore[arg-type]
    return kept, interceptor.restore_all


def test_an_interrupt_defers_to_the_draining_protected_speech_then_is_livekits_again() -> None:
    session = _Session(_Speech(protected=True))
    _gated(session)

    async def call() -> None:
        assert session.interrupt().done()
        handoff = llm.AgentHandoff(old_agent_id="front", new_agent_id="manager")
        session.emit("conversation_item_added", lk_events.ConversationItemAddedEvent(item=handoff))
        with pytest.raises(RuntimeError, match="does not allow interruptions"):
            session.interrupt()  # the next agent's protected speech: livekit's refusal

    asyncio.run(call())


def test_a_refused_input_is_kept_and_livekits_error_raised_unchanged() -> None:
    session = _Session(None)
    kept, _ = _gated(session)
    with pytest.raises(RuntimeError, match="draining"):
        session.generate_reply(user_input="  a table for two ")
    message = llm.ChatMessage(role="user", content=["by the window"])
    with pytest.raises(RuntimeError, match="draining"):
        session.generate_reply(user_input=message)
    with pytest.raises(RuntimeError, match="draining"):
        session.generate_reply()  # no input: nothing to keep
    session.paused = False
    assert session.generate_reply(user_input="answered by livekit") == "handle"
    assert kept == ["a table for two", "by the window"]


def test_release_puts_livekits_methods_back_once() -> None:
    session = _Session(_Speech(protected=True))
    _, release = _gated(session)
    assert {"interrupt", "generate_reply"} <= set(vars(session))
    release()
    release()
    assert not {"interrupt", "generate_reply"} & set(vars(session))
    assert session.handlers["conversation_item_added"] == []


def test_words_no_next_keeper_takes_are_logged_when_the_session_ends() -> None:
    from structlog.testing import capture_logs

    from resilient_agent._engine.carry import Carried

    carried = Carried()
    words = CarriedWords(
        [Fragment("hello there", 0.0), Fragment("a quiet corner", 1.0)], None, None
    )
    released: list[CarriedWords] = []

    def dropped(value: CarriedWords) -> None:
        released.append(value)
        value.dropped()

    carried.carry(CARRY_KEY, words, on_untaken=dropped)
    with capture_logs() as logs:
        carried.drop_untaken("the session ended")
    assert released == [words]
    assert [e["event"] for e in logs] == ["carried_state_not_taken", "user_words_lost"]
    assert logs[0]["key"] == CARRY_KEY and logs[1]["words"] == 5
    # taken once, it is gone: nothing is released twice
    carried.carry(CARRY_KEY, words)
    assert carried.take(CARRY_KEY) is words and carried.take(CARRY_KEY) is None


TALKED_OVER = next(
    s for s in scenarios() if s.name == "lost_words/typed_reply_talked_over_in_handoff"
)


def test_a_typed_message_whose_reply_was_talked_over_before_a_handoff_is_answered() -> None:
    # the old agent queued the reply behind its protected message; the caller talked over it
    # and the manager, with a context of its own, would answer only the spoken words
    world, outcome = run_scenario(TALKED_OVER, ResilientAgent)
    assert outcome.passed, outcome.reasons
    typed, spoken = TALKED_OVER.typed[0].text, TALKED_OVER.utterances[1].text
    assert f"{typed} {spoken}" in user_messages(world)


def test_messages_the_old_agent_acted_on_are_not_carried() -> None:
    world, _ = run_scenario(TYPED_DURING_HANDOFF, ResilientAgent)
    asked = TYPED_DURING_HANDOFF.utterances[0].text
    # the transfer tool answered the request: the manager never answers it again
    assert [m for m in user_messages(world) if asked in m] == [asked]


MIXES = [
    "lost_words/reply_talked_over_during_handoff",
    "lost_words/typed_while_caller_speaks_in_handoff",
    "talk_over/caller_goes_on_after_handoff_hold",
]


@pytest.mark.parametrize("name", MIXES)
def test_handoff_mixes_keep_every_word_and_never_talk_over_the_caller(name: str) -> None:
    # fails before: words heard while the old activity drains (its turn skipped), the text
    # callback's "listening" closing the caller's speech window, the hold not taken again
    scenario = next(s for s in scenarios() if s.name == name)
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.lost_words == 0, outcome.reasons
    # within the lab's tolerance: the VAD reports the caller 0.01-0.05 s after their first word
    assert outcome.talked_over_s <= 0.1, outcome.reasons
    assert outcome.passed, outcome.reasons
