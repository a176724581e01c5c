"""Fails loudly when livekit moves a private name resilient-agent depends on."""

from __future__ import annotations

import asyncio

from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent._livekit.compat import speech_interrupted_future, speech_scheduled_future


def test_speech_handle_futures_are_where_compat_expects_them() -> None:
    async def check() -> None:
        handle = SpeechHandle.create(allow_interruptions=True)
        scheduled = speech_scheduled_future(handle)
        interrupted = speech_interrupted_future(handle)
        assert scheduled is not None, "livekit moved SpeechHandle._scheduled_fut"
        assert interrupted is not None, "livekit moved SpeechHandle._interrupt_fut"
        assert not interrupted.done()
        handle.interrupt()
        assert interrupted.done() and handle.interrupted

    asyncio.run(check())


# -- interception tripwires: every intercepted method and every relied-on livekit behaviour ------
# (resilient_agent._livekit.compat.RELIED_ON lists them; each check below fails naming the livekit
# change, and each has a test that simulates the change and watches the check fail)

import dataclasses  # noqa: E402
import inspect  # noqa: E402
import re  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from livekit.agents import (  # noqa: E402
    Agent,
    AgentSession,
    JobContext,
    RunContext,
    function_tool,
    llm,
)
from livekit.agents.beta.tools import EndCallTool  # noqa: E402
from livekit.agents.types import NOT_GIVEN  # noqa: E402
from livekit.agents.voice.io import AudioInput  # noqa: E402
from livekit.agents.voice.room_io import RoomIO  # noqa: E402

from resilient_agent._livekit.compat import RELIED_ON  # noqa: E402
from resilient_agent._livekit.interception import INTERCEPTIONS  # noqa: E402

_SIGNATURES: dict[str, tuple[type, list[tuple[str, Any]]]] = {
    "AgentSession.shutdown": (AgentSession, [("drain", True)]),
    "AgentSession.aclose": (AgentSession, []),
    "JobContext.shutdown": (JobContext, [("reason", "user requested")]),
    "AgentSession.interrupt": (AgentSession, [("force", False)]),
    # keyword-only, with user_input among them (the rest differ between 1.8 releases)
    "AgentSession.generate_reply": (AgentSession, []),
    "AgentSession.say": (
        AgentSession,
        [
            ("text", inspect.Parameter.empty),
            ("audio", NOT_GIVEN),
            ("allow_interruptions", NOT_GIVEN),
            ("add_to_chat_ctx", True),
        ],
    ),
    "RunContext.disallow_interruptions": (RunContext, []),
    "RealtimeSession.push_audio": (llm.RealtimeSession, [("frame", inspect.Parameter.empty)]),
    "Agent.on_enter": (Agent, []),
    "Agent.on_exit": (Agent, []),
    "Agent.on_user_turn_completed": (
        Agent,
        [("turn_ctx", inspect.Parameter.empty), ("new_message", inspect.Parameter.empty)],
    ),
    "Agent.on_user_turn_exceeded": (Agent, [("ev", inspect.Parameter.empty)]),
    # a class swap: the methods its subclass overrides (checked in check_signature)
    "AudioInput.__class__": (AudioInput, []),
    "Agent.llm_node": (
        Agent,
        [
            ("chat_ctx", inspect.Parameter.empty),
            ("tools", inspect.Parameter.empty),
            ("model_settings", inspect.Parameter.empty),
        ],
    ),
}


def _change(what: str) -> str:
    return next(r.change for r in RELIED_ON if r.tripwire.startswith(what))


def check_signature(key: str) -> None:
    owner, expected = _SIGNATURES[key]
    message = _change(f"test_intercepted_methods_keep_their_signatures[{key}]")
    if key == "AudioInput.__class__":
        for name in ("__anext__", "on_detached"):
            method = getattr(owner, name)
            params = [p.name for p in inspect.signature(method).parameters.values()]
            assert params == ["self"], f"{message}: {name}{params}"
        assert inspect.iscoroutinefunction(owner.__anext__), f"{message}: __anext__ not async"
        return
    method = getattr(owner, INTERCEPTIONS[key].attribute)
    params = [
        (p.name, p.default)
        for p in inspect.signature(method).parameters.values()
        if p.name != "self"
    ]
    if key == "AgentSession.generate_reply":
        kinds = {p.kind for p in inspect.signature(method).parameters.values() if p.name != "self"}
        names = [name for name, _ in params]
        assert kinds == {inspect.Parameter.KEYWORD_ONLY}, f"{message}: {params}"
        assert "user_input" in names, f"{message}: {params} (the shadow reads user_input)"
        return
    assert params == expected, f"{message}: {params} (the shadow expects {expected})"
    if key == "AgentSession.aclose":
        assert inspect.iscoroutinefunction(method), f"{message}: no longer a coroutine"


def test_every_interception_is_pinned() -> None:
    pinned = {r.tripwire for r in RELIED_ON}
    for key in INTERCEPTIONS:
        assert f"test_intercepted_methods_keep_their_signatures[{key}]" in pinned, key
    tests = {name for name in globals() if name.startswith("test_")}
    for reliance in RELIED_ON:
        assert reliance.tripwire.split("[")[0] in tests, reliance.tripwire


@pytest.mark.parametrize("key", sorted(_SIGNATURES))
def test_intercepted_methods_keep_their_signatures(key: str) -> None:
    check_signature(key)


