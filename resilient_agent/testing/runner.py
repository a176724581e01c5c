"""Runs a :class:`Scenario` against a real ``AgentSession`` on virtual time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from livekit.agents import Agent, AgentSession, mock_tools
from livekit.agents.llm import RealtimeModel
from livekit.agents.utils import is_given
from livekit.agents.voice.room_io import TextInputEvent, TextInputOptions
from livekit.agents.voice.turn import EndpointingOptions, InterruptionOptions, TurnHandlingOptions
from livekit.rtc import EventEmitter
from typing_extensions import TypeIs

from .._livekit.compat import close_as_caller_left
from .audio import (
    RECORDED_SPEECH_LEVEL,
    PlayedSegment,
    PlayoutAudioOutput,
    ScriptedAudioInput,
    SpeechWindow,
)
from .audio_recording import AudioRecording, RecorderIO, start_audio_recording
from .clock import run_virtual
from .contracts import CallOutcome, evaluate
from .emulators import (
    CartesiaEmulator,
    DeepgramEmulator,
    DeepgramFaults,
    GeminiLiveEmulator,
    GeminiLiveFaults,
    OpenAIEmulator,
    OpenAIRealtimeEmulator,
    OpenAIRealtimeFaults,
    ScheduledUtterance,
)
from .job import JobRecorder, recorded_job_context
from .later_agents import LaterAgents, PluginRule, watch_later_agents
from .llm import ScriptedLLM
from .real_speech import LabRecognizer
from .realtime import ScriptedRealtimeModel
from .recorder import CallRecorder, LivekitLogCapture
from .redirect import (
    NotRedirectable,
    app_http_context,
    close_app_plugins,
    close_plugins,
    redirect_app_plugins,
    redirect_plugin,
    redirect_realtime_plugin,
    refuse_provider_plugin,
    refuse_provider_plugins,
)
from .scenario import Scenario, Typed, load_utterance_audio
from .silero import UnmarkedSileroVAD
from .stt import ScriptedSTT
from .tool_mocks import by_name
from .tts import ScriptedTTS
from .vad import SILENCE_TO_END_SPEECH, ScriptedVAD

if TYPE_CHECKING:
    from .stacks import RunningRealtimeStack, RunningStack

__all__ = ["CallWorld", "run_scenario", "run_scenario_async"]

_LIVEKIT_LOGGER = "livekit.agents"
# What RoomIO logs when the text input callback raises; the message is lost.
TEXT_INPUT_FAILED_LOG = "failed to handle chat text stream"
# After the scripted call, how long the session may go on finishing what it started.
_SETTLE_SECONDS = 8.0
# A session that cannot close within this many seconds is deadlocked.
CLOSE_BOUND_SECONDS = 10.0


@dataclass
class CallWorld:
    """Everything one lab call is made of; tests may inspect any part after the run.

    Attributes:
        scenario: The script.
        session: The real livekit session.
        agent: The app's agent.
        audio_in: The caller's microphone.
        audio_out: The caller's speaker.
        vad: The scripted VAD; None in a realtime call (its server detects turns).
        stt: The scripted STT, or the recognizer of a real-speech call; in a realtime call, the
            realtime model, which hears the caller itself (its ``finals``).
        llm: The scripted LLM, or the realtime model.
        tts: The scripted TTS (an espeak-ng voice in a real-speech call); in a realtime call,
            the realtime model, whose audio is marked the same way (its ``sentences``).
        recorder: Session events.
        job: Hang-up requests.
        logs: livekit's warnings.
        t0: Loop time at which the call started (fakes record loop time).
        end_user_state: ``user_state`` when the scripted call was over.
        ended_at: Call seconds when the scripted call was over.
        closed_by_app: Whether the app closed the session before the script ended (a close
            after the caller left is livekit's, not the app's).
        caller_left_at: Call seconds when the caller left the room, if the script says so.
        close_deadlocked: Whether closing the session did not finish within the bound.
        unfinished_handles: Ids of the speech handles not done by then.
        wall_seconds: Real seconds the run took.
        virtual_seconds: Call seconds simulated.
        connections: On a provider stack, the websocket connections and HTTP requests the call
            opened at each emulator (``"deepgram-emulator ws /v1/listen": 2``).
        redirected: On a pipeline stack, the agent's own plugin instances pointed at the
            emulators (``"deepgram.STT(model='nova-3')"``), their options kept; then those of
            the agents livekit started later in the call (``"Specialist's own openai.LLM(...)"``).
        later_agents: What the lab did with the own plugins of the agents livekit started
            later in the call: those it redirected, and those it refused (could not redirect,
            or, without a stack, provider plugins), each kept from its provider, the session's
            own playing its part, and the call failed.
        audio_recording: The call's audio as livekit's recorder wrote it, when it was recorded.
        transcript_lag_s: On a stack whose STT transcribes an utterance only once the VAD
            ended it (a non-streaming one), the longest transcription request of the call: no
            transcript of the caller's words, and so no answer, can exist sooner after the
            VAD's end of speech than that, where the scripted STT's final is already in. The
            reply bounds of spoken inputs count from then (0.0 elsewhere).
    """

    scenario: Scenario
    session: AgentSession[Any]
    agent: Agent
    audio_in: ScriptedAudioInput
    audio_out: PlayoutAudioOutput
    vad: ScriptedVAD | UnmarkedSileroVAD | None
    stt: (
        ScriptedSTT
        | LabRecognizer
        | ScriptedRealtimeModel
        | DeepgramEmulator
        | OpenAIEmulator
        | GeminiLiveEmulator
        | OpenAIRealtimeEmulator
    )
    llm: ScriptedLLM | ScriptedRealtimeModel
    tts: (
        ScriptedTTS
        | ScriptedRealtimeModel
        | CartesiaEmulator
        | GeminiLiveEmulator
        | OpenAIRealtimeEmulator
    )
    recorder: CallRecorder
    job: JobRecorder
    logs: LivekitLogCapture
    t0: float = 0.0
    end_user_state: str = "listening"
    ended_at: float = 0.0
    closed_by_app: bool = False
    caller_left_at: float | None = None
    race_events: list[dict[str, Any]] = field(default_factory=list)
    close_deadlocked: bool = False
    unfinished_handles: tuple[str, ...] = ()
    wall_seconds: float = 0.0
    virtual_seconds: float = 0.0
    connections: dict[str, int] = field(default_factory=dict)
    redirected: tuple[str, ...] = ()
    later_agents: LaterAgents = field(default_factory=LaterAgents)
    audio_recording: AudioRecording | None = None
    transcript_lag_s: float = 0.0


_TURN_HANDLING_KEYS = frozenset(TurnHandlingOptions.__annotations__) - {"interruption"}


def _session_options(scenario: Scenario) -> dict[str, Any]:
    turn_handling = TurnHandlingOptions(
        # a realtime model's server detects turns; livekit would ignore "vad" without a VAD
        turn_detection="vad" if scenario.model == "pipeline" else "realtime_llm",
        endpointing=EndpointingOptions(min_delay=0.5, max_delay=3.0),
        interruption=InterruptionOptions(min_duration=0.5, false_interruption_timeout=2.0),
        preemptive_generation={"enabled": False},
    )
    options: dict[str, Any] = {
        "turn_handling": turn_handling,
        "aec_warmup_duration": scenario.aec_warmup,
        "user_away_timeout": None,
    }
    for key, value in scenario.session_options.items():
        if key == "interruption":
            turn_handling["interruption"] = InterruptionOptions(
                **{**turn_handling["interruption"], **value}
            )
        elif key in _TURN_HANDLING_KEYS:
            # livekit 1.8 takes these inside ``turn_handling`` only
            turn_handling[key] = value  # type: ignore[literal-required]
        else:
            options[key] = value
    return options


async def run_scenario_async(
    scenario: Scenario,
    agent_class: type[Agent],
    *,
    stack: str | None = None,
    deepgram_faults: DeepgramFaults | None = None,
    record_audio: Path | None = None,
) -> CallWorld:
    """Run ``scenario`` with its agent built on ``agent_class``; must run on virtual time.

    With ``stack`` (a key of :data:`~resilient_agent.testing.stacks.STACKS`), a pipeline call
    runs on that stack's real provider plugins against local wire emulators. With
    ``record_audio``, livekit's own recorder writes the call's audio there (as
    ``record=True`` does in production; see :mod:`.audio_recording`).
    """
    from .stacks import STACKS, running_realtime_stack, running_stack

    spec = STACKS.get(stack) if stack is not None else None
    realtime = spec is not None and spec.realtime is not None
    plays = spec.realtime if spec is not None and realtime else "pipeline"
    if stack is None or scenario.model != plays:
        return await _run_call(scenario, agent_class, None, record_audio)
    t0 = asyncio.get_running_loop().time()
    _, words = _caller_audio(scenario)
    scripted = ScriptedLLM(scenario.llm, clock=lambda: asyncio.get_running_loop().time() - t0)
    if realtime:
        faults = scenario.provider_faults
        async with running_realtime_stack(
            stack,
            scripted=scripted,
            word_lookup=lambda u, w: words[(u, w)],
            gemini_live_faults=GeminiLiveFaults(
                drop_in_reply=faults.realtime_drop_in_reply,
                go_away_in_reply=faults.realtime_go_away_in_reply,
                error_in_reply=faults.realtime_error_in_reply,
                error_mid_reply=faults.realtime_error_mid_reply,
                error_after_reply=faults.realtime_error_after_reply,
            ),
            openai_realtime_faults=OpenAIRealtimeFaults(
                drop_in_reply=faults.realtime_drop_in_reply,
                error_in_reply=faults.realtime_error_in_reply,
            ),
            utterances=[
                ScheduledUtterance(i, u.start, u.end, u.words)
                for i, u in enumerate(scenario.utterances)
            ],
            clock=lambda: asyncio.get_running_loop().time() - t0,
        ) as live:
            world = await _run_call(scenario, agent_class, live, record_audio)
            own = world.agent.llm
            if isinstance(own, RealtimeModel) and own is not live.model:
                # as a job's shutdown would: an app's own model holds its HTTP session
                await own.aclose()
            await close_plugins(world.later_agents.instances)
            world.connections = live.connections()
            return world
    async with (
        app_http_context(),
        running_stack(
            stack,
            scripted=scripted,
            word_lookup=lambda u, w: words[(u, w)],
            interim_results=scenario.stt_interims,
            deepgram_faults=deepgram_faults,
            tts_error_on_sentence=scenario.provider_faults.tts_fails_sentence,
            refused={
                "stt": scenario.provider_faults.stt_refused,
                "llm": scenario.provider_faults.llm_refused,
                "tts": scenario.provider_faults.tts_refused,
            },
        ) as running,
    ):
        world = await _run_call(scenario, agent_class, running, record_audio)
        if world.redirected:
            # as a job's shutdown would: their pooled sockets would hold the emulators open
            await close_app_plugins(world.agent)
            await close_plugins(world.later_agents.instances)
        world.connections = running.connections()
        world.transcript_lag_s = running.transcript_lag_s()
        return world


async def _run_call(
    scenario: Scenario,
    agent_class: type[Agent],
    running: RunningStack | RunningRealtimeStack | None,
    record_audio: Path | None = None,
) -> CallWorld:
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_unretrieved_exception)
    t0 = loop.time()

    def clock() -> float:
        return loop.time() - t0

    audio_in, words = _caller_audio(scenario)
    # on quiet and zeros lines the VAD and STT follow the script, as livekit's test fakes do
    script = audio_in.script_at if scenario.caller_line in ("quiet", "zeros") else None
    segments: list[PlayedSegment] = []
    recorder = CallRecorder(clock=clock)

    def playout(**rate: int) -> PlayoutAudioOutput:
        return PlayoutAudioOutput(
            can_pause=scenario.can_pause,
            clock=clock,
            on_segment_done=segments.append,
            on_resumed=recorder.on_resumed,
            reports_cleared_playout=not scenario.lost_playout_report,
            **rate,
        )

    audio_out = playout(
        **({"sample_rate": running.output_sample_rate} if _is_realtime(running) else {})
    )
    vad: ScriptedVAD | UnmarkedSileroVAD | None
    stt: (
        ScriptedSTT
        | LabRecognizer
        | ScriptedRealtimeModel
        | DeepgramEmulator
        | OpenAIEmulator
        | GeminiLiveEmulator
        | OpenAIRealtimeEmulator
    )
    llm: ScriptedLLM | ScriptedRealtimeModel
    tts: (
        ScriptedTTS
        | ScriptedRealtimeModel
        | CartesiaEmulator
        | GeminiLiveEmulator
        | OpenAIRealtimeEmulator
    )
    session: AgentSession[Any]
    if _is_realtime(running):
        vad, stt, llm, tts = None, running.emulator, running.scripted, running.emulator
        session = AgentSession(vad=None, llm=running.model, **_session_options(scenario))
    elif scenario.model == "pipeline" and running is not None:
        vad = _vad(scenario, script, clock)
        stt, llm, tts = running.heard, running.scripted, running.spoken
        session = AgentSession(
            vad=vad,
            stt=running.stt,
            llm=running.llm,
            tts=running.tts,
            **_session_options(scenario),
        )
    elif scenario.model == "pipeline":
        vad, stt, llm, tts = _providers(scenario, words, script, clock)
        session = AgentSession(vad=vad, stt=stt, llm=llm, tts=tts, **_session_options(scenario))
    else:
        model = _realtime_model(scenario, words, script, clock)
        vad, stt, llm, tts = None, model, model, model
        # vad=None, not left out: left out, livekit builds its default Silero VAD
        session = AgentSession(vad=None, llm=model, **_session_options(scenario))
    session.input.audio = audio_in
    session.output.audio = audio_out
    recorder.attach(session)
    job = JobRecorder(clock=clock, session=session)
    logs = LivekitLogCapture(clock)
    lk_logger = logging.getLogger(_LIVEKIT_LOGGER)
    lk_logger.addHandler(logs)
    agent = scenario.agent(agent_class)
    redirected: list[str] = []
    rule: PluginRule
    if _is_realtime(running):
        if is_given(agent.llm):
            # an app agent bringing its own model of the stack's plugin: that instance is
            # redirected
            running.redirect(agent.llm)
        redirect = running.redirect

        def realtime_rule(role: str, obj: Any, label: str) -> str:
            return redirect_realtime_plugin(role, obj, redirect, label)

        rule = realtime_rule

    elif running is None:
        # on the lab's scripted providers an agent's own provider plugin would reach the real
        # provider: refused before the call
        try:
            refuse_provider_plugins(agent)
        except NotRedirectable:
            lk_logger.removeHandler(logs)
            raise
        rule = refuse_provider_plugin
    else:
        # livekit uses an agent's own STT, LLM and TTS over the session's: the app's instances
        # go to the emulators, their options kept (or the call is refused before it starts)
        try:
            redirected = redirect_app_plugins(agent, running, running.name)
        except NotRedirectable:
            lk_logger.removeHandler(logs)
            raise
        stack = running

        def pipeline_rule(role: str, obj: Any, label: str) -> str:
            # the speaker as the call plays it, the first agent's own TTS's rate if it had one
            speaker_rate = audio_out.sample_rate
            assert speaker_rate is not None  # a PlayoutAudioOutput always has one
            return redirect_plugin(role, obj, stack, label, speaker_rate)

        rule = pipeline_rule

        rate = agent.tts.sample_rate if is_given(agent.tts) and agent.tts else None
        if rate is not None and rate != audio_out.sample_rate:
            # the app's own TTS keeps its rate: the speaker takes it as is, so livekit never
            # resamples the marked audio
            audio_out = playout(sample_rate=rate)
            session.output.audio = audio_out
    world = CallWorld(
        scenario, session, agent, audio_in, audio_out, vad, stt, llm, tts, recorder, job, logs
    )
    # the agents livekit starts later in the call (handoffs, AgentTasks) bring plugins built
    # at call time: the same rule, applied as livekit starts each
    world.later_agents = watch_later_agents(session, agent, rule)
    world.t0 = t0
    events = getattr(agent, "events", None)
    if isinstance(events, EventEmitter):
        # ResilientAgent reports the races it saw and what it did about them
        for kind in ("race_detected", "race_handled"):
            events.on(kind, lambda ev: world.race_events.append(_race_record(ev, clock())))
    closed = asyncio.Event()
    session.on("close", lambda _ev: closed.set())
    audio_recorder: RecorderIO | None = None
    try:
        # livekit looks its mocks up by the agent's exact class, in the tool's context; each
        # mock is called with the tool's arguments by name (tool_mocks.by_name)
        mocks = (
            mock_tools(type(agent), by_name(agent, scenario.tool_mocks))
            if scenario.tool_mocks
            else contextlib.nullcontext()
        )
        with recorded_job_context(job), mocks:
            if record_audio is not None:
                # a line Silero hears is recorded as it hears it: the voice, not the marks
                audio_recorder = await start_audio_recording(
                    session, record_audio, t0, unmarked=scenario.vad == "silero"
                )
            await session.start(agent, record=False)
            typing = loop.create_task(_type_messages(session, scenario.typed, t0))
            if scenario.caller_leaves_at is not None:
                loop.call_at(t0 + scenario.caller_leaves_at, _caller_leaves, world)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(closed.wait(), timeout=scenario.duration)
            typing.cancel()
            world.closed_by_app = closed.is_set() and world.caller_left_at is None
            world.end_user_state = session.user_state
            world.ended_at = clock()
            world.unfinished_handles = tuple(r.id for r in recorder.unfinished())
            try:
                if not closed.is_set():
                    await asyncio.wait_for(session.aclose(), timeout=CLOSE_BOUND_SECONDS)
                else:
                    await asyncio.wait_for(_closing_done(session), timeout=CLOSE_BOUND_SECONDS)
            except asyncio.TimeoutError:
                world.close_deadlocked = True
    finally:
        lk_logger.removeHandler(logs)
    world.virtual_seconds = clock()
    if audio_recorder is not None:
        started_at = audio_recorder.recording_started_at
        # livekit closes its recorder in AgentSession.aclose; the lab drives its own
        await audio_recorder.aclose()
        assert record_audio is not None and started_at is not None
        world.audio_recording = AudioRecording(record_audio, started_at)
    world.redirected = (*redirected, *world.later_agents.redirected)
    return world


def _is_realtime(
    running: RunningStack | RunningRealtimeStack | None,
) -> TypeIs[RunningRealtimeStack]:
    """Whether the call runs on a realtime stack (a real speech-to-speech model)."""
    return running is not None and hasattr(running, "emulator")


def _caller_audio(
    scenario: Scenario,
) -> tuple[ScriptedAudioInput, dict[tuple[int, int], str]]:
    """The caller's audio input, and each scripted word by (utterance, word) index."""
    windows = [
        SpeechWindow(
            index=i,
            start=u.start,
            end=u.end,
            words=u.words,
            samples=load_utterance_audio(u.audio) if u.audio is not None else None,
            marked=scenario.real_speech is None,
        )
        for i, u in enumerate(scenario.utterances)
    ]
    words = {(w.index, j): word for w in windows for j, word in enumerate(w.words)}
    audio_in = ScriptedAudioInput(
        windows,
        duration=scenario.duration + _SETTLE_SECONDS,
        noise=scenario.noise,
        line=scenario.caller_line,
        frame_s=scenario.caller_frame_s,
        recording=(
            scenario.caller_recording.samples() if scenario.caller_recording is not None else None
        ),
    )
    return audio_in, words


