"""Fails loudly when livekit moves a private name resilient-agent depends on."""

from __future__ import annotations

import asyncio
import contextlib
import inspect

from livekit import rtc
from livekit.agents import Agent, AgentSession, stt
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS
from livekit.agents.voice.agent_session import AgentSessionOptions
from livekit.agents.voice.io import (
    AudioInput,
    AudioOutput,
    AudioOutputCapabilities,
    PlaybackFinishedEvent,
)
from livekit.agents.voice.speech_handle import SpeechHandle
from resilient_agent.middleware.playout_ledger import PlayoutLedger

from resilient_agent._compat import speech_interrupted_future, speech_scheduled_future
from resilient_agent.audio_observer import AudioObserver


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


# -- behavioural tripwires: public livekit behaviour the library relies on --------------------
# Each failure message names the livekit change and what in resilient-agent depends on it. The
# interception layer's own tripwires (interrupt() on protected speech, disallow_interruptions()
# resuming a paused speech) live in their own section.


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
        ledger = PlayoutLedger(sink, lambda: 0.0)
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
            "AudioInput(source=...) no longer keeps its source: the chain's audio observer "
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
