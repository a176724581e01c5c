"""The declarative scenario model: a call's timeline, its scripts and what must hold.

A :class:`Scenario` says when the caller speaks and what, how the VAD misbehaves, what the LLM
answers, and which agent answers the call, written once against any ``Agent`` base class so the
same app code runs on a plain ``livekit.agents.Agent`` and on ``ResilientAgent``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from livekit.agents import Agent

from .audio import FRAME_SECONDS, SAMPLE_RATE, CallerLine, NoiseWindow, lab_frames_in
from .audio_recording import CallerRecording
from .llm import LLMRule
from .real_speech import RealSpeech
from .refusals import ConnectRefusals
from .speech import BUNDLED, bundled_speech, load_wav
from .vad import VADFault

__all__ = [
    "AgentFactory",
    "CallerInput",
    "ModelKind",
    "ProviderFaults",
    "Scenario",
    "Sweep",
    "Typed",
    "Utterance",
    "VADKind",
    "load_utterance_audio",
]

VADKind = Literal["scripted", "silero"]
"""``scripted``: :class:`~resilient_agent.testing.vad.ScriptedVAD`; ``silero``: livekit's
embedded ``inference.VAD`` (runs offline from the livekit-local-inference wheel)."""

ModelKind = Literal["pipeline", "realtime_openai", "realtime_gemini"]
"""``pipeline``: VAD, STT, LLM and TTS; ``realtime_openai`` / ``realtime_gemini``: a
speech-to-speech :class:`~resilient_agent.testing.realtime.ScriptedRealtimeModel` in that
provider's flavour, with no VAD, STT or TTS (the model detects turns, hears and speaks)."""


def load_utterance_audio(audio: str) -> np.ndarray:
    """Samples of a bundled recording name or of a 16 kHz mono WAV path.

    Raises:
        ValueError: ``audio`` is neither a bundled recording nor an existing file.
    """
    if audio in BUNDLED:
        return bundled_speech(audio)
    path = Path(audio)
    if not path.is_file():
        raise ValueError(
            f"Utterance.audio={audio!r}: unknown bundled speech (choose one of "
            f"{sorted(BUNDLED)}) and no such WAV file"
        )
    return load_wav(path)


AgentFactory = Callable[[type[Agent]], Agent]
"""Builds the agent for one call from the base class under test."""


@dataclass(frozen=True)
class Utterance:
    """Something the caller says.

    Attributes:
        start: Seconds from the start of the call.
        end: Seconds from the start of the call.
        text: The words; keep them distinct across a scenario so each can be traced.
        expect_reply: Whether the agent must answer it (a goodbye is answered by the farewell,
            which the hang-up contract judges).
        reply_within: Seconds from its end to the start of its answer; None uses the
            scenario's ``reply_bound``.
        audio: A bundled recording name (see :data:`resilient_agent.testing.speech.BUNDLED`) or
            a 16 kHz WAV path, played instead of a tone; build with :meth:`recorded`.
    """

    start: float
    end: float
    text: str
    expect_reply: bool = True
    reply_within: float | None = None
    audio: str | None = None

    @classmethod
    def recorded(cls, start: float, audio: str, text: str | None = None) -> Utterance:
        """An utterance of real speech: a bundled recording or a WAV file, as long as it lasts.

        Args:
            start: Seconds from the start of the call.
            audio: A bundled recording name or a 16 kHz mono WAV path.
            text: The words said; defaults to the bundled recording's words.
        """
        samples = load_utterance_audio(audio)
        words = text if text is not None else BUNDLED.get(audio)
        if words is None:
            raise ValueError(f"Utterance.recorded({audio!r}): pass text= with the words it says")
        return cls(start, start + len(samples) / SAMPLE_RATE, words, audio=audio)

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"Utterance.end ({self.end}) must be after start ({self.start})")
        if not self.text.split():
            raise ValueError("Utterance.text must contain at least one word")

    @property
    def words(self) -> tuple[str, ...]:
        """The words, as the STT will transcribe them."""
        return tuple(self.text.split())

    def shifted(self, onset: float) -> Utterance:
        """The same utterance starting at ``onset``."""
        return dataclasses.replace(self, start=onset, end=onset + self.end - self.start)