def _providers(
    scenario: Scenario,
    words: dict[tuple[int, int], str],
    script: Callable[[float], np.ndarray] | None,
    clock: Callable[[], float],
) -> tuple[ScriptedVAD | UnmarkedSileroVAD, ScriptedSTT | LabRecognizer, ScriptedLLM, ScriptedTTS]:
    """The call's VAD, STT, LLM and TTS, scripted or real as the scenario says."""
    vad = _vad(scenario, script, clock)
    faults = scenario.provider_faults
    real = scenario.real_speech
    stt = (
        ScriptedSTT(
            lambda u, w: words[(u, w)],
            interim_results=scenario.stt_interims,
            script=script,
            dies_at=faults.stt_dies_at,
            silent_at=faults.stt_silent_at,
            **(
                {"endpoint_silence": faults.stt_final_after_s}
                if faults.stt_final_after_s is not None
                else {}
            ),
            clock=clock,
        )
        if real is None
        else real.recognizer()
    )
    llm = ScriptedLLM(scenario.llm, clock=clock, refused=scenario.provider_faults.llm_refused)
    tts = (
        ScriptedTTS(
            fails_sentence=faults.tts_fails_sentence,
            empty_sentence=faults.tts_empty_sentence,
            silent_sentence=faults.tts_silent_sentence,
            **({"ttfb": faults.tts_ttfb} if faults.tts_ttfb is not None else {}),
        )
        if real is None
        else real.voice()
    )
    return vad, stt, llm, tts