def test_a_changed_signature_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    def shutdown(self: Any, *, drain: bool = True, reason: str = "") -> None: ...

    monkeypatch.setattr(AgentSession, "shutdown", shutdown)
    with pytest.raises(
        AssertionError, match=re.escape("changed AgentSession.shutdown's signature")
    ):
        check_signature("AgentSession.shutdown")


def check_interrupt_raises_on_protected_speech() -> None:
    async def check() -> None:
        handle = SpeechHandle.create(allow_interruptions=False)
        try:
            handle.interrupt()
        except RuntimeError:
            return
        raise AssertionError(_change("test_interrupt_raises_on_a_protected_speech"))

    asyncio.run(check())


def test_interrupt_raises_on_a_protected_speech() -> None:
    check_interrupt_raises_on_protected_speech()


def test_interrupt_no_longer_raising_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    original = SpeechHandle.interrupt

    def interrupt(self: SpeechHandle, *, force: bool = False, **kwargs: Any) -> SpeechHandle:
        return original(self, force=True, **kwargs)

    monkeypatch.setattr(SpeechHandle, "interrupt", interrupt)
    with pytest.raises(AssertionError, match="no longer raises when interrupt"):
        check_interrupt_raises_on_protected_speech()


def check_protecting_an_interrupted_speech_raises() -> None:
    async def check() -> None:
        handle = SpeechHandle.create(allow_interruptions=True)
        handle.interrupt()
        try:
            handle.allow_interruptions = False
        except RuntimeError:
            return
        raise AssertionError(_change("test_protecting_an_interrupted_speech_raises"))

    asyncio.run(check())


def test_protecting_an_interrupted_speech_raises() -> None:
    check_protecting_an_interrupted_speech_raises()


def test_protecting_an_interrupted_speech_silently_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    prop = SpeechHandle.allow_interruptions
    assert isinstance(prop, property) and prop.fget is not None
    monkeypatch.setattr(
        SpeechHandle,
        "allow_interruptions",
        property(prop.fget, lambda self, value: prop.fset(self, value or self.interrupted)),
    )
    with pytest.raises(AssertionError, match="no longer refuses to protect"):
        check_protecting_an_interrupted_speech_raises()


def _resume_probe(seen: dict[str, str]) -> Callable[[type[Agent]], Agent]:
    def build(base: type[Agent]) -> Agent:
        class Probe(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            @function_tool
            async def book_table(self, ctx: RunContext[None], time: str) -> str:
                """Book a table.

                Args:
                    time: When the table is wanted.
                """
                await asyncio.sleep(1.0)
                output: Any = ctx.session.output.audio
                seen["before"] = output.playing
                ctx.disallow_interruptions()
                seen["after"] = output.playing
                await asyncio.sleep(2.0)
                return "booked"

        return Probe()

    return build


def check_disallow_interruptions_resumes_a_paused_speech() -> None:
    from resilient_agent.lab.catalog import scenarios
    from resilient_agent.testing import run_scenario

    seen: dict[str, str] = {}
    scenario = next(s for s in scenarios() if s.name == "tool_gap/protected_on_resume")
    run_scenario(dataclasses.replace(scenario, agent=_resume_probe(seen)), Agent)
    assert seen.get("before") == "paused", f"the lab no longer pauses the preamble: {seen}"
    message = _change("test_disallow_interruptions_resumes_a_paused_speech_at_once")
    assert seen["after"] == "playing", f"{message}: {seen}"


def test_disallow_interruptions_resumes_a_paused_speech_at_once() -> None:
    check_disallow_interruptions_resumes_a_paused_speech()


def test_disallow_interruptions_not_resuming_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    def disallow_interruptions(self: RunContext[Any]) -> None:
        self.speech_handle.allow_interruptions = False  # protect, leave livekit's pause alone

    monkeypatch.setattr(RunContext, "disallow_interruptions", disallow_interruptions)
    with pytest.raises(AssertionError, match="no longer resumes a paused speech"):
        check_disallow_interruptions_resumes_a_paused_speech()


def _function_sources(cls: type) -> Iterator[tuple[str, str]]:
    for name, member in vars(cls).items():
        if inspect.isfunction(member):
            yield name, inspect.getsource(member)


def check_livekit_closes_without_shutdown() -> None:
    message = _change("test_livekit_closes_on_its_own_without_shutdown")
    for cls in (RoomIO, AgentSession):
        for name, source in _function_sources(cls):
            if name == "shutdown":
                continue
            for call in ("self.shutdown(", "_agent_session.shutdown(", "session.shutdown("):
                assert call not in source, f"{message}: {cls.__name__}.{name} calls {call}"


def test_livekit_closes_on_its_own_without_shutdown() -> None:
    check_livekit_closes_without_shutdown()


def test_livekit_closing_through_shutdown_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    def on_participant_disconnected(self: Any, participant: Any) -> None:
        self._agent_session.shutdown()

    name = next(n for n, s in _function_sources(RoomIO) if "PARTICIPANT_DISCONNECTED" in s)
    monkeypatch.setattr(RoomIO, name, on_participant_disconnected)
    with pytest.raises(AssertionError, match="closes the session through"):
        check_livekit_closes_without_shutdown()


def check_end_call_tool_hangs_up_from_its_speech() -> None:
    message = _change("test_end_call_tool_hangs_up_from_its_speech_done_callback")
    sources = dict(_function_sources(EndCallTool))
    tool_body = next((s for s in sources.values() if "add_done_callback" in s), None)
    assert tool_body is not None, f"{message}: no speech done callback"
    assert "ctx.speech_handle.add_done_callback" in tool_body, message
    assert "ctx.session.shutdown()" in tool_body, f"{message}: no session.shutdown()"
    assert "same speech handle" in tool_body, f"{message}: the tool reply has its own handle"
    on_close = next((s for s in sources.values() if "job_ctx.shutdown(" in s), None)
    assert on_close is not None, f"{message}: the job is no longer shut down on close"


def test_end_call_tool_hangs_up_from_its_speech_done_callback() -> None:
    check_end_call_tool_hangs_up_from_its_speech()


def test_end_call_tool_ending_calls_otherwise_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    name = next(n for n, s in _function_sources(EndCallTool) if "add_done_callback" in s)

    async def end_call(self: Any, ctx: RunContext[Any]) -> None:
        ctx.session.shutdown()

    monkeypatch.setattr(EndCallTool, name, end_call)
    with pytest.raises(AssertionError, match="changed how EndCallTool ends the call"):
        check_end_call_tool_hangs_up_from_its_speech()


def check_session_closing() -> None:
    from resilient_agent._livekit.compat import session_closing

    message = _change("test_session_closing_is_where_compat_expects_it")

    async def check() -> None:
        session: AgentSession[Any] = AgentSession()
        assert not session_closing(session), message
        session.shutdown()  # the close begins at once, in a task
        assert session_closing(session), message
        await session.aclose()

    asyncio.run(check())


def test_session_closing_is_where_compat_expects_it() -> None:
    check_session_closing()


def test_session_closing_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(AgentSession, "_is_closing")
    with pytest.raises(AssertionError, match=re.escape("moved AgentSession._is_closing")):
        check_session_closing()


# -- behavioural tripwires: public livekit behaviour the library relies on --------------------
# Each failure message names the livekit change and what in resilient-agent depends on it. The
# interception layer's own tripwires (interrupt() on protected speech, disallow_interruptions()
# resuming a paused speech) live in their own section.

import contextlib  # noqa: E402

from livekit import rtc  # noqa: E402
from livekit.agents import stt  # noqa: E402
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS  # noqa: E402
from livekit.agents.voice.agent_session import AgentSessionOptions  # noqa: E402
from livekit.agents.voice.io import (  # noqa: E402
    AudioInput,
    AudioOutput,
    AudioOutputCapabilities,
    PlaybackFinishedEvent,
)
from resilient_agent.middleware.playout_ledger import PlayoutLedger  # noqa: E402

from resilient_agent import ConversationState, Middleware, MiddlewareContext  # noqa: E402
from resilient_agent._session.audio_observer import AudioObserver  # noqa: E402


class _Sink(AudioOutput):
    """The smallest audio output: records nothing, reports nothing by itself."""

    def __init__(self) -> None:
        super().__init__(label="tripwire", capabilities=AudioOutputCapabilities(pause=True))

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)

    def flush(self) -> None:
        super().flush()

    def clear_buffer(self) -> None:
        pass


