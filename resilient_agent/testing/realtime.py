"""A scripted speech-to-speech ``RealtimeModel`` that hears only the audio livekit gave it.

:class:`ScriptedRealtimeModel` stands in for OpenAI Realtime or Gemini Live (``flavour``), as
livekit-plugins-openai and livekit-plugins-google 1.8.9 drive them: same capability flags, same
events in the same order, and the same server habits where those differ.

Hearing. The session hears the caller only through ``push_audio``, and hears it the way the
scripted STT does (:mod:`.stt`): a word counts once at least half of its marked frames arrived;
frames livekit replaced with silence (protected speech, AEC warm-up) carry no marker and are
silence to it. Its server VAD opens a user turn on the first marked frame and closes it after
``silence_duration`` of frames without a user marker (noise has no markers, so it is silence
here; a real server VAD may trigger on it). A turn in which no whole word was heard gets no
answer.

Answers. Each response is chosen by :class:`~resilient_agent.testing.llm.LLMRule` exactly as
:class:`~resilient_agent.testing.llm.ScriptedLLM` chooses (its ``answer_for``) from the server's
own conversation, led by the session's instructions and followed by the response's own
instructions. A rule's ``ttft`` is the latency before the first audio; its audio is generated
evenly until its ``duration`` (faster than it plays, as real servers generate), then its tool
calls. The audio is marked like ScriptedTTS's (one sentence per response, its text recorded in
:attr:`ScriptedRealtimeModel.sentences`), so the lab's speaker knows what the caller heard.
``generate_reply(instructions=...)`` says, in order of precedence: the rule whose
``when_instructed`` matches; else the first quoted text in the instructions (``"..."``,
``“...”`` or ``'...'``) verbatim; else the rule the context calls for, as ScriptedLLM would.
A rule's ``hangs_before`` makes the response produce nothing until it is cancelled;
``times_out_before`` is not modelled (a realtime response has no request timeout).
``error_mid_reply`` (Gemini flavour) is the server's error close halfway through that spoken
reply's audio, as livekit-plugins-google shows it: the generation ends there (what was spoken
stays in the conversation), then a recoverable ``error``; the session goes on as the plugin does
once it has reconnected. A rule's ``cut_after_words`` is the same failure for its first spoken
reply, placed where a replay's report has it: the audio stops after that many words, and the
server fails as the reply's generation would have ended (its ``duration``); with
``cut_audio_seconds`` those words' audio lasts that long (the recorded call's line). A rule's
``fails_after_reply`` is the server failing after its first spoken reply came whole, before its
turn is complete (``error_after_reply`` of the Gemini Live emulator).

OpenAI flavour (``livekit.agents.llm._realtime.openai``, which livekit-plugins-openai 1.8.9
wraps): ``input_speech_started`` when speech begins (and the response still being generated is
cancelled: ``interrupt_response``); ``input_speech_stopped`` after the silence, then the
committed turn's final transcript, then a response (``generation_created``); one response at a
time (``generate_reply`` during another fails with ``conversation_already_has_active_response``);
tool replies wait for livekit's ``generate_reply``; ``truncate`` deletes the unheard transcript;
``session(turn_detection_disabled=True)`` hands turns to the client (``commit_audio``).

Gemini flavour (livekit-plugins-google 1.8.9 ``realtime_api.py``): a generation opens when the
first word of a turn is transcribed (``input_speech_started``, ``generation_created``, interim
transcripts), is answered after the silence, and ends (``input_speech_stopped`` and the final
transcript) only when the server believes its audio has played out; the caller speaking before
that is a barge-in (``interrupted``: ``input_speech_started``, the generation cut).
``interrupt``, ``truncate``, ``commit_audio`` and ``clear_audio`` do nothing, as with server
activity detection; tool results sent through ``update_chat_ctx`` are answered by the server
itself, each such generation announced by an ``input_speech_started``. ``generate_reply``
reaches the server whatever becomes of its future: while a generation is open and still being
generated (a reply that hangs), the server stops that reply and its new one streams into the open
generation (the plugin starts a new one only when none is open), the future left pending until
the plugin's 5 s timeout. Simplification: otherwise a ``generate_reply`` generation opens at once
rather than at its first content.

Neither plugin supports ``say()``; neither does this model. Timings run on the loop clock;
records use loop time like the other fakes (``time.time()`` stamps only where livekit's events
expect them, which the lab's virtual clock serves).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np
from livekit import rtc
from livekit.agents import llm, utils
from livekit.agents.llm import ChatContext, FunctionCall, Tool, ToolChoice, ToolContext
from livekit.agents.types import NOT_GIVEN, NotGivenOr
from livekit.agents.utils import is_given
from typing_extensions import Never, override

from .audio import (
    FRAME_SAMPLES,
    FRAME_SECONDS,
    KIND_USER,
    SAMPLE_RATE,
    frame_markers,
    read_markers,
)
from .llm import LLMRequest, LLMRule, ScriptedLLM, ToolCallScript
from .schedule import delivery_wait
from .stt import HeardWord
from .tts import marked_sentence_audio, spoken_seconds

__all__ = [
    "CommittedTurn",
    "Flavour",
    "RealtimeResponse",
    "ScriptedRealtimeModel",
    "ScriptedRealtimeSession",
    "quoted_line",
    "realtime_capabilities",
]

Flavour = Literal["openai", "gemini"]
"""Which provider the model behaves like: OpenAI Realtime or Gemini Live."""

# the audio of a response reaches livekit in 100 ms deltas, as OpenAI sends them
_CHUNK_SAMPLES = 10 * FRAME_SAMPLES
_ACTIVE_RESPONSE = "conversation_already_has_active_response"
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?<!\w)'([^']+)'(?!\w)")
_GENERATE_REPLY_TIMEOUT_S = 5.0  # livekit-plugins-google's wait for generation_created
# what a rule says its first spoken reply does on a failing server: words, or seconds
_Fault = TypeVar("_Fault", int, float)
_MODALITIES: tuple[Literal["text", "audio"], ...] = ("audio", "text")


def realtime_capabilities(
    flavour: Flavour, *, turn_detection: bool = True
) -> llm.RealtimeCapabilities:
    """The capabilities livekit 1.8.9's plugin reports for ``flavour`` with default options.

    OpenAI: ``livekit/agents/llm/_realtime/openai.py`` (``RealtimeModel.__init__``; the plugin's
    ``RealtimeModel`` subclasses it), with server turn detection by default and
    ``can_disable_turn_detection`` because no ``turn_detection`` was passed. Gemini:
    ``livekit/plugins/google/realtime/realtime_api.py`` (``RealtimeModel.__init__``) with its
    default input transcription and audio modality. Neither sets ``supports_say`` nor
    ``supports_overlapping_speech``.

    Args:
        flavour: The provider.
        turn_detection: Whether server-side turn detection is on (False: as configured with
            OpenAI ``turn_detection=None`` or Gemini's automatic activity detection disabled).
    """
    if flavour == "openai":
        return llm.RealtimeCapabilities(
            message_truncation=True,
            turn_detection=turn_detection,
            can_disable_turn_detection=turn_detection,
            user_transcription=True,
            auto_tool_reply_generation=False,
            audio_output=True,
            manual_function_calls=True,
            mutable_chat_context=True,
            mutable_instructions=True,
            mutable_tools=True,
            per_response_tool_choice=True,
        )
    return llm.RealtimeCapabilities(
        message_truncation=False,
        turn_detection=turn_detection,
        user_transcription=True,
        auto_tool_reply_generation=True,
        audio_output=True,
        manual_function_calls=False,
        mutable_chat_context=True,
        mutable_instructions=True,
        mutable_tools=False,
        per_response_tool_choice=False,
    )


@dataclass(frozen=True)
class CommittedTurn:
    """A user turn the server committed to its conversation.

    Attributes:
        item_id: The user message's id (livekit's chat item has the same).
        started_at: Loop seconds when its speech began (or the buffer began to fill).
        committed_at: Loop seconds when it was committed.
        words: The words heard, in order.
        by: ``server_vad`` (the server's turn detection), ``commit_audio`` (the client).
        session: Which of the model's sessions committed it (its index in ``sessions``): each
            agent opens a session of its own.
    """

    item_id: str
    started_at: float
    committed_at: float
    words: tuple[HeardWord, ...]
    by: Literal["server_vad", "commit_audio"]
    session: int = 0

    @property
    def text(self) -> str:
        """The transcript."""
        return " ".join(w.text for w in self.words)


@dataclass
class RealtimeResponse:
    """One response of the model.

    Attributes:
        id: The response id (``generation_created``'s ``response_id``).
        message_id: Its assistant message's id.
        created_at: Loop seconds when ``generation_created`` was emitted.
        user_initiated: Whether livekit asked for it (``generate_reply``).
        text: What it says ("" while undecided, or when it only calls tools).
        tool_calls: Names of the tools it calls.
        instructions: The per-response instructions it was asked with.
        sentence_id: Its audio's sentence id (see :attr:`ScriptedRealtimeModel.sentences`).
        first_audio_at: Loop seconds of its first audio.
        audio_seconds: Seconds of audio it lasts.
        cancelled: Whether the server stopped generating it before it was complete.
        interrupted_at: Loop seconds when the caller began to speak over it (while it was
            still being generated or, by the server's estimate, still playing).
        truncated_ms: Where livekit truncated it (``truncate``), milliseconds of audio heard.
        done_at: Loop seconds when it ended.
        silent: It came with no audio (the rule's ``silent_answers``).
    """

    id: str
    message_id: str
    created_at: float
    user_initiated: bool
    text: str = ""
    tool_calls: tuple[str, ...] = ()
    instructions: str | None = None
    sentence_id: int | None = None
    first_audio_at: float | None = None
    audio_seconds: float = 0.0
    cancelled: bool = False
    interrupted_at: float | None = None
    truncated_ms: int | None = None
    done_at: float | None = None
    silent: bool = False

    def playing_at(self, now: float) -> bool:
        """Whether, by the server's estimate, its audio is still playing at ``now``."""
        return self.first_audio_at is not None and now < self.first_audio_at + self.audio_seconds


class ScriptedRealtimeModel(llm.RealtimeModel):
    """A speech-to-speech model answering by :class:`LLMRule`, in an OpenAI or Gemini flavour.

    It also stands in for the STT and TTS of a pipeline call where the lab reads those: it has
    ScriptedSTT's ``finals`` and ScriptedTTS's ``sentences``, ``synthesized_at`` and
    ``duration_of``, and ScriptedLLM's ``rules``, ``fallback_ttft`` and ``requests``.

    Attributes:
        flavour: Which provider it behaves like.
        rules: The script.
        fallback_ttft: Latency of an answer no rule gives (the echo, a quoted instruction).
        silence_duration: Seconds of silence after which the server VAD ends a turn.
        requests: Every response's context and answer, as ScriptedLLM records them.
        turns: Every user turn committed, with the words heard.
        cleared: ``(loop time, words)`` of every input buffer ``clear_audio`` discarded.
        responses: Every response.
        sentences: Sentence id to text, for every response that spoke.
        synthesized_at: Sentence id to the loop time its audio began to be generated.
        finals: ``(loop time, transcript, words)`` of every committed turn (as ScriptedSTT's).
        frames_received: Audio frames ``push_audio`` delivered.
        frames_with_speech: Those that carried caller speech.
        sessions: Every session opened.
    """

    def __init__(
        self,
        rules: Sequence[LLMRule] = (),
        *,
        flavour: Flavour,
        word_lookup: Callable[[int, int], str] | None = None,
        clock: Callable[[], float] | None = None,
        silence_duration: float = 0.5,
        fallback_ttft: float = 0.3,
        turn_detection: bool = True,
        seconds_per_char: float = 1 / 15,
        min_seconds: float = 0.3,
        script: Callable[[float], np.ndarray] | None = None,
        error_mid_reply: int | None = None,
    ) -> None:
        """Build the model.

        Args:
            rules: The script, matched as ScriptedLLM matches it.
            flavour: ``openai`` or ``gemini``.
            word_lookup: ``word_lookup(utterance, word)`` gives a scripted word's text, as
                ScriptedSTT's does (by default a placeholder such as ``u0w1``).
            clock: Call seconds, for the rules' ``hangs_before`` (loop time by default).
            silence_duration: Seconds of silence that end a user turn.
            fallback_ttft: Latency of an answer no rule gives.
            turn_detection: Server-side turn detection (the providers' default).
            seconds_per_char: Speech rate of the answers, as ScriptedTTS's.
            min_seconds: Shortest answer audio, as ScriptedTTS's.
            script: Hear the caller by time instead of the frames' samples (quiet and zeros
                lines, see :data:`~resilient_agent.testing.audio.CallerLine`).
            error_mid_reply: Gemini flavour: the server fails halfway through this spoken
                reply's audio (1-based), as a 1011 close does on the wire.
        """
        super().__init__(capabilities=realtime_capabilities(flavour, turn_detection=turn_detection))
        self.flavour: Flavour = flavour
        self.rules = tuple(rules)
        self.fallback_ttft = fallback_ttft
        self.silence_duration = silence_duration
        self.seconds_per_char = seconds_per_char
        self.min_seconds = min_seconds
        self.script = script
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self._brain = ScriptedLLM(self.rules, fallback_ttft=fallback_ttft)
        self.requests: list[LLMRequest] = []
        self.turns: list[CommittedTurn] = []
        self.cleared: list[tuple[float, tuple[HeardWord, ...]]] = []
        self.responses: list[RealtimeResponse] = []
        self.sentences: dict[int, str] = {}
        self.synthesized_at: dict[int, float] = {}
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.frames_received = 0
        self.frames_with_speech = 0
        self.sessions: list[ScriptedRealtimeSession] = []
        self._word_lookup = word_lookup or (lambda u, w: f"u{u}w{w}")
        # silent responses given, by rule (rules hold dicts: counted by identity)
        self._silent_used: dict[int, int] = {}
        self._cut: set[int] = set()
        self.error_mid_reply = error_mid_reply
        self.spoken_replies = 0

    @property
    @override
    def model(self) -> str:
        return f"scripted-realtime-{self.flavour}"

    @property
    @override
    def provider(self) -> str:
        return "resilient_agent.testing"

    def word(self, utterance: int, index: int) -> str:
        """The text of word ``index`` of utterance ``utterance``."""
        return self._word_lookup(utterance, index)

    def duration_of(self, text: str) -> float:
        """How long the audio for ``text`` lasts."""
        return spoken_seconds(
            text, seconds_per_char=self.seconds_per_char, min_seconds=self.min_seconds
        )

    def silent_for(self, rule: LLMRule) -> bool:
        """Whether this response by ``rule`` comes with no audio (its ``silent_answers``)."""
        if self._silent_used.get(id(rule), 0) >= rule.silent_answers:
            return False
        self._silent_used[id(rule)] = self._silent_used.get(id(rule), 0) + 1
        return True

    def cut_for(self, rule: LLMRule) -> int | None:
        """The words this spoken reply by ``rule`` stops after (its ``cut_after_words``), if any.

        Only a Gemini flavour's server fails so, and only for the rule's first spoken reply.
        """
        return self._first_gemini_reply(rule, rule.cut_after_words)

    def fails_after_reply_for(self, rule: LLMRule) -> float | None:
        """Seconds after the request this whole reply's server fails (``fails_after_reply``).

        Only a Gemini flavour's server fails so, and only for the rule's first spoken reply.
        """
        return self._first_gemini_reply(rule, rule.fails_after_reply)

    def _first_gemini_reply(self, rule: LLMRule, value: _Fault | None) -> _Fault | None:
        """``value`` for the rule's first spoken reply on a Gemini flavour's server, else None."""
        if self.flavour != "gemini" or value is None or id(rule) in self._cut:
            return None
        self._cut.add(id(rule))
        return value

    def hangs_at(self, rule: LLMRule) -> bool:
        """Whether a response by ``rule`` made now hangs."""
        return rule.hangs_at(self._clock())

    @override
    def session(self, *, turn_detection_disabled: bool = False) -> ScriptedRealtimeSession:
        # only OpenAI can hand turn-taking to the client (can_disable_turn_detection)
        disabled = turn_detection_disabled and self.capabilities.can_disable_turn_detection
        session = ScriptedRealtimeSession(self, turn_detection_disabled=disabled)
        self.sessions.append(session)
        return session

    @override
    async def aclose(self) -> None:
        for session in self.sessions:
            await session.aclose()

    def _new_sentence(self, text: str) -> int:
        sentence_id = len(self.sentences) + 1
        self.sentences[sentence_id] = text.strip()
        self.synthesized_at[sentence_id] = asyncio.get_running_loop().time()
        return sentence_id


@dataclass
class _Generation:
    """A response as the session streams it to livekit."""

    record: RealtimeResponse
    message_ch: utils.aio.Chan[llm.MessageGeneration] = field(default_factory=utils.aio.Chan)
    function_ch: utils.aio.Chan[FunctionCall] = field(default_factory=utils.aio.Chan)
    text_ch: utils.aio.Chan[str] = field(default_factory=utils.aio.Chan)
    audio_ch: utils.aio.Chan[rtc.AudioFrame] = field(default_factory=utils.aio.Chan)
    # Gemini opens a generation before knowing its answer, while the caller is still speaking
    answering: bool = True
    generated: bool = False  # the whole response is out (or cut)
    ended: bool = False  # livekit saw its end (OpenAI response.done, Gemini turn_complete)
    input_id: str = ""
    input_words: list[HeardWord] = field(default_factory=list)
    started_wall: float = 0.0
    spoken: str = ""  # the transcript generated so far
    task: asyncio.Task[None] | None = None
    playout_timer: asyncio.TimerHandle | None = None

    def message(self) -> llm.MessageGeneration:
        modalities: asyncio.Future[list[Literal["text", "audio"]]] = asyncio.Future()
        modalities.set_result(list(_MODALITIES))
        return llm.MessageGeneration(
            message_id=self.record.message_id,
            text_stream=self.text_ch,
            audio_stream=self.audio_ch,
            modalities=modalities,
        )

    def close_output(self) -> None:
        self.text_ch.close()
        self.audio_ch.close()

    def close(self) -> None:
        self.close_output()
        self.function_ch.close()
        self.message_ch.close()


class ScriptedRealtimeSession(llm.RealtimeSession[Never]):
    """One connection to :class:`ScriptedRealtimeModel`: its server VAD, conversation, replies."""

    def __init__(
        self, model: ScriptedRealtimeModel, *, turn_detection_disabled: bool = False
    ) -> None:
        super().__init__(model)
        self._model = model
        self._openai = model.flavour == "openai"
        self._capabilities = realtime_capabilities(
            model.flavour,
            turn_detection=model.capabilities.turn_detection and not turn_detection_disabled,
        )
        if self._openai:
            # a session with turns handed over can still be handed back: the model's flag stands
            self._capabilities.can_disable_turn_detection = (
                model.capabilities.can_disable_turn_detection
            )
        self._instructions = ""
        self._conversation = ChatContext.empty()  # what the server knows
        self._client_view = ChatContext.empty()  # Gemini: what livekit last sent
        self._tools = ToolContext.empty()
        self._tool_choice: ToolChoice | None = None
        self._current: _Generation | None = None
        self._last_spoken: RealtimeResponse | None = None
        self._pending: set[asyncio.Future[llm.GenerationCreatedEvent]] = set()
        # Gemini: requests another generate_reply replaced before the server answered them
        self._superseded: set[asyncio.Future[llm.GenerationCreatedEvent]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        # the input audio buffer and the server VAD
        self._buffer: list[HeardWord] = []
        self._frames: dict[tuple[int, int], int] = {}
        self._buffer_started: float | None = None
        self._speaking = False
        self._silence_s = 0.0
        self._turn_started_wall = 0.0
        self._turn_item_id = ""

    @property
    @override
    def capabilities(self) -> llm.RealtimeCapabilities:
        return self._capabilities

    @property
    @override
    def chat_ctx(self) -> ChatContext:
        return (self._conversation if self._openai else self._client_view).copy()

    @property
    @override
    def tools(self) -> ToolContext:
        return self._tools.copy()

    @property
    def conversation(self) -> ChatContext:
        """A copy of what the server knows: the context its next answer is chosen from."""
        return self._conversation.copy()

    @property
    def instructions(self) -> str:
        """The session's instructions."""
        return self._instructions

    @property
    def tool_choice(self) -> ToolChoice | None:
        """The session's tool choice."""
        return self._tool_choice

    @override
    async def update_instructions(self, instructions: str) -> None:
        self._instructions = instructions

    @override
    async def update_chat_ctx(self, chat_ctx: ChatContext) -> None:
        if self._openai:
            # the plugin syncs the server's items to chat_ctx: creates the missing, deletes extras
            self._conversation = chat_ctx.copy(exclude_handoff=True, exclude_config_update=True)
            return
        chat_ctx = chat_ctx.copy(
            exclude_handoff=True,
            exclude_instructions=True,
            exclude_empty_message=True,
            exclude_config_update=True,
        )
        known = {item.id for item in self._conversation.items}
        # Gemini only appends: it cannot remove what it already has
        added = [item for item in chat_ctx.items if item.id not in known]
        self._conversation.items.extend(added)
        self._client_view = chat_ctx
        if any(item.type == "function_call_output" for item in added):
            # auto_tool_reply_generation: the server answers the tool results itself
            self._spawn(self._gemini_tool_reply())

    @override
    async def update_tools(self, tools: list[Tool]) -> None:
        self._tools = ToolContext(tools)

    @override
    def update_options(self, *, tool_choice: NotGivenOr[ToolChoice | None] = NOT_GIVEN) -> None:
        if is_given(tool_choice):
            self._tool_choice = tool_choice

    @override
    def push_video(self, frame: rtc.VideoFrame) -> None:
        pass

    # -- hearing --

    @override
    def push_audio(self, frame: rtc.AudioFrame) -> None:
        if self._closed:
            return
        model = self._model
        model.frames_received += 1
        loop = asyncio.get_running_loop()
        heard = (
            frame_markers(frame)
            if model.script is None
            else read_markers(model.script(loop.time()))
        )
        markers = [m for m in heard if m.kind == KIND_USER]
        if not markers:
            if self._speaking:
                self._silence_s += frame.duration
                if self._silence_s >= model.silence_duration - 1e-9:
                    self._speech_stopped()
            return
        model.frames_with_speech += 1
        self._silence_s = 0.0
        if self._buffer_started is None:
            self._buffer_started = loop.time()
        if not self._speaking and self._capabilities.turn_detection:
            self._speech_started()
        # one marker per 10 ms of audio: a longer frame carries several
        for marker in markers:
            key = (marker.source_id, marker.part)
            count = self._frames.get(key, 0) + 1
            self._frames[key] = count
            if count * 2 >= marker.frames_in_part and count * 2 - 2 < marker.frames_in_part:
                self._word_heard(HeardWord(key[0], key[1], model.word(*key)))

    def _speech_started(self) -> None:
        self._speaking = True
        self._silence_s = 0.0
        self._turn_started_wall = time.time()
        now = asyncio.get_running_loop().time()
        current = self._current
        last = self._last_spoken
        if last is not None and last.interrupted_at is None and last.playing_at(now):
            last.interrupted_at = now
        if self._openai:
            self._turn_item_id = utils.shortuuid("item_")
            if current is not None and not current.generated:
                # interrupt_response: the server cancels the response it is still generating
                if current.record.interrupted_at is None:
                    current.record.interrupted_at = now
                self._cancel(current)
            self.emit("input_speech_started", llm.InputSpeechStartedEvent())
            return
        if current is not None and current.answering:
            # the server's "interrupted": the caller spoke before the turn played out
            if current.record.interrupted_at is None:
                current.record.interrupted_at = now
            if not self._pending:
                self.emit("input_speech_started", llm.InputSpeechStartedEvent())
            self._cancel(current)
            self._end_gemini_turn(current)

    def _word_heard(self, word: HeardWord) -> None:
        self._buffer.append(word)
        if self._openai or not self._capabilities.turn_detection:
            return
        current = self._current
        if current is None or current.answering:
            if current is not None:
                self._end_gemini_turn(current)
            current = self._open_generation(user_initiated=False, answering=False)
            current.input_id = utils.shortuuid("GI_")
            current.started_wall = self._turn_started_wall
        current.input_words.append(word)
        self.emit(
            "input_audio_transcription_completed",
            llm.InputTranscriptionCompleted(
                item_id=current.input_id,
                transcript=" ".join(w.text for w in current.input_words),
                is_final=False,
                turn_started_at=current.started_wall,
            ),
        )

    def _speech_stopped(self) -> None:
        self._speaking = False
        self._silence_s = 0.0
        if self._openai:
            self.emit(
                "input_speech_stopped",
                llm.InputSpeechStoppedEvent(user_transcription_enabled=True),
            )
            turn = self._commit("server_vad", self._turn_item_id)
            if turn is not None:
                self._create_response(user_initiated=False)
            return
        current = self._current
        if current is None or current.answering:
            self._take_buffer()  # speech without a whole word: nothing to answer
            return
        self._commit("server_vad", current.input_id, emit=False)
        current.answering = True
        self._answer(current, instructions=None)

    def _take_buffer(self) -> tuple[tuple[HeardWord, ...], float]:
        words = tuple(self._buffer)
        started = self._buffer_started
        self._buffer = []
        self._frames = {}
        self._buffer_started = None
        now = asyncio.get_running_loop().time()
        return words, started if started is not None else now

    def _commit(
        self, by: Literal["server_vad", "commit_audio"], item_id: str, *, emit: bool = True
    ) -> CommittedTurn | None:
        words, started = self._take_buffer()
        if not words:
            return None
        now = asyncio.get_running_loop().time()
        turn = CommittedTurn(
            item_id or utils.shortuuid("item_"),
            started,
            now,
            words,
            by,
            session=self._model.sessions.index(self),
        )
        self._model.turns.append(turn)
        self._model.finals.append((now, turn.text, words))
        self._conversation.items.append(
            llm.ChatMessage(role="user", content=[turn.text], id=turn.item_id)
        )
        if emit:
            self.emit(
                "input_audio_transcription_completed",
                llm.InputTranscriptionCompleted(
                    item_id=turn.item_id,
                    transcript=turn.text,
                    is_final=True,
                    confidence=1.0,
                    turn_started_at=self._turn_started_wall if by == "server_vad" else None,
                ),
            )
        return turn

    @override
    def commit_audio(self) -> None:
        if not self._openai:
            return  # "commit_audio is not supported by Gemini Realtime API."
        self._commit("commit_audio", "")

    @override
    def clear_audio(self) -> None:
        if not self._openai:
            return  # "clear_audio is not supported by Gemini Realtime API."
        words, _ = self._take_buffer()
        if words:
            self._model.cleared.append((asyncio.get_running_loop().time(), words))

    # -- answering --

    def _open_generation(
        self,
        *,
        user_initiated: bool,
        answering: bool = True,
        future: asyncio.Future[llm.GenerationCreatedEvent] | None = None,
    ) -> _Generation:
        loop = asyncio.get_running_loop()
        response_id = utils.shortuuid("resp_" if self._openai else "GR_")
        message_id = utils.shortuuid("item_") if self._openai else response_id
        record = RealtimeResponse(response_id, message_id, loop.time(), user_initiated)
        self._model.responses.append(record)
        generation = _Generation(record, answering=answering)
        if self._current is not None and not self._current.ended:
            # "starting new generation while another is active. Finalizing previous."
            self._end(self._current)
        self._current = generation
        if not self._openai:
            generation.message_ch.send_nowait(generation.message())
            if not user_initiated:
                # the plugin announces every generation it did not ask for this way
                self.emit("input_speech_started", llm.InputSpeechStartedEvent())
        event = llm.GenerationCreatedEvent(
            message_stream=generation.message_ch,
            function_stream=generation.function_ch,
            user_initiated=user_initiated,
            response_id=response_id,
        )
        if future is not None:
            future.set_result(event)
        self.emit("generation_created", event)
        return generation

    def _create_response(
        self,
        *,
        user_initiated: bool,
        future: asyncio.Future[llm.GenerationCreatedEvent] | None = None,
        instructions: str | None = None,
        tool_choice: NotGivenOr[ToolChoice] = NOT_GIVEN,
    ) -> None:
        generation = self._open_generation(user_initiated=user_initiated, future=future)
        self._answer(generation, instructions=instructions, tool_choice=tool_choice)

    def _answer(
        self,
        generation: _Generation,
        *,
        instructions: str | None,
        tool_choice: NotGivenOr[ToolChoice] = NOT_GIVEN,
        delay: float | None = None,
    ) -> None:
        rule, calls, hangs = self._decide(generation.record, instructions, tool_choice)
        generation.task = self._spawn(self._produce(generation, rule, calls, hangs, delay))

    def _decide(
        self,
        record: RealtimeResponse,
        instructions: str | None,
        tool_choice: NotGivenOr[ToolChoice],
    ) -> tuple[LLMRule, tuple[ToolCallScript, ...], bool]:
        model = self._model
        context = self._decision_context(instructions)
        rule, last_user_text, last_tool = model._brain.answer_for(context)
        if instructions and rule.when_instructed is None:
            quoted = quoted_line(instructions)
            if quoted is not None:
                rule = LLMRule(text=quoted, ttft=model.fallback_ttft)
        choice = tool_choice if is_given(tool_choice) else self._tool_choice
        calls = rule.tool_calls if choice != "none" else ()
        hangs = model.hangs_at(rule)
        record.text = "" if hangs else rule.text
        record.tool_calls = tuple(c.name for c in calls)
        record.instructions = instructions
        model.requests.append(
            LLMRequest(
                at=asyncio.get_running_loop().time(),
                user_texts=tuple(
                    i.text_content or ""
                    for i in context.items
                    if i.type == "message" and i.role == "user"
                ),
                last_user_text=last_user_text,
                last_tool=last_tool,
                reply=rule.text,
                tool_calls=record.tool_calls,
                hung=hangs,
            )
        )
        return rule, calls, hangs

    async def _produce(
        self,
        generation: _Generation,
        rule: LLMRule,
        calls: tuple[ToolCallScript, ...],
        hangs: bool,
        delay: float | None,
    ) -> None:
        if hangs:
            await asyncio.Future()  # until the response is cancelled
        loop = asyncio.get_running_loop()
        wait = rule.ttft if delay is None else delay
        # a generation opened late (Gemini's at its first content) already spent the rest
        started = loop.time() - (rule.ttft - wait)
        await asyncio.sleep(delivery_wait("realtime", wait))
        record = generation.record
        if rule.text and self._model.silent_for(rule):
            # Gemini's silent turn: text in audio mode (which the plugin drops) or nothing
            record.silent = True
        else:
            cut = self._model.cut_for(rule) if rule.text else None
            if rule.text and not await self._speak(generation, rule, cut) and cut is None:
                self._fail_mid_reply(generation)
                return
            if cut is not None:
                # the server fails as the reply's generation would have ended
                wait = delivery_wait("realtime", started + rule.duration - loop.time())
                if wait > 0:
                    await asyncio.sleep(wait)
                self._fail_mid_reply(generation)
                return
        remaining = delivery_wait("realtime", started + rule.duration - loop.time())
        if remaining > 0:
            await asyncio.sleep(remaining)
        for call in calls:
            fnc = FunctionCall(
                id=utils.shortuuid("item_"),
                call_id=utils.shortuuid("call_"),
                name=call.name,
                arguments=json.dumps(call.arguments),
            )
            self._conversation.items.append(fnc)
            generation.function_ch.send_nowait(fnc)
        generation.generated = True
        generation.close_output()
        if self._openai:
            self._end(generation)  # response.done
        elif calls or record.first_audio_at is None:
            self._end_gemini_turn(generation)  # a tool call ends Gemini's turn at once
        elif (fails_after := self._model.fails_after_reply_for(rule)) is not None:
            # the reply is whole; the server fails as it waits for the playout
            generation.playout_timer = loop.call_at(
                max(started + fails_after, loop.time()), self._fail_mid_reply, generation
            )
        else:
            # Gemini holds turn_complete back until it believes the audio has played out
            at = record.first_audio_at + record.audio_seconds
            generation.playout_timer = loop.call_at(
                max(at, loop.time()), self._end_gemini_turn, generation
            )

    async def _speak(
        self, generation: _Generation, rule: LLMRule, cut_after: int | None = None
    ) -> bool:
        """Stream the reply's audio and transcript; False if the server failed on the way.

        ``cut_after``: the audio stops before the chunk that carries a word past this many.
        """
        model = self._model
        model.spoken_replies += 1
        fails = not self._openai and model.error_mid_reply == model.spoken_replies
        loop = asyncio.get_running_loop()
        record = generation.record
        text = rule.text.strip()
        if self._openai:
            generation.message_ch.send_nowait(generation.message())  # output_item.added
        sentence_id = model._new_sentence(text)
        words = text.split(" ")
        seconds = model.duration_of(text)
        played = None
        if cut_after is not None and rule.cut_audio_seconds is not None:
            # the words that play last as long as the recorded call played them, the rest at
            # their pace; only those words' audio is sent
            seconds = rule.cut_audio_seconds * len(words) / max(cut_after, 1)
            played = max(1, round(rule.cut_audio_seconds / FRAME_SECONDS)) * FRAME_SAMPLES
        audio = marked_sentence_audio(sentence_id, seconds)
        record.sentence_id = sentence_id
        record.audio_seconds = len(audio) / SAMPLE_RATE
        record.first_audio_at = loop.time()
        self._last_spoken = record
        chunks = [audio[i : i + _CHUNK_SAMPLES] for i in range(0, len(audio), _CHUNK_SAMPLES)]
        step = max(0.0, rule.duration - rule.ttft) / len(chunks)
        if played is not None:
            assert cut_after is not None
            chunks = [audio[i : i + _CHUNK_SAMPLES] for i in range(0, played, _CHUNK_SAMPLES)]
            chunks[-1] = chunks[-1][: played - (len(chunks) - 1) * _CHUNK_SAMPLES]
            words = words[:cut_after]
        sent_words = 0
        for index, chunk in enumerate(chunks):
            if index:
                wait = delivery_wait("realtime", step)
                if wait > 0:
                    await asyncio.sleep(wait)
            if fails and index == len(chunks) // 2:
                return False
            due = -(-(index + 1) * len(words) // len(chunks))
            if cut_after is not None and due > cut_after:
                return False  # the server sent no more
            generation.audio_ch.send_nowait(
                rtc.AudioFrame(
                    data=chunk.tobytes(),
                    sample_rate=SAMPLE_RATE,
                    num_channels=1,
                    samples_per_channel=len(chunk),
                )
            )
            # the transcript keeps pace with the audio, as the providers' deltas do
            while sent_words < due:
                delta = words[sent_words] if sent_words == 0 else " " + words[sent_words]
                generation.spoken += delta
                generation.text_ch.send_nowait(delta)
                sent_words += 1
        if played is not None:
            return False  # the server sent no more
        self._conversation.items.append(
            llm.ChatMessage(role="assistant", content=[text], id=record.message_id)
        )
        return True

    def _fail_mid_reply(self, generation: _Generation) -> None:
        """The socket went: the plugin ends the generation where it was, then reports the error."""
        generation.task = None  # the running task ends by itself: nothing to cancel
        self._end_gemini_turn(generation)
        error = llm.RealtimeError("1011 None. Internal error encountered.")
        self.emit(
            "error",
            llm.RealtimeModelError(
                timestamp=time.time(), label=self._model.label, error=error, recoverable=True
            ),
        )

    async def _gemini_tool_reply(self) -> None:
        # a server-initiated generation opens when its first content arrives
        rule = self._model._brain.answer_for(self._decision_context(None))[0]
        await asyncio.sleep(delivery_wait("realtime", rule.ttft))
        if self._closed:
            return
        generation = self._open_generation(user_initiated=False)
        self._answer(generation, instructions=None, delay=0.0)

    def _decision_context(self, instructions: str | None) -> ChatContext:
        context = ChatContext.empty()
        if self._instructions:
            context.add_message(role="system", content=self._instructions)
        context.items.extend(self._conversation.items)
        if instructions:
            context.add_message(role="system", content=instructions)
        return context

    def _cancel(self, generation: _Generation) -> None:
        """The server cancels ``generation`` (OpenAI's response.done follows at once)."""
        self._stop_generating(generation)
        if self._openai:
            self._end(generation)

    def _stop_generating(self, generation: _Generation) -> None:
        """The server stops generating ``generation``: whatever was generated stays."""
        if generation.generated:
            return
        generation.generated = True
        generation.record.cancelled = True
        if generation.task is not None:
            generation.task.cancel()
        if generation.spoken and not any(
            i.id == generation.record.message_id for i in self._conversation.items
        ):
            self._conversation.items.append(
                llm.ChatMessage(
                    role="assistant", content=[generation.spoken], id=generation.record.message_id
                )
            )
        generation.close_output()

    def _end(self, generation: _Generation) -> None:
        if generation.ended:
            return
        self._stop_generating(generation)
        generation.ended = True
        generation.record.done_at = asyncio.get_running_loop().time()
        if generation.playout_timer is not None:
            generation.playout_timer.cancel()
        generation.close()
        if self._current is generation:
            self._current = None

    def _end_gemini_turn(self, generation: _Generation) -> None:
        """Gemini's turn_complete: the stop event, then the turn's final transcript."""
        if generation.ended:
            return
        self._stop_generating(generation)
        if not generation.answering:
            # the caller's turn was cut off by a new generation before it was answered
            self._commit("server_vad", generation.input_id, emit=False)
        self.emit(
            "input_speech_stopped", llm.InputSpeechStoppedEvent(user_transcription_enabled=False)
        )
        if generation.input_words:
            self.emit(
                "input_audio_transcription_completed",
                llm.InputTranscriptionCompleted(
                    item_id=generation.input_id,
                    transcript=" ".join(w.text for w in generation.input_words),
                    is_final=True,
                    turn_started_at=generation.started_wall,
                ),
            )
        self._end(generation)

    @override
    def generate_reply(
        self,
        *,
        instructions: NotGivenOr[str] = NOT_GIVEN,
        tool_choice: NotGivenOr[ToolChoice] = NOT_GIVEN,
        tools: NotGivenOr[list[Tool]] = NOT_GIVEN,
    ) -> asyncio.Future[llm.GenerationCreatedEvent]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[llm.GenerationCreatedEvent] = loop.create_future()
        if self._closed:
            future.set_exception(llm.RealtimeError("the session is closed"))
            return future
        if self._openai and (self._current is not None or self._pending):
            error = llm.RealtimeError(
                "Conversation already has an active response in progress", code=_ACTIVE_RESPONSE
            )
            future.set_exception(error)
            self.emit(
                "error",
                llm.RealtimeModelError(
                    timestamp=time.time(), label=self._model.label, error=error, recoverable=True
                ),
            )
            return future
        superseded = self._superseded
        if not self._openai:
            for pending in list(self._pending):
                superseded.add(pending)  # the server stops its reply before its first content
                pending.cancel()  # "generate_reply called while another generation is pending"
            if not self._capabilities.turn_detection:
                self._commit("commit_audio", "")  # activity_end: the caller's turn is over
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        reply_instructions = instructions if is_given(instructions) else None

        def create() -> None:
            if self._closed:
                return
            if not self._openai and future not in superseded:
                opened = self._current
                if opened is not None and opened.answering and not opened.generated:
                    # the request reached the server whatever became of the client's future
                    self._reply_into(opened, future, reply_instructions)
                    return
            superseded.discard(future)
            if future.done():
                return  # cancelled before the server created it: discarded
            self._pending.discard(future)
            self._create_response(
                user_initiated=True,
                future=future,
                instructions=reply_instructions,
                tool_choice=tool_choice if self._openai else NOT_GIVEN,
            )

        loop.call_soon(create)
        return future

    def _reply_into(
        self,
        opened: _Generation,
        future: asyncio.Future[llm.GenerationCreatedEvent],
        instructions: str | None,
    ) -> None:
        """Gemini: the server's new reply streams into the generation the plugin still has open.

        The server stops the reply it was generating (no ``turn_complete``) and answers the
        request; the plugin opens a new generation only when none is open, so the new reply's
        content lands in the open one (the handle livekit made for it), and the request's future
        is left pending until its 5 s timeout, as livekit-plugins-google's ``generate_reply``.
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        stopped = opened.record
        stopped.cancelled = True
        stopped.done_at = now
        if opened.task is not None:
            opened.task.cancel()
        if opened.spoken:
            # what the stopped reply generated stays in the conversation
            self._conversation.items.append(
                llm.ChatMessage(role="assistant", content=[opened.spoken], id=stopped.message_id)
            )
            opened.spoken = ""
        opened.record = RealtimeResponse(
            utils.shortuuid("GR_"), stopped.message_id, now, user_initiated=True
        )
        self._model.responses.append(opened.record)
        self._answer(opened, instructions=instructions)

        def time_out() -> None:
            if not future.done():
                future.set_exception(
                    llm.RealtimeError(
                        "generate_reply timed out waiting for generation_created event."
                    )
                )

        loop.call_later(_GENERATE_REPLY_TIMEOUT_S, time_out)

    @override
    def interrupt(self) -> None:
        if not self._openai:
            return  # Gemini interrupts on its own activity detection only
        if self._current is not None:
            self._cancel(self._current)

    @override
    def truncate(
        self,
        *,
        message_id: str,
        modalities: list[Literal["text", "audio"]],
        audio_end_ms: int,
        audio_transcript: NotGivenOr[str] = NOT_GIVEN,
    ) -> None:
        if not self._openai:
            return  # "truncate is not supported by the Google Realtime API."
        for record in self._model.responses:
            if record.message_id == message_id:
                record.truncated_ms = audio_end_ms
        index = next(
            (i for i, item in enumerate(self._conversation.items) if item.id == message_id), None
        )
        if index is None:
            return
        if audio_end_ms <= 0:
            del self._conversation.items[index]
        else:
            # the server deletes the transcript so nothing unheard stays in the context
            item = self._conversation.items[index]
            if item.type == "message":
                self._conversation.items[index] = llm.ChatMessage(
                    role=item.role, content=[], id=item.id
                )

    @override
    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._current is not None:
            self._end(self._current)
        for future in list(self._pending):
            future.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def quoted_line(instructions: str) -> str | None:
    """The first quoted text in ``instructions``, if any."""
    found = _QUOTED.search(instructions)
    if found is None:
        return None
    return next(g for g in found.groups() if g is not None).strip() or None