@dataclass(frozen=True)
class Typed:
    """A message the caller types in the room's chat, delivered as RoomIO delivers text input.

    The runner passes it to livekit's own default text input callback
    (``TextInputOptions().text_input_cb``) at ``at``, and logs a failure as RoomIO does, so a
    message livekit cannot take is lost exactly as it would be in a room. The contracts count
    its words like spoken ones: they must reach the LLM and be answered.

    Attributes:
        at: Seconds from the start of the call when the message arrives.
        text: The message; keep its words distinct across a scenario so each can be traced.
        expect_reply: Whether the agent must answer it.
        reply_within: Seconds from its arrival to the start of its answer; None uses the
            scenario's ``reply_bound``.
    """

    at: float
    text: str
    expect_reply: bool = True
    reply_within: float | None = None

    def __post_init__(self) -> None:
        if self.at < 0:
            raise ValueError(f"Typed.at ({self.at}) must not be negative")
        if not self.text.split():
            raise ValueError("Typed.text must contain at least one word")

    @property
    def start(self) -> float:
        """When the message arrived (a typed message has no duration)."""
        return self.at

    @property
    def end(self) -> float:
        """When the message arrived: the answer's latency is measured from here."""
        return self.at

    @property
    def words(self) -> tuple[str, ...]:
        """The words, as the LLM will see them."""
        return tuple(self.text.split())


CallerInput = Utterance | Typed
"""Something the caller said or typed; the contracts judge both alike."""


@dataclass(frozen=True)
class Sweep:
    """How ``--sweep`` moves one utterance across a race window.

    Attributes:
        utterance: Index of the utterance to move.
        start: Earliest onset, in seconds from the start of the call.
        stop: Latest onset.
        step: Distance between onsets.
    """

    utterance: int
    start: float
    stop: float
    step: float = 0.1

    def onsets(self) -> list[float]:
        """Every onset in the window, both ends included."""
        count = round((self.stop - self.start) / self.step)
        return [round(self.start + i * self.step, 6) for i in range(count + 1)]


@dataclass(frozen=True)
class ProviderFaults:
    """How the scripted STT and TTS fail mid-call (an LLM that fails is scripted per rule).

    Attributes:
        stt_dies_at: Call seconds from which the STT stream that gets the next frame raises a
            plain exception, once (livekit retries only ``APIError``).
        stt_silent_at: Call seconds from which the STT stream that gets the next frame takes
            audio and answers nothing, no transcript and no error (a half-open socket), once; a
            new stream works.
        stt_final_after_s: Seconds of quiet after the caller's last word before the scripted
            STT sends its final transcript (0.2 s unless set): slow, but live.
        tts_fails_sentence: The synthesis of this sentence (1-based, in call order) raises.
        tts_empty_sentence: Every synthesis attempt of this sentence ends with no audio frame.
        tts_silent_sentence: This sentence is synthesized as digital silence of its length.
        tts_ttfb: Seconds the TTS takes to its first byte (0.15 s unless set): slow, but live.
        fallback_line: A line the agent may say instead of an answer when a provider keeps
            failing; heard to the end after an utterance, it counts as that utterance's answer.
        realtime_drop_in_reply: On a realtime stack, the emulator drops its socket halfway
            through this spoken reply (1-based); the scripted model ignores it.
        realtime_go_away_in_reply: On a realtime stack, a ``goAway`` as this reply begins
            (Gemini Live; OpenAI Realtime has no such message and ignores it).
        realtime_error_in_reply: On a realtime stack, the server closes with an internal
            error (1011) as this reply begins.
        realtime_error_mid_reply: The Gemini server fails halfway through this spoken reply's
            audio: a 1011 close on a realtime stack, the same failure as the plugin reports it
            on the scripted model.
        realtime_error_after_reply: On a realtime stack, the server closes with an internal
            error (1011) once this reply is whole, before the server's end of its turn.
        stt_refused: The STT provider refuses its first connection attempts (429 or 503).
        llm_refused: The LLM provider refuses its first requests (429 or 503).
        tts_refused: The TTS provider refuses its first connection attempts (429 or 503).
    """

    stt_dies_at: float | None = None
    stt_silent_at: float | None = None
    stt_final_after_s: float | None = None
    tts_fails_sentence: int | None = None
    tts_empty_sentence: int | None = None
    tts_silent_sentence: int | None = None
    tts_ttfb: float | None = None
    fallback_line: str | None = None
    realtime_drop_in_reply: int | None = None
    realtime_go_away_in_reply: int | None = None
    realtime_error_in_reply: int | None = None
    realtime_error_mid_reply: int | None = None
    realtime_error_after_reply: int | None = None
    stt_refused: ConnectRefusals | None = None
    llm_refused: ConnectRefusals | None = None
    tts_refused: ConnectRefusals | None = None

    @property
    def stt_faulty(self) -> bool:
        """Whether the scripted STT fails (or is slowed) in any way."""
        return any(
            n is not None for n in (self.stt_dies_at, self.stt_silent_at, self.stt_final_after_s)
        )

    @property
    def tts_faulty(self) -> bool:
        """Whether the scripted TTS fails (or is slowed) in any way."""
        return any(
            n is not None
            for n in (
                self.tts_fails_sentence,
                self.tts_empty_sentence,
                self.tts_silent_sentence,
                self.tts_ttfb,
            )
        )