def _frame() -> rtc.AudioFrame:
    return rtc.AudioFrame(b"\0\0" * 160, sample_rate=16000, num_channels=1, samples_per_channel=160)


def test_audio_output_counts_captured_segments_and_playout_reports() -> None:
    async def check() -> None:
        sink = _Sink()
        assert hasattr(sink, "captured_playout_segments"), (
            "livekit removed AudioOutput.captured_playout_segments (added in 1.7): the "
            "Watchdog's playout ledger turns itself off without it"
        )
        ctx = MiddlewareContext(
            session=None,  # type: ignore[arg-type]
            agent=None,  # type: ignore[arg-type]
            state=ConversationState(),
            emit=lambda _event: None,
        )
        ledger = PlayoutLedger(ctx, Middleware(), sink, lambda: 0.0)
        finished: list[PlaybackFinishedEvent] = []
        sink.on("playback_finished", finished.append)
        await sink.capture_frame(_frame())
        sink.flush()
        assert sink.captured_playout_segments == 1, (
            "livekit changed when AudioOutput counts a captured segment (capture_frame + flush): "
            "the Watchdog's playout ledger counts segments against playback_finished reports"
        )
        assert ledger.unreported == 1
        assert ledger.report_cleared_segment(), "the ledger no longer reports a lost playout"
        assert len(finished) == 1 and finished[0].interrupted, (
            "AudioOutput.on_playback_finished(interrupted=True) no longer emits "
            "playback_finished: the Watchdog reports lost playouts on the sink's behalf with it"
        )
        assert ledger.unreported == 0
        ledger.detach()

    asyncio.run(check())


def test_audio_output_pause_and_resume_are_public() -> None:
    sink = _Sink()
    assert sink.can_pause, (
        "AudioOutput.can_pause no longer follows AudioOutputCapabilities(pause=True): "
        "WaitForCaller holds protected speech with pause() only where it is true"
    )
    for method in ("pause", "resume"):
        assert callable(getattr(sink, method, None)), (
            f"livekit removed AudioOutput.{method}(): WaitForCaller holds protected speech "
            "over a speaking caller with it"
        )


def test_an_audio_input_is_read_through_its_own_class() -> None:
    class Source(AudioInput):
        async def __anext__(self) -> rtc.AudioFrame:
            return _frame()

    class Observed(Source):
        __slots__ = ()

        async def __anext__(self) -> rtc.AudioFrame:
            seen.append("observed")
            return await Source.__anext__(self)

    seen: list[str] = []
    change = _change("test_an_audio_input_is_read_through_its_own_class")

    async def check() -> None:
        source = Source(label="source")
        assert source.__aiter__() is source, f"{change}: __aiter__ no longer returns the input"
        source.__class__ = Observed
        async for _frame_read in source:
            break
        assert seen == ["observed"], change

    asyncio.run(check())