def _vad(
    scenario: Scenario,
    script: Callable[[float], np.ndarray] | None,
    clock: Callable[[], float],
) -> ScriptedVAD | UnmarkedSileroVAD:
    """The call's VAD: scripted, or livekit's embedded Silero model (hearing no marks).

    Silero hearing a recording follows its call's turn ends a window or two off (see
    :mod:`.silero_edges`).
    """
    if scenario.vad == "scripted" and scenario.caller_line == "recorded":
        # the recording's samples as the call's VAD heard them (Opus rings on after speech)
        return ScriptedVAD(fault=scenario.vad_fault, energy_threshold=RECORDED_SPEECH_LEVEL)
    if scenario.vad == "scripted":
        return ScriptedVAD(fault=scenario.vad_fault, script=script)
    recording = scenario.caller_recording
    return UnmarkedSileroVAD(
        min_silence_duration=SILENCE_TO_END_SPEECH,
        recorded_ends=recording.silero_ends if recording is not None else (),
        clock=clock,
    )


def _realtime_model(
    scenario: Scenario,
    words: dict[tuple[int, int], str],
    script: Callable[[float], np.ndarray] | None,
    clock: Callable[[], float],
) -> ScriptedRealtimeModel:
    """The speech-to-speech model of a realtime call, in the scenario's provider flavour."""
    return ScriptedRealtimeModel(
        scenario.llm,
        flavour="openai" if scenario.model == "realtime_openai" else "gemini",
        word_lookup=lambda u, w: words[(u, w)],
        clock=clock,
        script=script,
        error_mid_reply=scenario.provider_faults.realtime_error_mid_reply,
    )


