"""TurnKeeper: each drop path of livekit-agents 1.8, pinned separately."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import Agent, StopResponse
from livekit.agents.llm import ChatContext, ChatMessage
from resilient_agent.middleware.turn_keeper import Fragment, TurnKeeper
from resilient_agent.middleware.turn_keeper.withheld_audio import WithheldAudioTap

from resilient_agent import (
    InferenceNext,
    InferenceRequest,
    Middleware,
    MiddlewareContext,
    MiddlewareError,
    ResilientAgent,
    default_middleware,
)
from resilient_agent.lab.catalog import _BOOK, _BOOKED, agents, scenarios
from resilient_agent.testing import CallWorld, Scenario, Utterance, heard_sentences, run_scenario

NOTICE = "This call is recorded for quality and training purposes, thank you for waiting."


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def race_actions(world: CallWorld, outcome: Any) -> list[tuple[str, str]]:
    return [(e["kind"], e.get("action", "")) for e in outcome.race_events]


def user_messages(world: CallWorld) -> list[str]:
    return [
        i.text_content or ""
        for i in world.session.history.items
        if i.type == "message" and i.role == "user"
    ]


def test_words_withheld_from_stt_during_protected_speech_are_recovered() -> None:
    scenario = catalog("lost_words/over_protected_say")
    _, plain = run_scenario(scenario, Agent)
    world, resilient = run_scenario(scenario, ResilientAgent)
    assert plain.lost_words == 5
    assert resilient.passed, resilient.reasons
    assert ("speech_withheld_from_stt", "recovered_words") in race_actions(world, resilient)
    assert ("dropped_user_turn", "answered") in race_actions(world, resilient)
    assert user_messages(world) == ["hello can you hear me"]


def test_words_withheld_during_aec_warmup_are_recovered() -> None:
    world, outcome = run_scenario(catalog("lost_words/over_greeting_aec_warmup"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert user_messages(world) == ["hi I need help"]


def test_a_turn_livekit_drops_while_speech_is_protected_is_answered_after_it() -> None:
    # the STT hears everything here: only livekit's "skipping reply" drop is in play
    scenario = Scenario(
        name="t/drop_only",
        family="t",
        description="",
        agent=agents.greeting_agent(protected=True, text=NOTICE),
        # answered once the announcement (0.15-5.5 s) is over
        utterances=(Utterance(1.5, 3.0, "hello can you hear me", reply_within=4.0),),
        session_options={"interruption": {"discard_audio_if_uninterruptible": False}},
    )
    plain_world, plain = run_scenario(scenario, Agent)
    assert plain_world.stt.finals, "the STT heard the caller"
    assert plain.lost_words == 5
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert user_messages(world) == ["hello can you hear me"]
    assert len(world.llm.requests) == 1  # one reply, not two


def test_dropped_words_merge_into_the_next_turn_once() -> None:
    # the caller speaks twice over the announcement, the second time past its end
    scenario = Scenario(
        name="t/merge",
        family="t",
        description="",
        agent=agents.greeting_agent(protected=True, text=NOTICE),
        utterances=(
            Utterance(1.5, 3.0, "hello can you hear me", reply_within=6.0),
            Utterance(4.6, 6.0, "I need a table"),
        ),
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert user_messages(world) == ["hello can you hear me I need a table"]
    assert [r.last_user_text for r in world.llm.requests] == [
        "hello can you hear me I need a table"
    ]


def _hook_agent(behaviour: str) -> Any:
    def build(base: type[Agent]) -> Agent:
        class Hooked(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            async def on_user_turn_completed(
                self, turn_ctx: ChatContext, new_message: ChatMessage
            ) -> None:
                if behaviour == "stop":
                    raise StopResponse()
                raise ValueError("crm lookup failed")

        return Hooked()

    return build


def test_stop_response_keeps_the_words_in_the_history() -> None:
    scenario = Scenario(
        name="t/stop",
        family="t",
        description="",
        agent=_hook_agent("stop"),
        utterances=(Utterance(1.0, 2.5, "just so you know", expect_reply=False),),
        duration=8.0,
    )
    plain_world, _ = run_scenario(scenario, Agent)
    assert "just so you know" not in [
        i.text_content for i in plain_world.agent.chat_ctx.items if i.type == "message"
    ]
    world, _ = run_scenario(scenario, ResilientAgent)
    history = [i.text_content for i in world.agent.chat_ctx.items if i.type == "message"]
    assert "just so you know" in history
    assert world.llm.requests == []  # the app declined to answer, and nobody did


def test_a_failing_user_turn_hook_does_not_drop_the_turn() -> None:
    scenario = Scenario(
        name="t/raise",
        family="t",
        description="",
        agent=_hook_agent("raise"),
        utterances=(Utterance(1.0, 2.5, "do you have parking"),),
        duration=8.0,
    )
    _, plain = run_scenario(scenario, Agent)
    assert not plain.passed
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert ("user_turn_hook_failed", "answered_anyway") in race_actions(world, outcome)


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_fragments", 0), ("max_age_s", 0.5), ("keep_audio_s", 1000.0), ("recovery_timeout_s", 0)],
)
def test_options_are_validated_with_the_field_and_the_fix(option: str, value: float) -> None:
    with pytest.raises(MiddlewareError) as err:
        TurnKeeper(**{option: value})
    assert f"{option}={value} is out of range" in str(err.value)
    assert "Fix: use a value from" in str(err.value)


def test_undelivered_fragments_are_bounded() -> None:
    keeper = TurnKeeper(max_fragments=3)
    for index in range(1000):
        keeper._words.add(Fragment(f"word{index}", float(index)))
    assert keeper.buffered_fragments <= 12
    assert keeper.pending_words == 3


def test_the_audio_tap_keeps_a_bounded_window() -> None:
    class Options:
        aec_warmup_duration = None
        interruption: ClassVar[dict[str, bool]] = {"discard_audio_if_uninterruptible": True}

    class Session:
        current_speech = None
        agent_state = "listening"
        user_state = "speaking"  # a caller the STT never transcribes: kept, up to the bound
        options = Options()

        def on(self, event: str, listener: object) -> None:
            pass  # no event in this call: the caller speaks throughout

        def off(self, event: str, listener: object) -> None:
            pass

    tap = WithheldAudioTap(Session(), keep_seconds=2.0)  # type: ignore[arg-type]
    silence = np.zeros(160, dtype=np.int16).tobytes()
    for index in range(1000):
        tap.on_frame(rtc.AudioFrame(silence, 16000, 1, 160), index * 0.01)
    assert 2.0 - 0.06 <= tap.buffered_seconds <= 2.0 + 1e-9  # trimmed every 50 ms
    assert not any(f.withheld for f in tap.window(0, 100))


def test_words_said_over_a_protected_tool_preamble_reach_the_tool_reply() -> None:
    scenario = catalog("lost_words/between_call_and_output")
    _, plain = run_scenario(scenario, Agent)
    assert plain.lost_words == 3
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert ("dropped_user_words", "merged_into_inference") in race_actions(world, outcome)
    # the words sit after the tool output in the agent's context, once
    said = [
        i.text_content
        for i in world.agent.chat_ctx.items
        if i.type == "message" and i.role == "user"
    ]
    assert said == ["please book a table for eight", "for four people outside"]


def test_words_said_during_a_handoff_are_answered_by_the_next_agent() -> None:
    scenario = catalog("lost_words/during_handoff")
    _, plain = run_scenario(scenario, Agent)
    assert plain.lost_words == 5
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [r.last_user_text for r in world.llm.requests][-1] == "my order number is twelve"
    # the old agent's turn is gone with its activity: no end-of-turn wait before the answer
    (latency,) = [x for x in outcome.reply_latencies_s if x is not None]
    assert latency <= 1.5 * 1.2


def test_words_merged_into_a_tool_reply_are_in_the_session_history() -> None:
    world, outcome = run_scenario(catalog("lost_words/between_call_and_output"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert user_messages(world) == ["please book a table for eight", "for four people outside"]
    history = world.session.history.items
    kinds = [
        "output" if i.type == "function_call_output" else f"{i.role}:{i.text_content}"
        for i in history
        if i.type in ("message", "function_call_output")
    ]
    # where the LLM saw them: after the tool output, before the reply that took them in
    assert kinds == [
        "user:please book a table for eight",
        "assistant:Let me check the reservation book for you right now.",
        "output",
        "user:for four people outside",
        "assistant:Sure: for four people outside.",
    ]
    merged = next(i for i in history if i.type == "message" and i.text_content == kinds[3][5:])
    in_context = [i for i in world.agent.chat_ctx.items if i.id == merged.id]
    assert len(in_context) == 1, "the agent's context holds the same message, once"


def test_words_livekit_commits_after_a_tool_reply_took_them_are_recorded_once() -> None:
    # a word too short to interrupt (min_duration 0.5 s) is final before the 1.75 s tool ends,
    # so the tool reply takes it; then livekit commits the same word as a turn of its own
    scenario = Scenario(
        name="t/merged_then_committed",
        family="t",
        description="",
        agent=agents.booking_agent("plain", work_seconds=1.75),
        utterances=(
            Utterance(1.0, 2.8, "please book a table for eight", reply_within=8.0),
            Utterance(5.0, 5.3, "outside"),
        ),
        llm=(_BOOK, _BOOKED),
        duration=12.0,
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert ("dropped_user_words", "merged_into_inference") in race_actions(world, outcome)
    assert user_messages(world) == ["please book a table for eight", "outside"]
    agent_said = [
        i.text_content
        for i in world.agent.chat_ctx.items
        if i.type == "message" and i.role == "user"
    ]
    assert agent_said == ["please book a table for eight", "outside"]
    # the answer to livekit's turn sees the word once
    assert world.llm.requests[-1].user_texts == ("please book a table for eight", "outside")


def test_the_same_words_said_again_later_keep_the_merged_message() -> None:
    # the caller repeats themselves long after the tool reply took the words in: a new turn
    base = catalog("lost_words/between_call_and_output")
    again = Utterance(14.0, 15.6, "for four people outside")
    scenario = dataclasses.replace(base, utterances=(*base.utterances, again))
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert user_messages(world) == [
        "please book a table for eight",
        "for four people outside",
        "for four people outside",
    ]


@pytest.mark.parametrize(
    "merge_format", ["{turn}", "{fragments} {caller}", "{fragments} {turn", "{0} {fragments}"]
)
def test_merge_format_is_validated_with_the_field_and_the_fix(merge_format: str) -> None:
    with pytest.raises(MiddlewareError) as err:
        TurnKeeper(merge_format=merge_format)
    assert "merge_format=" in str(err.value) and "{fragments}" in str(err.value)
    assert 'Fix: write it like "{fragments} {turn}"' in str(err.value)


def test_merge_format_tells_the_llm_when_the_words_came() -> None:
    from resilient_agent.middleware import default_middleware

    keeper = TurnKeeper(merge_format="(said while you were speaking: {fragments}) {turn}")

    class Told(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            chain = [m if not isinstance(m, TurnKeeper) else keeper for m in default_middleware()]
            super().__init__(*args, middleware=chain, **kwargs)

    world, outcome = run_scenario(catalog("lost_words/over_protected_say"), Told)
    assert outcome.passed, outcome.reasons
    assert world.llm.requests[-1].last_user_text == (
        "(said while you were speaking: hello can you hear me)"
    )


def test_words_known_after_a_tool_reply_was_made_replace_it_before_it_is_heard() -> None:
    # the caller talks over the protected hold message and the VAD sticks: the tool reply is
    # made without their words and waits for their silence; once the watchdog ends the stuck
    # turn and the words are recovered, that unheard reply is replaced by one that has them
    base = catalog("tool_gap/vad_stuck")
    scenario = dataclasses.replace(
        base, agent=agents.booking_agent("protected_say", work_seconds=1.0), duration=25.0
    ).with_onset(1, 5.2)
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    question = scenario.utterances[1].text
    assert [m for m in user_messages(world) if question in m] == [question]  # recorded once
    heard = {s.text for s in heard_sentences(world) if s.complete}
    assert "Your table is booked." not in heard  # the stale reply was never played
    assert world.unfinished_handles == ()
    actions = [e["action"] for e in world.race_events if e["kind"] == "dropped_user_turn"]
    assert "answered_instead_of_stale_reply" in actions
    # 5.57 s before: the stale reply played first, then the answer
    assert outcome.reply_latencies_s[1] is not None and outcome.reply_latencies_s[1] <= 3.7


class _PendingAtInference(Middleware):
    """Innermost: what the session's state says is pending as each inference runs."""

    position = "last"

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        user = [i for i in request.chat_ctx.items if i.type == "message" and i.role == "user"]
        last = user[-1].text_content or "" if user else ""
        self.seen.append((last, list(ctx.state.pending_user_fragments)))
        return await call_next(request)


def test_words_a_tool_reply_took_in_are_no_longer_pending_in_the_session_state() -> None:
    # one model of the caller's pending words: the merge into the tool reply delivers them for
    # everyone who reads the state (ConditionalHangup would keep the call for stale ones)
    probe = _PendingAtInference()

    class WithProbe(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[*default_middleware(), probe], **kwargs)

    world, outcome = run_scenario(catalog("tool_gap/protected_on_resume"), WithProbe)
    assert ("dropped_user_words", "merged_into_inference") in race_actions(world, outcome)
    turn = "for four people outside on the terrace please"
    merged = [pending for last, pending in probe.seen if last == turn]
    assert merged == [[]], probe.seen