def test_replacing_the_audio_input_detaches_the_old_one() -> None:
    events: list[str] = []

    class Source(AudioInput):
        def on_detached(self) -> None:
            stored = session.input.audio
            events.append(f"{self.label} detached, the session's input: {stored and stored.label}")

    change = _change("test_replacing_the_audio_input_detaches_the_old_one")

    async def check() -> None:
        nonlocal session
        session = AgentSession[None]()
        session.input.audio = Source(label="old")
        session.input.audio = Source(label="new")

    session: Any = None
    asyncio.run(check())
    assert events == ["old detached, the session's input: old"], f"{change}: {events}"


def test_audio_input_chains_a_source() -> None:
    class Source(AudioInput):
        async def __anext__(self) -> rtc.AudioFrame:
            return _frame()

    async def check() -> None:
        source = Source(label="source")
        observer = AudioObserver(source)
        seen: list[float] = []
        observer.callbacks.append(lambda _frame, at: seen.append(at))
        assert observer.source is source, (
            "AudioInput(source=...) no longer keeps its source: the fallback audio observer "
            "sits in front of the session's input that way, as livekit's recorder does"
        )
        frame = await observer.__anext__()
        assert frame.samples_per_channel == 160 and len(seen) == 1

    asyncio.run(check())


def test_session_options_read_by_turn_keeper_and_withheld_audio() -> None:
    async def session_options() -> AgentSessionOptions:
        return AgentSession[None]().options

    options = asyncio.run(session_options())
    interruption = options.interruption
    assert "discard_audio_if_uninterruptible" in interruption, (
        "livekit moved AgentSession.options.interruption['discard_audio_if_uninterruptible']: "
        "the TurnKeeper's withheld-audio tap reads it to know when the STT hears silence"
    )
    assert interruption["discard_audio_if_uninterruptible"] is True, (
        "livekit changed the default of discard_audio_if_uninterruptible (True since 1.3.11): "
        "see docs/turn-keeping.md, the withheld-audio recovery assumes the STT is fed silence"
    )
    assert hasattr(options, "aec_warmup_duration"), (
        "livekit removed AgentSession.options.aec_warmup_duration: the TurnKeeper's AEC "
        "warm-up clock reads it"
    )
    turn_handling = options.turn_handling
    endpointing = turn_handling.get("endpointing", {})
    assert "min_delay" in endpointing and "max_delay" in endpointing, (
        "livekit moved options.turn_handling['endpointing'] min_delay/max_delay: the "
        "TurnKeeper waits that long for livekit's own turn before answering dropped words"
    )
    assert "turn_detection" in turn_handling, (
        "livekit moved options.turn_handling['turn_detection']: the TurnKeeper reads it to pick "
        "min_delay or max_delay"
    )


def test_speech_handle_public_state() -> None:
    async def check() -> None:
        handle = SpeechHandle.create(allow_interruptions=False)
        assert handle.allow_interruptions is False and not handle.interrupted, (
            "SpeechHandle.allow_interruptions / interrupted changed: every middleware reads them "
            "to tell protected speech"
        )
        done: list[SpeechHandle] = []
        handle.add_done_callback(done.append)
        assert not handle.done()

    asyncio.run(check())


def test_agent_update_options_swaps_stt_and_vad() -> None:
    parameters = inspect.signature(Agent.update_options).parameters
    for name in ("stt", "vad"):
        assert name in parameters, (
            f"Agent.update_options({name}=...) is gone: the Watchdog restarts a stuck VAD and "
            "STT recovery restarts a dead STT stream through it"
        )


def test_names_the_library_imports_exist() -> None:
    # 1.5 and older lack these: the library does not import there (docs/versions.md)
    from livekit.agents import RunContext, StopResponse, inference, llm

    assert hasattr(llm, "Tool") and hasattr(llm, "Toolset"), "llm.Tool / llm.Toolset moved"
    assert hasattr(llm.ToolFlag, "CANCELLABLE"), (
        "ToolFlag.CANCELLABLE is gone: ToolGuard's cancel policy is the default for those tools"
    )
    assert RunContext is not None and StopResponse is not None
    assert hasattr(inference, "VAD"), "inference.VAD moved: the lab's real-speech VAD uses it"


def test_plain_exception_in_stt_stream_is_an_unrecoverable_error() -> None:
    class DyingStream(stt.RecognizeStream):
        async def _run(self) -> None:
            raise RuntimeError("connection dropped")

    class DyingSTT(stt.STT):
        def __init__(self) -> None:
            capabilities = stt.STTCapabilities(streaming=True, interim_results=False)
            super().__init__(capabilities=capabilities)

        async def _recognize_impl(self, *_args: object, **_kwargs: object) -> stt.SpeechEvent:
            raise NotImplementedError

        def stream(self, **_kwargs: object) -> stt.RecognizeStream:
            return DyingStream(stt=self, conn_options=DEFAULT_API_CONNECT_OPTIONS)

    async def check() -> None:
        recognizer = DyingSTT()
        errors: list[stt.STTError] = []
        recognizer.on("error", errors.append)
        stream = recognizer.stream()
        with contextlib.suppress(RuntimeError):
            async for _event in stream:
                pass
        await stream.aclose()
        assert len(errors) == 1 and not errors[0].recoverable, (
            "a plain exception in an STT stream no longer emits one unrecoverable STTError: "
            "SttRecovery restarts the stream on that evidence (livekit's own pipeline recreates "
            "the stream only after an APIError)"
        )
        assert isinstance(errors[0].error, RuntimeError)

    asyncio.run(check())


