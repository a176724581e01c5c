"""ScriptedRealtimeModel: a speech-to-speech model that hears only what livekit gave it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from livekit import rtc
from livekit.agents import Agent, RunContext, function_tool, llm

from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    heard_sentences,
    run_scenario,
    run_virtual,
)
from resilient_agent.testing.audio import (
    KIND_USER,
    SAMPLE_RATE,
    AudioMarker,
    marker_frame_samples,
)
from resilient_agent.testing.realtime import ScriptedRealtimeModel, realtime_capabilities
from resilient_agent.testing.runner import CallWorld
from resilient_agent.testing.scenario import ModelKind

FLAVOURS: tuple[ModelKind, ...] = ("realtime_openai", "realtime_gemini")
GREETING = "Welcome to the Acme help line, how can I help you today?"


def _plain(base: type[Agent]) -> Agent:
    return base(instructions="You answer questions about the shop.")


def _model(world: CallWorld) -> ScriptedRealtimeModel:
    assert isinstance(world.llm, ScriptedRealtimeModel)
    return world.llm


def _heard(world: CallWorld) -> list[str]:
    return [turn.text for turn in _model(world).turns]


def _complete(world: CallWorld, text: str) -> bool:
    return any(s.text == text and s.complete for s in heard_sentences(world))


@pytest.mark.parametrize("kind", FLAVOURS)
def test_a_two_turn_call_is_answered_audibly_with_every_word_heard(kind: ModelKind) -> None:
    scenario = Scenario(
        name="realtime/two_turns",
        family="realtime",
        description="two questions, each answered before the next",
        agent=_plain,
        utterances=(
            Utterance(1.0, 2.2, "what are your hours"),
            Utterance(6.0, 7.0, "and on sunday"),
        ),
        llm=(
            LLMRule(text="We are open nine to five.", when_user_says="hours"),
            LLMRule(text="Closed on Sundays.", when_user_says="sunday"),
        ),
        duration=12.0,
        model=kind,
    )
    world, outcome = run_scenario(scenario, Agent)
    assert outcome.passed, outcome.reasons
    model = _model(world)
    assert world.vad is None and world.stt is model and world.tts is model
    assert _heard(world) == ["what are your hours", "and on sunday"]
    assert [r.text for r in model.responses] == ["We are open nine to five.", "Closed on Sundays."]
    assert not any(r.cancelled or r.interrupted_at for r in model.responses)
    assert all(s.complete for s in heard_sentences(world))
    # the second answer was chosen from a context holding both turns, as a server keeps them
    assert model.requests[-1].user_texts == ("what are your hours", "and on sunday")
    # livekit's own history got the transcripts the model committed
    users = [i.text_content for i in world.session.history.items if i.type == "message"]
    assert "what are your hours" in users and "and on sunday" in users


def _tool_agent(base: type[Agent]) -> Agent:
    class Shop(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions="You answer questions about the shop.")

        @function_tool
        async def check_hours(self, ctx: RunContext[None], day: str) -> str:
            """Look up the opening hours of a day.

            Args:
                day: The day of the week.
            """
            return f"{day}: nine to five"

    return Shop()


@pytest.mark.parametrize("kind", FLAVOURS)
def test_a_tool_call_round_trip_runs_the_tool_and_the_reply_is_heard(kind: ModelKind) -> None:
    scenario = Scenario(
        name="realtime/tool",
        family="realtime",
        description="a question answered through a tool",
        agent=_tool_agent,
        utterances=(Utterance(1.0, 2.2, "are you open monday"),),
        llm=(
            LLMRule(
                text="Let me check.",
                tool_calls=(ToolCallScript("check_hours", {"day": "monday"}),),
                when_user_says="monday",
            ),
            LLMRule(text="On Monday we open at nine.", after_tool="check_hours"),
        ),
        duration=10.0,
        tools_complete=("check_hours",),
        model=kind,
    )
    world, outcome = run_scenario(scenario, Agent)
    assert outcome.passed, outcome.reasons
    model = _model(world)
    assert [r.tool_calls for r in model.responses] == [("check_hours",), ()]
    assert _complete(world, "Let me check.") and _complete(world, "On Monday we open at nine.")
    assert model.requests[-1].last_tool == "check_hours"
    tool_reply = model.responses[-1]
    # OpenAI waits for livekit's generate_reply; Gemini answers the tool result by itself
    assert tool_reply.user_initiated is (kind == "realtime_openai")
    assert [run.status for run in world.recorder.tool_runs] == ["done"]


@pytest.mark.parametrize("kind", FLAVOURS)
def test_the_caller_speaking_over_a_reply_makes_the_server_cancel_it(kind: ModelKind) -> None:
    long_answer = (
        "Once upon a time there was a small shop at the end of a long street, "
        "and every morning its owner opened the shutters at nine."
    )
    scenario = Scenario(
        name="realtime/barge_in",
        family="realtime",
        description="the caller cuts a long answer short and asks something else",
        agent=_plain,
        utterances=(
            Utterance(1.0, 2.0, "tell me a story", expect_reply=False),
            Utterance(4.5, 5.5, "stop please"),
        ),
        # generated at about the pace it plays: still being generated when the caller speaks
        llm=(
            LLMRule(text=long_answer, when_user_says="story", duration=8.0),
            LLMRule(text="Of course, stopping.", when_user_says="stop"),
        ),
        duration=12.0,
        model=kind,
    )
    world, outcome = run_scenario(scenario, Agent)
    assert outcome.passed, outcome.reasons
    model = _model(world)
    story, stop = model.responses
    assert story.cancelled and story.interrupted_at is not None
    assert story.interrupted_at - world.t0 == pytest.approx(4.5, abs=0.02)
    assert not _complete(world, long_answer)
    assert not stop.cancelled and _complete(world, "Of course, stopping.")
    assert _heard(world) == ["tell me a story", "stop please"]
    # only OpenAI supports truncation: livekit tells it how much of the story was heard
    if kind == "realtime_openai":
        assert story.truncated_ms is not None and 0 < story.truncated_ms < 4000
    else:
        assert story.truncated_ms is None


def _greeting(protected: bool) -> Callable[[type[Agent]], Agent]:
    def build(base: type[Agent]) -> Agent:
        class Greeter(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="You greet callers.")

            async def on_enter(self) -> None:
                # allow_interruptions=False is dropped (with a warning) under server turn
                # detection; protecting the handle itself is what livekit still honours
                handle = self.session.generate_reply(
                    instructions=f'Say "{GREETING}"', allow_interruptions=False
                )
                if protected:
                    handle.allow_interruptions = False

        return Greeter()

    return build


@pytest.mark.parametrize("kind", FLAVOURS)
@pytest.mark.parametrize("protected", [True, False])
def test_words_livekit_replaced_with_silence_during_protected_speech_are_not_heard(
    kind: ModelKind, protected: bool
) -> None:
    scenario = Scenario(
        name="realtime/protected_greeting",
        family="realtime",
        description="the caller speaks over the greeting, then again after it",
        agent=_greeting(protected),
        utterances=(
            Utterance(1.0, 2.0, "hello anybody", expect_reply=False),
            Utterance(6.0, 7.0, "my parcel is late"),
        ),
        llm=(LLMRule(text="Let me look into your parcel.", when_user_says="parcel"),),
        duration=12.0,
        talk_over_tolerance=None,
        model=kind,
    )
    world, outcome = run_scenario(scenario, Agent)
    model = _model(world)
    assert world.logs.count("allow_interruptions cannot be False") == 1
    greeting = model.responses[0]
    assert greeting.text == GREETING  # said from the instructions' quoted text
    assert _complete(world, "Let me look into your parcel.")
    if protected:
        # livekit fed the model silence in place of the caller's marked frames
        assert _heard(world) == ["my parcel is late"]
        assert outcome.reasons == ["utterance 1 (1.0-2.0s): 2 word(s) never reached the LLM"]
        assert _complete(world, GREETING) and greeting.interrupted_at is None
    else:
        # the control: the same audio, unprotected, is heard and barges in
        assert _heard(world)[0] == "hello anybody"
        assert greeting.interrupted_at is not None and not _complete(world, GREETING)


@pytest.mark.parametrize("kind", FLAVOURS)
def test_words_over_the_aec_warm_up_are_not_heard(kind: ModelKind) -> None:
    scenario = Scenario(
        name="realtime/aec_warmup",
        family="realtime",
        description="the caller speaks in the first seconds of the agent's first answer",
        agent=_plain,
        utterances=(
            Utterance(1.0, 2.0, "good morning"),
            Utterance(4.0, 5.0, "hello again"),
            Utterance(10.0, 11.0, "are you there"),
        ),
        llm=(
            LLMRule(text=GREETING, when_user_says="morning"),
            LLMRule(text="Yes, I am here.", when_user_says="there"),
        ),
        duration=15.0,
        aec_warmup=3.0,
        model=kind,
    )
    world, _ = run_scenario(scenario, Agent)
    # the first answer starts at 3.0 s: livekit feeds the model silence until 6.0 s
    assert _heard(world) == ["good morning", "are you there"]
    assert _complete(world, GREETING) and _complete(world, "Yes, I am here.")


def _says_first(base: type[Agent]) -> Agent:
    class SaysFirst(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions="x")
            self.errors: list[Exception] = []

        async def on_enter(self) -> None:
            try:
                self.session.say("Hello there.")
            except RuntimeError as exc:
                self.errors.append(exc)

    return SaysFirst()


@pytest.mark.parametrize("kind", FLAVOURS)
def test_say_without_a_tts_raises_as_livekit_does(kind: ModelKind) -> None:
    flavour = "openai" if kind == "realtime_openai" else "gemini"
    assert not realtime_capabilities(flavour).supports_say
    scenario = Scenario(
        name="realtime/say",
        family="realtime",
        description="session.say with no TTS and a model without say()",
        agent=_says_first,
        utterances=(Utterance(1.0, 2.0, "hi", expect_reply=False),),
        duration=4.0,
        model=kind,
    )
    world, _ = run_scenario(scenario, Agent)
    errors: list[Any] = world.agent.errors  # type: ignore[attr-defined]
    assert len(errors) == 1
    assert "without a TTS model or a RealtimeSession that supports say()" in str(errors[0])


def test_each_flavour_reports_its_plugins_capabilities() -> None:
    openai, gemini = realtime_capabilities("openai"), realtime_capabilities("gemini")
    assert (openai.message_truncation, gemini.message_truncation) == (True, False)
    assert (openai.auto_tool_reply_generation, gemini.auto_tool_reply_generation) == (False, True)
    assert (openai.can_disable_turn_detection, gemini.can_disable_turn_detection) == (True, False)
    assert (openai.mutable_tools, gemini.mutable_tools) == (True, False)
    assert (openai.per_response_tool_choice, gemini.per_response_tool_choice) == (True, False)
    assert (openai.manual_function_calls, gemini.manual_function_calls) == (True, False)
    for caps in (openai, gemini):
        assert caps.turn_detection and caps.user_transcription and caps.audio_output
        # livekit-agents 1.8.0 has no supports_overlapping_speech: off there too
        assert not caps.supports_say and not getattr(caps, "supports_overlapping_speech", False)


def test_a_realtime_scenario_rejects_pipeline_only_faults() -> None:
    with pytest.raises(ValueError, match="needs model='pipeline'"):
        Scenario(
            name="realtime/bad",
            family="realtime",
            description="",
            agent=_plain,
            utterances=(Utterance(1.0, 2.0, "hi"),),
            vad="silero",
            model="realtime_openai",
        )


def _caller_frame(utterance: int, word: int, frame: int, frames: int) -> rtc.AudioFrame:
    marker = AudioMarker(KIND_USER, utterance, word, frame, frames)
    samples = marker_frame_samples(marker)
    return rtc.AudioFrame(samples.tobytes(), SAMPLE_RATE, 1, len(samples))


def test_the_session_api_follows_each_provider() -> None:
    async def call() -> None:
        rules = (LLMRule(text="Hello there.", duration=2.0),)
        openai_model = ScriptedRealtimeModel(rules, flavour="openai")
        openai = openai_model.session()
        await openai.generate_reply(instructions="greet")
        # OpenAI answers one response at a time
        with pytest.raises(llm.RealtimeError) as refused:
            await openai.generate_reply()
        assert refused.value.code == "conversation_already_has_active_response"
        openai.interrupt()
        first = openai_model.responses[0]
        assert first.cancelled and first.text == "Hello there."
        await openai.aclose()

        gemini_model = ScriptedRealtimeModel(rules, flavour="gemini")
        gemini = gemini_model.session()
        await gemini.generate_reply()
        gemini.interrupt()  # a no-op with server activity detection, as in the plugin
        gemini.truncate(message_id="x", modalities=["audio"], audio_end_ms=10)
        await asyncio.sleep(5.0)
        (answer,) = gemini_model.responses
        assert not answer.cancelled and answer.done_at is not None
        await gemini.aclose()

        # with turns handed to the client, OpenAI commits only when asked, what it heard
        model = ScriptedRealtimeModel(rules, flavour="openai", word_lookup=lambda u, w: "yes")
        manual = model.session(turn_detection_disabled=True)
        assert not manual.capabilities.turn_detection
        starts: list[object] = []
        manual.on("input_speech_started", starts.append)
        for frame in range(4):
            manual.push_audio(_caller_frame(0, 0, frame, 4))
        manual.commit_audio()
        assert [(t.text, t.by) for t in model.turns] == [("yes", "commit_audio")]
        assert starts == [] and model.responses == []
        await manual.aclose()

    run_virtual(call())