@dataclass(frozen=True)
class Scenario:
    """One scripted call.

    Attributes:
        name: Unique, ``family/variant``.
        family: The race family it belongs to.
        description: One sentence on what happens.
        agent: Builds the app's agent from the base class under test.
        utterances: What the caller says, in order.
        llm: The LLM script.
        vad_fault: How the scripted VAD misbehaves.
        vad: Which VAD runs: the scripted one or livekit's embedded Silero model.
        duration: Seconds of call to simulate.
        farewell: Text of the agent's farewell sentence, for hang-up contracts.
        can_pause: Whether the audio output can pause (RoomIO's can).
        aec_warmup: AEC warm-up seconds (livekit's default is 3.0; None disables it).
        noise: Background noise on the caller's line: loud audio the STT hears no words in.
        lost_playout_report: The audio sink never reports the playout of a cleared segment.
        session_options: Extra ``AgentSession`` keyword arguments; ``TurnHandlingOptions`` keys
            (``user_turn_limit``, ``preemptive_generation``, ...) go into its ``turn_handling``,
            and ``interruption`` is merged over the lab's interruption options.
        reply_bound: Seconds from the end of an utterance to the start of its answer.
        control: A control: it must pass on a plain ``Agent`` as well.
        sweep: The race window ``--sweep`` explores.
        typed: What the caller types in the room's chat, in order.
        talk_over_tolerance: Seconds of a protected speech that may play over a caller who was
            already speaking when it began; None leaves the contract out (a scenario where the
            agent is meant to speak over a caller who will not stop).
        provider_faults: How the scripted STT and TTS fail.
        caller_line: What the caller's line carries (see
            :data:`~resilient_agent.testing.audio.CallerLine`): marked frames, a quiet line or
            frames of zeros.
        stt_interims: Whether the STT sends interim transcripts (False: finals only).
        hang_up_within: When set, a farewell heard by a silent caller must end the call whole
            (session closed, job shut down, room deleted) within this many seconds of its end.
        caller_leaves_at: The caller leaves the room at this second (livekit closes the session
            as RoomIO does); that close must go through at once, whatever the app asked.
        real_speech: Run with real speech end to end (espeak-ng voices, the embedded VAD, a
            PocketSphinx STT); each utterance's ``text`` is then its reference transcription.
            None: scripted speech.
        caller_frame_s: Duration of each frame of the caller's audio: the lab's 10 ms, or a
            whole number of them (RoomIO sends 50 ms frames by default).
        tools_complete: Function tools that must each run to completion (livekit reports
            them ``done``), in this order of their ends, others allowed between: the evidence
            that what the caller said reached the code acting on it, e.g.
            ``("update_email_address", "confirm_email_address")`` for an email that was read
            back and confirmed rather than saved unconfirmed.
        tool_mocks: Tool name to a callable run instead of that tool of the agent's class for
            the call, as livekit's ``mock_tools`` takes them: a tool with side effects
            (a booking, a payment) runs as a mock while its speech and timing stay the app's.
            Each mock is called with the tool's arguments by name, and with livekit's
            ``RunContext`` only when it asks for it (see :mod:`.tool_mocks`).
        tool_outputs: Tool name to the output the LLM must get back from every run of that
            tool in the call (as livekit renders a tool's return value): e.g. what the tool's
            mock returns for the arguments the scripted LLM sends.
        model: What answers the call (see :data:`ModelKind`): the pipeline, or a realtime model
            that answers by the same ``llm`` rules and leaves turn detection to its server.
        hang_up_without_farewell_within: When set, a farewell that never begins to play (the
            provider never sends it) with the caller silent after their last word must still
            end the call, within this many seconds of that word.
        protected_lines: Lines the app asked to be spoken uninterrupted (``say`` or
            ``generate_reply`` with ``allow_interruptions=False``): each must be heard to the
            end, whoever talks over it.
        caller_recording: With ``caller_line="recorded"``: the recording whose caller channel
            is the caller's line (the utterances say which words are where, for the STT).
    """

    name: str
    family: str
    description: str
    agent: AgentFactory
    utterances: tuple[Utterance, ...]
    llm: tuple[LLMRule, ...] = ()
    vad_fault: VADFault = field(default_factory=VADFault)
    vad: VADKind = "scripted"
    duration: float = 20.0
    farewell: str | None = None
    can_pause: bool = True
    aec_warmup: float | None = None
    noise: tuple[NoiseWindow, ...] = ()
    lost_playout_report: bool = False
    session_options: dict[str, Any] = field(default_factory=dict)
    reply_bound: float = 3.0
    control: bool = False
    sweep: Sweep | None = None
    typed: tuple[Typed, ...] = ()
    talk_over_tolerance: float | None = 0.2
    provider_faults: ProviderFaults = field(default_factory=ProviderFaults)
    caller_line: CallerLine = "marked"
    stt_interims: bool = True
    hang_up_within: float | None = None
    caller_leaves_at: float | None = None
    real_speech: RealSpeech | None = None
    caller_frame_s: float = FRAME_SECONDS
    tools_complete: tuple[str, ...] = ()
    tool_mocks: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    tool_outputs: Mapping[str, str] = field(default_factory=dict)
    model: ModelKind = "pipeline"
    protected_lines: tuple[str, ...] = ()
    hang_up_without_farewell_within: float | None = None
    caller_recording: CallerRecording | None = None

    def __post_init__(self) -> None:
        ordered = sorted(self.utterances, key=lambda u: u.start)
        for before, after in itertools.pairwise(ordered):
            if after.start < before.end:
                raise ValueError(f"{self.name}: utterances overlap at {after.start}s")
        if any(u.end > self.duration for u in self.utterances):
            raise ValueError(f"{self.name}: an utterance ends after duration={self.duration}")
        if any(t.at > self.duration for t in self.typed):
            raise ValueError(f"{self.name}: a message is typed after duration={self.duration}")
        try:
            lab_frames_in(self.caller_frame_s)
        except ValueError as exc:
            raise ValueError(f"{self.name}: caller_frame_s: {exc}") from None
        if self.vad == "silero" and self.vad_fault.mode != "healthy":
            raise ValueError(f"{self.name}: vad_fault needs vad='scripted' (faults are scripted)")
        if (self.caller_line == "recorded") != (self.caller_recording is not None):
            raise ValueError(f"{self.name}: caller_line='recorded' goes with caller_recording")
        if self.vad == "silero" and self.caller_line not in ("marked", "recorded"):
            raise ValueError(
                f"{self.name}: caller_line={self.caller_line!r} needs vad='scripted' (Silero "
                "hears the samples; only the scripted VAD can follow the script)"
            )
        if self.model != "pipeline":
            self._check_realtime()

    def _check_realtime(self) -> None:
        """A realtime call has no VAD, STT or TTS: nothing may script or fault them."""
        pipeline_only = {
            "vad='silero'": self.vad == "silero",
            "vad_fault": self.vad_fault.mode != "healthy",
            "real_speech": self.real_speech is not None,
            "provider_faults.stt_*": self.provider_faults.stt_faulty,
            "provider_faults.tts_*": self.provider_faults.tts_faulty,
        }
        for what, used in pipeline_only.items():
            if used:
                raise ValueError(f"{self.name}: {what} needs model='pipeline'")

    @property
    def caller_inputs(self) -> tuple[CallerInput, ...]:
        """Every utterance, then every typed message: what the contracts judge."""
        return (*self.utterances, *self.typed)

    def with_onset(self, utterance: int, onset: float) -> Scenario:
        """A copy with utterance ``utterance`` moved to start at ``onset``.

        Raises:
            ValueError: The moved utterance would overlap another one or outlast the call.
        """
        moved = list(self.utterances)
        moved[utterance] = moved[utterance].shifted(onset)
        return dataclasses.replace(self, utterances=tuple(moved))