def _unretrieved_exception(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """One line, not a traceback, for a task whose exception nobody retrieved.

    livekit 1.8.0 leaves a failed TTS task's exception unretrieved (the scripted provider
    faults raise on purpose); asyncio's default handler would print its traceback to stderr.
    """
    error = context.get("exception")
    logging.getLogger(_LIVEKIT_LOGGER).warning(
        "%s: %r", context.get("message", "unhandled exception in a task"), error
    )


def _caller_leaves(world: CallWorld) -> None:
    """The caller hangs up: livekit closes the session the way RoomIO does."""
    if close_as_caller_left(world.session):
        world.caller_left_at = world.scenario.caller_leaves_at


async def _type_messages(session: AgentSession[Any], typed: tuple[Typed, ...], t0: float) -> None:
    """Deliver each typed message at its time, in a task of its own as RoomIO does."""
    loop = asyncio.get_running_loop()
    handlers: set[asyncio.Task[None]] = set()
    for message in sorted(typed, key=lambda t: t.at):
        await asyncio.sleep(max(0.0, t0 + message.at - loop.time()))
        handler = loop.create_task(_handle_text_input(session, message.text))
        handlers.add(handler)
        handler.add_done_callback(handlers.discard)
    if handlers:
        await asyncio.wait(handlers)


async def _handle_text_input(session: AgentSession[Any], text: str) -> None:
    """What RoomIO does with a chat text stream (``RoomIO._on_chat_text_stream``).

    livekit's default callback (``TextInputOptions().text_input_cb``) gets the text; an
    exception is logged as a warning and the message is gone, as in a room.
    """
    callback = TextInputOptions().text_input_cb
    try:
        result = callback(session, TextInputEvent(text=text))
        if asyncio.iscoroutine(result):
            await result
    except Exception:
        logging.getLogger(_LIVEKIT_LOGGER).warning(TEXT_INPUT_FAILED_LOG, exc_info=True)


def _race_record(event: Any, at: float) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": event.kind, "action": getattr(event, "action", None)}
    record["event"] = event.type
    record["at_s"] = round(at, 3)
    record.update({k: v for k, v in event.details.items() if k not in record})
    return record


async def _closing_done(session: AgentSession[Any]) -> None:
    # a session closed by the app may still be tearing down; aclose() waits for that
    await session.aclose()


def run_scenario(
    scenario: Scenario,
    agent_class: type[Agent],
    *,
    stack: str | None = None,
    deepgram_faults: DeepgramFaults | None = None,
    record_audio: Path | None = None,
) -> tuple[CallWorld, CallOutcome]:
    """Run ``scenario`` on a fresh virtual-time loop and judge it against the contracts.

    With ``stack`` (see :data:`~resilient_agent.testing.stacks.STACKS`), a pipeline call runs on
    the real provider plugins against local wire emulators; ``deepgram_faults`` makes the
    Deepgram emulator misbehave at the wire (a half-open socket, a drop, a refusal);
    ``record_audio`` writes the call's audio there with livekit's own recorder.
    """
    started = time.perf_counter()
    world = run_virtual(
        run_scenario_async(
            scenario,
            agent_class,
            stack=stack,
            deepgram_faults=deepgram_faults,
            record_audio=record_audio,
        )
    )
    world.wall_seconds = time.perf_counter() - started
    return world, evaluate(world)