def check_tool_call_releasable() -> None:
    from livekit.agents import Agent as PlainAgent

    from resilient_agent._livekit.compat import tool_call_releasable
    from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

    message = _change("test_tool_call_releasable_is_where_compat_expects_it")
    seen: list[bool] = []

    def build(base: type[PlainAgent]) -> PlainAgent:
        class Lookup(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            @function_tool
            async def look_up(self, ctx: RunContext[None]) -> str:
                """Look it up."""
                seen.append(tool_call_releasable(ctx))
                await ctx.update("still looking")
                seen.append(tool_call_releasable(ctx))
                return "found"

        return Lookup()

    scenario = Scenario(
        name="t/release",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.0, "look it up", expect_reply=False),),
        llm=(LLMRule(when_user_says="look", tool_calls=(ToolCallScript("look_up"),)),),
        duration=6.0,
    )
    run_scenario(scenario, PlainAgent)
    assert seen == [True, False], f"{message}: releasable before/after update() was {seen}"


def test_tool_call_releasable_is_where_compat_expects_it() -> None:
    check_tool_call_releasable()


def test_tool_call_releasable_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_FIRST_UPDATE", "_first_update_future")  # livekit renamed it
    with pytest.raises(AssertionError, match=re.escape("moved RunContext._first_update_fut")):
        check_tool_call_releasable()


def check_inference_speech() -> None:
    from livekit.agents import Agent as PlainAgent
    from livekit.agents.voice import SpeechCreatedEvent

    from resilient_agent._livekit.compat import inference_speech
    from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

    message = _change("test_inference_speech_is_where_compat_expects_it")
    created: list[Any] = []
    inferred: list[Any] = []

    def build(base: type[PlainAgent]) -> PlainAgent:
        class Probe(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            async def on_enter(self) -> None:
                def on_created(ev: SpeechCreatedEvent) -> None:
                    created.append(ev.speech_handle)

                self.session.on("speech_created", on_created)

            def llm_node(self, chat_ctx: Any, tools: Any, model_settings: Any) -> Any:
                inferred.append(inference_speech())
                return super().llm_node(chat_ctx, tools, model_settings)

            @function_tool
            async def look_up(self) -> str:
                """Look it up."""
                return "found"

        return Probe()

    scenario = Scenario(
        name="t/inference_speech",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.0, "look it up", expect_reply=False),),
        llm=(
            LLMRule(when_user_says="look", tool_calls=(ToolCallScript("look_up"),)),
            LLMRule(text="Found it.", after_tool="look_up"),
        ),
        duration=6.0,
    )
    run_scenario(scenario, PlainAgent)
    assert inference_speech() is None, "a speech outside livekit's speech tasks"
    assert len(created) == 1, "the lab's call no longer makes one speech"
    # the tool reply's inference runs in the speech that called the tool
    assert inferred == [created[0], created[0]], f"{message}: inferences saw {inferred}"


def test_inference_speech_is_where_compat_expects_it() -> None:
    check_inference_speech()


def test_inference_speech_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_SPEECH_CONTEXT_VAR", "_SpeechContextVar")  # livekit renamed it
    with pytest.raises(
        AssertionError, match=re.escape("moved agent_activity._SpeechHandleContextVar")
    ):
        check_inference_speech()


def check_queued_speeches() -> None:
    from livekit.agents import Agent as PlainAgent

    from resilient_agent._livekit.compat import queued_speeches
    from resilient_agent.testing import Scenario, run_scenario

    message = _change("test_queued_speeches_is_where_compat_expects_it")
    seen: dict[str, Any] = {}

    def build(base: type[PlainAgent]) -> PlainAgent:
        class Queueing(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            async def on_enter(self) -> None:
                session = self.session
                seen["current"] = session.say("A long first sentence to be queued behind.")
                seen["queued"] = [session.say("Second."), session.say("Third.")]
                self._probe = asyncio.get_running_loop().create_task(self._look())

            async def _look(self) -> None:
                await asyncio.sleep(1.0)  # app code on the virtual clock: the first one plays
                seen["current_then"] = self.session.current_speech
                seen["found"] = queued_speeches(self.session)

        return Queueing()

    scenario = Scenario(name="t/queue", family="t", description="", agent=build, utterances=())
    run_scenario(dataclasses.replace(scenario, duration=6.0), PlainAgent)
    assert seen["current_then"] is seen["current"], "the lab no longer plays the first speech"
    assert seen["found"] == seen["queued"], f"{message}: found {seen['found']}"


def test_queued_speeches_is_where_compat_expects_it() -> None:
    check_queued_speeches()


def test_queued_speeches_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_SPEECH_QUEUE", "_speech_queue")  # livekit renamed it
    with pytest.raises(AssertionError, match=re.escape("moved AgentActivity._speech_q")):
        check_queued_speeches()


def check_session_trace_context() -> None:
    from livekit.agents import Agent as PlainAgent
    from livekit.agents.telemetry import set_tracer_provider
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    from resilient_agent._livekit.compat import session_trace_context
    from resilient_agent.testing import Scenario, run_scenario

    message = _change("test_session_trace_context_is_where_compat_expects_it")
    seen: dict[str, Any] = {}

    def build(base: type[PlainAgent]) -> PlainAgent:
        class Probe(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            async def on_enter(self) -> None:
                seen["session"] = self.session
                context = session_trace_context(self.session)
                seen["span"] = None if context is None else trace.get_current_span(context)

        return Probe()

    scenario = Scenario(name="t/trace", family="t", description="", agent=build, utterances=())
    provider = TracerProvider()
    set_tracer_provider(provider)
    try:
        run_scenario(dataclasses.replace(scenario, duration=2.0), PlainAgent)
    finally:
        # back on the global provider (the API's proxy): no OTel global is set by this test
        set_tracer_provider(trace.get_tracer_provider())
        provider.shutdown()
    span = seen.get("span")
    assert isinstance(span, ReadableSpan), f"{message}: found {span!r}"
    assert span.name == "agent_session", f"{message}: the span found is {span.name}"
    assert session_trace_context(seen["session"]) is None, f"{message}: not cleared at the close"


def test_session_trace_context_is_where_compat_expects_it() -> None:
    check_session_trace_context()


def test_session_trace_context_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_ROOT_SPAN_CONTEXT", "_session_context")  # livekit renamed it
    with pytest.raises(AssertionError, match=re.escape("moved AgentSession._root_span_context")):
        check_session_trace_context()


# -- the offline room: the livekit.rtc internals resilient_agent.testing.room builds on ---------

_OFFLINE_ROOM = "test_offline_room_internals_are_where_compat_expects_them"

# each relied-on internal: the _compat constant naming it, and a name livekit could move it to
_OFFLINE_ROOM_NAMES: dict[str, tuple[str, str]] = {
    "rtc._proto": ("_PROTO", "livekit.rtc._protocol"),
    "Room._room_queue": ("_ROOM_QUEUE", "_event_queue"),
    "Room._info": ("_ROOM_INFO", "_room_info"),
    "Room._local_participant": ("_ROOM_LOCAL_PARTICIPANT", "_participant"),
    "TrackPublication._track": ("_PUBLICATION_TRACK", "_local_track"),
    "LocalParticipant._track_publications": ("_TRACK_PUBLICATIONS", "_publications"),
}


def check_offline_room_internal(key: str) -> None:
    from resilient_agent._livekit.compat import (
        LivekitMoved,
        link_publication_track,
        local_track_publications,
        room_event_queue,
        set_room_local_participant,
        set_room_name,
        unowned_participant,
        unowned_track_publication,
    )

    message = _change(f"{_OFFLINE_ROOM}[{key}]")

    def participant_of(room: rtc.Room) -> rtc.LocalParticipant:
        return rtc.LocalParticipant(room_event_queue(room), unowned_participant("agent"))

    def publication(sid: str) -> rtc.LocalTrackPublication:
        return rtc.LocalTrackPublication(
            unowned_track_publication(
                sid=sid,
                name="tripwire",
                kind=rtc.TrackKind.KIND_AUDIO,
                source=rtc.TrackSource.SOURCE_MICROPHONE,
            )
        )

    async def check() -> None:
        room = rtc.Room()  # binds the running loop, as OfflineRoom does
        if key == "rtc._proto":
            owned = unowned_participant("agent")
            assert owned.handle.id == 0, f"{message}: the participant owns handle {owned.handle}"
            assert (owned.info.sid, owned.info.identity) == ("PA_agent", "agent"), message
            published = publication("TR_tripwire").sid
            assert published == "TR_tripwire", f"{message}: the publication's sid is {published}"
        elif key == "Room._room_queue":
            queue = room_event_queue(room)
            for method in ("subscribe", "unsubscribe", "put_nowait"):
                assert callable(getattr(queue, method, None)), f"{message}: no {method}()"
            assert participant_of(room).identity == "agent", message
        elif key == "Room._info":
            set_room_name(room, "tripwire-room")
            assert room.name == "tripwire-room", f"{message}: room.name is {room.name!r}"
        elif key == "Room._local_participant":
            participant = participant_of(room)
            set_room_local_participant(room, participant)
            assert room.local_participant is participant, message
        elif key == "TrackPublication._track":
            source = rtc.AudioSource(48_000, 1)
            track = rtc.LocalAudioTrack.create_audio_track("tripwire", source)
            linked = publication("TR_tripwire")
            link_publication_track(linked, track)
            assert linked.track is track, f"{message}: publication.track is {linked.track}"
            await source.aclose()
        elif key == "LocalParticipant._track_publications":
            participant = participant_of(room)
            published = publication("TR_tripwire")
            local_track_publications(participant)["TR_tripwire"] = published
            shown = dict(participant.track_publications)
            assert shown == {"TR_tripwire": published}, f"{message}: track_publications {shown}"
            local_track_publications(participant).pop("TR_tripwire")
            assert not participant.track_publications, message
        else:
            raise AssertionError(f"no check for {key}")

    try:
        asyncio.run(check())
    except LivekitMoved as moved:
        raise AssertionError(f"{message}: {moved}") from moved


def test_every_offline_room_internal_is_pinned() -> None:
    pinned = {r.tripwire for r in RELIED_ON if r.tripwire.startswith(_OFFLINE_ROOM)}
    assert pinned == {f"{_OFFLINE_ROOM}[{key}]" for key in _OFFLINE_ROOM_NAMES}


@pytest.mark.parametrize("key", list(_OFFLINE_ROOM_NAMES))
def test_offline_room_internals_are_where_compat_expects_them(key: str) -> None:
    check_offline_room_internal(key)


@pytest.mark.parametrize("key", list(_OFFLINE_ROOM_NAMES))
def test_offline_room_internal_moved_trips(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    constant, moved_to = _OFFLINE_ROOM_NAMES[key]
    monkeypatch.setattr(compat, constant, moved_to)  # livekit renamed it
    with pytest.raises(AssertionError, match=re.escape(_change(f"{_OFFLINE_ROOM}[{key}]"))):
        check_offline_room_internal(key)


def test_offline_room_proto_message_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    from livekit.rtc._proto import participant_pb2

    monkeypatch.delattr(participant_pb2, "OwnedParticipant")  # livekit renamed the message
    with pytest.raises(AssertionError, match=re.escape("participant_pb2 has no OwnedParticipant")):
        check_offline_room_internal("rtc._proto")


def test_a_gemini_live_model_keeps_its_options_where_the_lab_redirects_them() -> None:
    google = pytest.importorskip("livekit.plugins.google", exc_type=ImportError)
    from google.genai import types

    from resilient_agent._livekit.compat import redirect_realtime_http

    model = google.realtime.RealtimeModel(api_key="app-key", voice="Kore")
    options = types.HttpOptions(base_url="https://127.0.0.1:1")
    assert redirect_realtime_http(model, options, "lab-key"), (
        "livekit-plugins-google moved RealtimeModel._opts.http_options / api_key"
    )
    assert model._opts.http_options is options and model._opts.api_key == "lab-key"
    assert model._opts.voice == "Kore"


def test_an_openai_realtime_model_keeps_its_endpoint_where_the_lab_redirects_it() -> None:
    openai = pytest.importorskip("livekit.plugins.openai", exc_type=ImportError)

    from resilient_agent._livekit.compat import plugin_options

    model = openai.realtime.RealtimeModel(api_key="app-key", voice="cedar")
    options = plugin_options(model, "base_url", "api_key", "is_azure")
    assert options is not None, (
        "livekit-plugins-openai moved RealtimeModel._opts.base_url / api_key / is_azure"
    )
    # the plugin reads them each time it opens a socket (tests/test_openai_realtime.py runs an
    # app's own model redirected so)
    assert not options.is_azure and options.voice == "cedar"


def check_livekit_session_report() -> None:
    from livekit.agents import Agent as PlainAgent

    from resilient_agent._livekit.compat import livekit_session_report
    from resilient_agent.testing import Scenario, Utterance, run_scenario

    call = Scenario(
        name="t/report",
        family="t",
        description="",
        agent=lambda base: base(instructions="t"),
        utterances=(Utterance(1.0, 2.0, "hello there"),),
        duration=5.0,
    )
    world, _ = run_scenario(call, PlainAgent)
    report = livekit_session_report(world.session, job_id="j", room_id="r", room="t")
    assert report is not None, "livekit moved JobContext.make_session_report or its event record"
    kinds = {e["type"] for e in report.to_dict()["events"]}
    assert {"user_state_changed", "user_input_transcribed", "close"} <= kinds, kinds


def test_livekit_session_report_is_where_compat_expects_it() -> None:
    check_livekit_session_report()


def test_livekit_session_report_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    from livekit.agents import JobContext

    monkeypatch.delattr(JobContext, "make_session_report")  # livekit moved it
    with pytest.raises(AssertionError, match=r"moved JobContext\.make_session_report"):
        check_livekit_session_report()


def check_event_listeners() -> None:
    from resilient_agent._livekit.compat import event_listeners

    message = _change("test_event_listeners_is_where_compat_expects_it")

    async def check() -> None:
        session: AgentSession[Any] = AgentSession()
        before = event_listeners(session, "close")
        assert before is not None, message
        session.once("close", lambda _ev: None)
        after = event_listeners(session, "close")
        assert after is not None and len(after) == len(before) + 1, message
        (added,) = [cb for cb in after if cb not in before]
        session.off("close", added)
        assert event_listeners(session, "close") == before, message

    asyncio.run(check())


def test_event_listeners_is_where_compat_expects_it() -> None:
    check_event_listeners()


def test_event_listeners_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_LISTENERS", "_listeners")  # livekit renamed it
    with pytest.raises(AssertionError, match=re.escape("moved EventEmitter._events")):
        check_event_listeners()


def check_last_event_listener() -> None:
    from resilient_agent._engine.fanout import NOT_KNOWN
    from resilient_agent._livekit.compat import last_event_listener

    message = _change("test_last_event_listener_is_where_compat_expects_it")

    async def check() -> None:
        session: AgentSession[Any] = AgentSession()
        heard: list[str] = []

        def first(_ev: object) -> None:
            heard.append("first")

        def second(_ev: object) -> None:
            heard.append("second")

        assert last_event_listener(session, "tick") is None, message
        session.on("tick", first)
        session.on("tick", second)
        if isinstance(getattr(session, "_events", {}).get("tick"), set):
            # livekit-agents 1.8.0's emitter keeps a set: no order, so no run to join
            assert last_event_listener(session, "tick") is NOT_KNOWN, message
            return
        assert last_event_listener(session, "tick") is second, message
        session.emit("tick", None)  # type: ignore[arg-type]
        assert heard == ["first", "second"], message  # the last registered is called last
        session.off("tick", second)
        assert last_event_listener(session, "tick") is first, message

    asyncio.run(check())


def test_last_event_listener_is_where_compat_expects_it() -> None:
    check_last_event_listener()


def test_last_event_listener_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_LISTENERS", "_listeners")  # livekit renamed it
    from livekit import rtc

    assert compat.last_event_listener(rtc.EventEmitter(), "close") is compat.NOT_KNOWN
    with pytest.raises(AssertionError, match=re.escape("changed the order or place")):
        check_last_event_listener()


def check_awaiting_a_speech_never_cancels_it() -> None:
    message = _change("test_awaiting_a_speech_never_cancels_it")

    async def check() -> None:
        handle = SpeechHandle.create()
        handle._generations.append(asyncio.get_running_loop().create_future())
        never = asyncio.get_running_loop().create_future()
        waits = [
            handle.wait_for_playout,
            lambda: _await(handle),
            handle._wait_for_generation,  # what RunContext.wait_for_playout() awaits
            lambda: handle.wait_if_not_interrupted([never]),
        ]
        for wait in waits:
            task = asyncio.ensure_future(wait())
            await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert not handle.done() and not handle.interrupted, message
            assert not handle._generations[-1].cancelled(), message
            assert not never.cancelled(), message

    asyncio.run(check())


async def _await(handle: SpeechHandle) -> None:
    await handle


def test_awaiting_a_speech_never_cancels_it() -> None:
    check_awaiting_a_speech_never_cancels_it()


def test_awaiting_a_speech_unshielded_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unshielded(self: SpeechHandle) -> None:
        await self._done_fut

    monkeypatch.setattr(SpeechHandle, "wait_for_playout", unshielded)
    with pytest.raises(AssertionError, match="no longer shields"):
        check_awaiting_a_speech_never_cancels_it()


def test_the_provider_plugins_keep_the_endpoints_the_lab_redirects() -> None:
    # the lab points an app's own instances at its emulators through these (testing/redirect.py)
    cartesia = pytest.importorskip("livekit.plugins.cartesia", exc_type=ImportError)
    google = pytest.importorskip("livekit.plugins.google", exc_type=ImportError)
    openai = pytest.importorskip("livekit.plugins.openai", exc_type=ImportError)

    from resilient_agent._livekit.compat import plugin_client, plugin_options

    tts = cartesia.TTS(api_key="k", base_url="https://example.invalid")
    assert plugin_options(tts, "base_url") is not None, (
        "livekit-plugins-cartesia moved TTS._opts.base_url"
    )
    assert plugin_options(tts, "base_url").base_url == "https://example.invalid"
    gemini = google.LLM(api_key="k")
    assert plugin_options(gemini, "http_options", "vertexai") is not None, (
        "livekit-plugins-google moved LLM._opts.http_options / vertexai"
    )
    for plugin in (openai.LLM(api_key="k"), openai.STT(api_key="k")):
        client = plugin_client(plugin)
        assert client is not None, f"livekit-plugins-openai moved {type(plugin).__name__}._client"
        client.base_url = "http://127.0.0.1:1/v1"
        assert str(client.base_url) == "http://127.0.0.1:1/v1/"


from pathlib import Path  # noqa: E402


def check_place_played_audio(folder: Path) -> None:
    from livekit.agents import Agent as PlainAgent

    from resilient_agent.lab.catalog import CATALOG
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.audio_recording import AGENT_CHANNEL, recorded_channel
    from resilient_agent.testing.session_report import session_report

    message = _change("test_place_played_audio_is_where_compat_expects_it")
    # the answer to the second question plays from 17.6 s to 19.35 s of the call
    scenario = next(s for s in CATALOG if s.name == "provider/tts_returns_silence")
    world, _ = run_scenario(scenario, PlainAgent, record_audio=folder / "call.ogg")
    report = session_report(world)
    agent, _ = recorded_channel(folder / "call.ogg", AGENT_CHANNEL)
    offset = report["audio_recording_started_at"] - report["events"][0]["created_at"]
    first, last = (round((t - offset) * 16_000) for t in (17.8, 19.2))
    assert abs(agent[first:last].astype(int)).max() > 1_000, message


def test_place_played_audio_is_where_compat_expects_it(tmp_path: Path) -> None:
    check_place_played_audio(tmp_path)


def test_place_played_audio_moved_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_RECORDER_PUT", "_put_item")  # livekit renamed it
    monkeypatch.setattr(compat, "_RECORDER_QUEUE", "_queue")  # and its 1.8.0 queue
    with pytest.raises(AssertionError, match=re.escape("moved RecorderIO._put")):
        check_place_played_audio(tmp_path)


def check_frame_buffer() -> None:
    from livekit import rtc

    from resilient_agent._livekit.compat import frame_buffer_reader

    message = _change("test_frame_buffer_is_where_compat_expects_it")
    frame = rtc.AudioFrame(b"\x01\x00\xff\x7f", 16000, 1, 2)
    read = frame_buffer_reader()
    assert read(frame) is frame.data.obj, message


def test_frame_buffer_is_where_compat_expects_it() -> None:
    check_frame_buffer()


def test_frame_buffer_moved_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_FRAME_BUFFER", "_samples")  # livekit renamed it
    with pytest.raises(AssertionError, match=re.escape("moved AudioFrame._data")):
        check_frame_buffer()


def test_a_moved_frame_buffer_reads_the_public_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from livekit import rtc

    import resilient_agent._livekit.compat as compat

    monkeypatch.setattr(compat, "_FRAME_BUFFER", "_samples")
    frame = rtc.AudioFrame(b"\x01\x00\xff\x7f", 16000, 1, 2)
    read = compat.frame_buffer_reader()
    assert np.frombuffer(read(frame), np.int16).tolist() == [1, 32767]
