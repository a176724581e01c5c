"""Gemini Live (``BidiGenerateContent`` over a websocket), as livekit-plugins-google drives it.

``wss://…/ws/google.ai.generativelanguage.{version}.GenerativeService.BidiGenerateContent``
(google-genai forces TLS with an API key: the server takes a throwaway certificate, see
:mod:`._tls`). The first message is ``setup`` (answered with ``setupComplete``); then
``realtimeInput`` audio (base64 PCM16 at 16 kHz), ``clientContent`` turns and ``toolResponse``.

Hearing. The server's VAD hears the lab's marked caller words in the PCM that reached it
(:mod:`._hearing`): speech starts at the first marked frame and a turn ends after
``silence_s`` of frames without a mark. Each recognised word is sent at once as an
``inputTranscription``. Speech that starts while a reply is being generated, or is still
playing by the server's estimate, is a barge-in: the reply stops, ``interrupted`` then
``turnComplete`` are sent, and calls still unanswered are cancelled (``toolCallCancellation``).

Answers come from the scenario's :class:`~resilient_agent.testing.llm.ScriptedLLM`, chosen
from the server's own conversation (the context a ``generateContent`` request would carry,
read back by :func:`._context.from_gemini`). A reply is marked audio at 24 kHz (each 10 ms says
which sentence it is, as the lab's TTS audio does) in 100 ms ``modelTurn`` chunks with its
``outputTranscription`` keeping pace, then ``generationComplete``; ``turnComplete`` (and a
``sessionResumptionUpdate``) follow when the server believes the audio has played out. Tool
calls come whole in a ``toolCall`` after the text, and a ``toolResponse`` is answered by the
server itself. A rule's ``silent_answers`` answers that many replies with text only (or, with
``silent_as="empty"``, nothing but ``turnComplete``): Gemini's silent turn.

What Google's docs leave open is in docs/provider-emulators.md (assumptions 12-17).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import WSMsgType, web

from ..audio import KIND_AGENT, AudioMarker, marker_frame_samples
from ..llm import LLMRule, ScriptedLLM, ToolCallScript
from ..realtime import quoted_line
from ..schedule import delivery_wait
from ..stt import HeardWord
from ._context import from_gemini
from ._hearing import MarkedListener, WordLookup
from ._server import EmulatorServer
from ._spoken import SpokenSentences
from ._tls import throwaway_tls

__all__ = ["OUTPUT_SAMPLE_RATE", "GeminiLiveEmulator", "GeminiLiveFaults"]

OUTPUT_SAMPLE_RATE = 24_000
_FRAME = OUTPUT_SAMPLE_RATE // 100
_CHUNK_FRAMES = 10  # 100 ms of audio per modelTurn message
_TONE = (np.sin(np.arange(_FRAME) * 2 * np.pi * 220 / OUTPUT_SAMPLE_RATE) * 3_000).astype(np.int16)
_INLINE_OPEN = "<instructions>\n"
_INLINE_CLOSE = "\n</instructions>"
_DUMMY_USER_TEXT = "."


@dataclass(frozen=True)
class GeminiLiveFaults:
    """Wire faults of the Gemini Live emulator (each counts spoken replies from 1).

    Attributes:
        drop_in_reply: The socket is dropped (no close frame) halfway through that reply.
        go_away_in_reply: A ``goAway`` is sent as that reply begins (the server leaving soon).
        error_in_reply: The server closes the socket with 1011 (internal error) as that reply
            begins.
        error_mid_reply: The server closes the socket with 1011 halfway through that reply's
            audio (the caller heard its first half).
        error_after_reply: The server closes the socket with 1011 once that reply is whole:
            after its ``generationComplete``, halfway through the rest of its playout (before
            the ``turnComplete`` the server sends when it believes the audio played out).
    """

    drop_in_reply: int | None = None
    go_away_in_reply: int | None = None
    error_in_reply: int | None = None
    error_mid_reply: int | None = None
    error_after_reply: int | None = None


@dataclass
class _Reply:
    """One reply of the server, as it streams."""

    task: asyncio.Task[None] | None = None
    first_audio_at: float | None = None
    audio_seconds: float = 0.0
    generated: bool = False
    spoken: str = ""
    calls: list[str] = field(default_factory=list)
    playout: asyncio.TimerHandle | None = None

    def playing_at(self, now: float) -> bool:
        return self.first_audio_at is not None and now < self.first_audio_at + self.audio_seconds


class GeminiLiveEmulator(EmulatorServer, SpokenSentences):
    """The Gemini Live API on loopback (TLS), answering from ``llm``.

    It also stands in for the STT and TTS the lab reads: ``finals`` (what its VAD committed),
    ``sentences``, ``synthesized_at`` and ``duration_of`` (what it spoke).

    Attributes:
        llm: The scripted LLM whose answers are served (its ``requests`` record each one).
        faults: Wire faults.
        silence_s: Seconds of silence that end the caller's turn (its VAD).
        finals: ``(loop time, text, words)`` of every committed caller turn.
        sentences: Sentence id to text, for every reply that spoke.
        synthesized_at: Sentence id to the loop time its audio began to be generated.
        setups: The ``setup`` message of every connection.
        received: Client messages received, by kind.
        sent: Server messages sent, by kind.
        silent_replies: Replies sent without audio (text only or empty).
        interruptions: Loop times of every barge-in.
    """

    provider = "gemini-live-emulator"

    def __init__(
        self,
        llm: ScriptedLLM,
        word_lookup: WordLookup,
        *,
        faults: GeminiLiveFaults | None = None,
        silence_s: float = 0.5,
        seconds_per_char: float = 1 / 15,
        min_seconds: float = 0.3,
    ) -> None:
        super().__init__()
        self.llm = llm
        self.word_lookup = word_lookup
        self.faults = faults or GeminiLiveFaults()
        self.silence_s = silence_s
        self.seconds_per_char = seconds_per_char
        self.min_seconds = min_seconds
        self.tls = throwaway_tls()
        self.ssl_context = self.tls.server
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.sentences: dict[int, str] = {}
        self.synthesized_at: dict[int, float] = {}
        self.setups: list[dict[str, Any]] = []
        self.received: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.silent_replies = 0
        self.interruptions: list[float] = []
        self.replies = 0
        self.model = "gemini-2.5-flash-native-audio-preview-12-2025"
        # the conversation each resumption handle stands for
        self.resumable: dict[str, list[dict[str, Any]]] = {}
        # silent replies given, by rule (rules hold dicts: counted by identity)
        self._silent_used: Counter[int] = Counter()

    def routes(self) -> list[web.RouteDef]:
        """The Live API's websocket."""
        return [web.get("/ws/{method}", self._connect)]

    def silent_for(self, rule: LLMRule) -> bool:
        """Whether this reply by ``rule`` comes without audio (its ``silent_answers``)."""
        if self._silent_used[id(rule)] >= rule.silent_answers:
            return False
        self._silent_used[id(rule)] += 1
        return True

    async def _connect(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if not method.endswith(".GenerativeService.BidiGenerateContent"):
            return web.json_response({"error": {"message": f"no {method} here"}}, status=404)
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        connection = _Connection(self, ws, request)
        try:
            await connection.serve()
        finally:
            connection.close()
        return ws


def _get(message: dict[str, Any], camel: str, snake: str) -> Any:
    return message.get(camel, message.get(snake))


def _kind(message: dict[str, Any]) -> str:
    return next(iter(message), "empty")


class _Connection:
    """One websocket: the server's VAD, conversation and replies."""

    def __init__(
        self, server: GeminiLiveEmulator, ws: web.WebSocketResponse, request: web.Request
    ) -> None:
        self.server = server
        self.ws = ws
        self.request = request
        self.listener = MarkedListener(server.word_lookup, 16_000)
        self.system = ""
        self.contents: list[dict[str, Any]] = []
        self.handle = ""
        self.speaking = False
        self.silence = 0.0
        self.turn_words: list[HeardWord] = []
        self.reply: _Reply | None = None
        self.unanswered_calls: list[str] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        async for msg in self.ws:
            if msg.type != WSMsgType.TEXT and msg.type != WSMsgType.BINARY:
                break
            message = json.loads(msg.data)
            kind = _kind(message)
            self.server.received[kind] += 1
            if kind == "setup":
                await self._setup(message["setup"])
            elif kind in ("realtimeInput", "realtime_input"):
                await self._realtime_input(message[kind])
            elif kind in ("clientContent", "client_content"):
                self._client_content(message[kind])
            elif kind in ("toolResponse", "tool_response"):
                self._tool_response(message[kind])

    def close(self) -> None:
        if self.reply is not None and self.reply.playout is not None:
            self.reply.playout.cancel()
        for task in list(self.tasks):
            task.cancel()

    async def send(self, message: dict[str, Any]) -> None:
        if self.ws.closed:
            return
        self.server.sent[
            _kind(message)
            if "serverContent" not in message
            else _content_kind(message["serverContent"])
        ] += 1
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_str(json.dumps(message))

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # -- setup --

    async def _setup(self, setup: dict[str, Any]) -> None:
        self.server.setups.append(setup)
        self.server.model = str(setup.get("model", self.server.model)).removeprefix("models/")
        system = _get(setup, "systemInstruction", "system_instruction") or {}
        self.system = "\n".join(p.get("text", "") for p in system.get("parts", []))
        resumption = _get(setup, "sessionResumption", "session_resumption") or {}
        handle = resumption.get("handle")
        if handle and handle in self.server.resumable:
            self.contents = [dict(c) for c in self.server.resumable[handle]]
        await self.send({"setupComplete": {}})

    def _resumption_update(self) -> dict[str, Any]:
        self.handle = self.server.next_id("resume")
        self.server.resumable[self.handle] = list(self.contents)
        return {"sessionResumptionUpdate": {"newHandle": self.handle, "resumable": True}}

    # -- hearing --

    async def _realtime_input(self, realtime: dict[str, Any]) -> None:
        audio = realtime.get("audio")
        if audio is None:
            return
        pcm = base64.b64decode(audio.get("data", ""), altchars=b"-_")
        for frame in self.listener.hear(pcm):
            if frame.speech:
                self.silence = 0.0
                if not self.speaking:
                    self.speaking = True
                    await self._speech_started()
                for timed in frame.recognised:
                    self.turn_words.append(timed.word)
                    text = timed.word.text if len(self.turn_words) == 1 else " " + timed.word.text
                    await self.send({"serverContent": {"inputTranscription": {"text": text}}})
            elif self.speaking:
                self.silence += self.listener.frame_seconds
                if self.silence >= self.server.silence_s - 1e-9:
                    self.speaking = False
                    self._turn_ended()

    async def _speech_started(self) -> None:
        reply = self.reply
        loop = asyncio.get_running_loop()
        if self.unanswered_calls:
            # the caller spoke before the calls were answered: the server drops them
            await self.send({"toolCallCancellation": {"ids": list(self.unanswered_calls)}})
            self.unanswered_calls = []
        if reply is None or not (not reply.generated or reply.playing_at(loop.time())):
            return
        # the barge-in: the reply stops where it is, the client is told, the turn ends
        self.server.interruptions.append(loop.time())
        self._stop(reply)
        await self.send({"serverContent": {"interrupted": True}})
        await self._turn_complete(reply)

    def _turn_ended(self) -> None:
        words, self.turn_words = self.turn_words, []
        if not words:
            return  # no whole word heard: nothing to answer
        text = " ".join(w.text for w in words)
        self.server.finals.append((asyncio.get_running_loop().time(), text, tuple(words)))
        self.contents.append({"role": "user", "parts": [{"text": text}]})
        self._answer(instructions="")

    # -- what the client sends --

    def _client_content(self, content: dict[str, Any]) -> None:
        instructions = []
        turns = list(content.get("turns") or [])
        complete = bool(_get(content, "turnComplete", "turn_complete"))
        if complete and _reply_instructions(turns) is not None:
            # generate_reply(instructions=...) on most models: a model turn the model
            # continues, then a "." user turn; the text is that reply's, not the conversation's
            instructions.append(str(_reply_instructions(turns)))
            turns = turns[:-2]
        for turn in turns:
            parts = []
            for part in turn.get("parts", []):
                text = part.get("text")
                if turn.get("role") == "user" and isinstance(text, str):
                    if text.startswith(_INLINE_OPEN) and text.endswith(_INLINE_CLOSE):
                        # a reply's own instructions: for that reply, not the conversation
                        instructions.append(text[len(_INLINE_OPEN) : -len(_INLINE_CLOSE)])
                        continue
                    if text == _DUMMY_USER_TEXT:
                        continue
                parts.append(part)
            if parts:
                self.contents.append({"role": turn.get("role", "user"), "parts": parts})
        if complete:
            self._answer(instructions="\n".join(instructions))

    def _tool_response(self, response: dict[str, Any]) -> None:
        parts = []
        for answered in _get(response, "functionResponses", "function_responses") or []:
            parts.append({"functionResponse": answered})
            if answered.get("id") in self.unanswered_calls:
                self.unanswered_calls.remove(answered["id"])
        if parts:
            self.contents.append({"role": "user", "parts": parts})
            self._answer(instructions="")  # the server answers tool results itself

    # -- replies --

    def _answer(self, *, instructions: str) -> None:
        if self.reply is not None and not self.reply.generated:
            self._stop(self.reply)
        body: dict[str, Any] = {"contents": self.contents}
        if self.system:
            body["systemInstruction"] = {"parts": [{"text": self.system}]}
        ctx = from_gemini(body)
        if instructions:
            ctx.add_message(role="system", content=instructions)
        answer = self.server.llm.answer(ctx)
        rule = answer.rule
        if instructions and rule.when_instructed is None:
            quoted = quoted_line(instructions)
            if quoted is not None:
                rule = LLMRule(text=quoted, ttft=self.server.llm.fallback_ttft)
        reply = _Reply()
        self.reply = reply
        reply.task = self.spawn(self._produce(reply, rule, answer.calls, answer.hangs))

    async def _produce(
        self, reply: _Reply, rule: LLMRule, calls: tuple[ToolCallScript, ...], hangs: bool
    ) -> None:
        server = self.server
        loop = asyncio.get_running_loop()
        if hangs:
            await asyncio.Future()  # until a barge-in or the socket's end
        started = loop.time()
        await asyncio.sleep(delivery_wait("realtime", rule.ttft))
        server.replies += 1
        number = server.replies
        if server.faults.error_in_reply == number:
            await self.ws.close(code=1011, message=b"Internal error encountered.")
            return
        if server.faults.go_away_in_reply == number:
            await self.send({"goAway": {"timeLeft": "10s"}})
        silent = bool(rule.text) and server.silent_for(rule)
        if rule.text and not silent:
            await self._speak(
                reply,
                rule,
                drop=server.faults.drop_in_reply == number,
                error=server.faults.error_mid_reply == number,
            )
        elif silent:
            server.silent_replies += 1
            if rule.silent_as == "text":
                # text in audio mode: a modelTurn with a text part and no audio
                await self.send({"serverContent": {"modelTurn": {"parts": [{"text": rule.text}]}}})
        remaining = delivery_wait("realtime", started + rule.duration - loop.time())
        if remaining > 0:
            await asyncio.sleep(remaining)
        reply.generated = True
        if reply.spoken:
            self.contents.append({"role": "model", "parts": [{"text": reply.spoken}]})
        if calls:
            function_calls = []
            for call in calls:
                call_id = server.next_id("function-call")
                function_calls.append({"id": call_id, "name": call.name, "args": call.arguments})
                reply.calls.append(call_id)
            self.unanswered_calls = list(reply.calls)
            self.contents.append(
                {"role": "model", "parts": [{"functionCall": c} for c in function_calls]}
            )
            # a tool call ends the plugin's generation; the server waits for the response
            await self.send({"toolCall": {"functionCalls": function_calls}})
            return
        await self.send({"serverContent": {"generationComplete": True}})
        if reply.first_audio_at is None:
            await self._turn_complete(reply)
            return
        # turnComplete waits until the server believes its audio has played out
        at = max(loop.time(), reply.first_audio_at + reply.audio_seconds)
        if server.faults.error_after_reply == number:
            # the reply is whole at the client: the server fails while it waits for the playout
            await asyncio.sleep((at - loop.time()) / 2)
            await self.ws.close(code=1011, message=b"Internal error encountered.")
            return
        reply.playout = loop.call_at(at, lambda: self.spawn(self._turn_complete(reply)))

    async def _speak(self, reply: _Reply, rule: LLMRule, *, drop: bool, error: bool) -> None:
        server = self.server
        loop = asyncio.get_running_loop()
        text = rule.text.strip()
        sentence_id = server.new_sentence(text)
        audio = marked_reply_audio(sentence_id, server.duration_of(text))
        reply.first_audio_at = loop.time()
        reply.audio_seconds = len(audio) / OUTPUT_SAMPLE_RATE
        chunk = _CHUNK_FRAMES * _FRAME
        chunks = [audio[i : i + chunk] for i in range(0, len(audio), chunk)]
        words = text.split(" ")
        step = max(0.0, rule.duration - rule.ttft) / len(chunks)
        sent_words = 0
        for index, piece in enumerate(chunks):
            if index:
                wait = delivery_wait("realtime", step)
                if wait > 0:
                    await asyncio.sleep(wait)
            if drop and index == len(chunks) // 2:
                # the socket goes away mid-reply, with no close frame
                if self.request.transport is not None:
                    self.request.transport.abort()
                await asyncio.Future()
            if error and index == len(chunks) // 2:
                # a server error mid-reply: a close frame, the rest of the reply never sent
                await self.ws.close(code=1011, message=b"Internal error encountered.")
                await asyncio.Future()
            data = base64.b64encode(piece.tobytes()).decode()
            inline = {
                "inlineData": {"mimeType": f"audio/pcm;rate={OUTPUT_SAMPLE_RATE}", "data": data}
            }
            await self.send({"serverContent": {"modelTurn": {"parts": [inline]}}})
            due = -(-(index + 1) * len(words) // len(chunks))
            delta = ""
            while sent_words < due:
                delta += words[sent_words] if sent_words == 0 else " " + words[sent_words]
                sent_words += 1
            if delta:
                reply.spoken += delta
                await self.send({"serverContent": {"outputTranscription": {"text": delta}}})

    def _stop(self, reply: _Reply) -> None:
        """The server stops generating ``reply``: what was generated stays in the conversation."""
        if reply.playout is not None:
            reply.playout.cancel()
        if reply.generated:
            return
        reply.generated = True
        if reply.task is not None and reply.task is not asyncio.current_task():
            reply.task.cancel()
        if reply.spoken:
            self.contents.append({"role": "model", "parts": [{"text": reply.spoken}]})

    async def _turn_complete(self, reply: _Reply) -> None:
        if self.reply is reply:
            self.reply = None
        await self.send({"serverContent": {"turnComplete": True}})
        await self.send(self._resumption_update())


def _reply_instructions(turns: list[dict[str, Any]]) -> str | None:
    """The instructions of a ``[model: text, user: "."]`` ending, if the turns end so."""
    if len(turns) < 2:
        return None
    said, dot = turns[-2], turns[-1]
    dot_parts = dot.get("parts") or []
    said_parts = said.get("parts") or []
    if dot.get("role") != "user" or [p.get("text") for p in dot_parts] != [_DUMMY_USER_TEXT]:
        return None
    if said.get("role") != "model" or len(said_parts) != 1 or "text" not in said_parts[0]:
        return None
    return str(said_parts[0]["text"])


def _content_kind(content: dict[str, Any]) -> str:
    return next(iter(content), "serverContent")


def marked_reply_audio(sentence_id: int, seconds: float) -> np.ndarray:
    """One reply's 24 kHz audio: every 10 ms carries its sentence's marker."""
    frames = max(1, round(seconds / 0.01))
    return np.concatenate(
        [
            marker_frame_samples(AudioMarker(KIND_AGENT, sentence_id, i, 0, frames), _TONE)
            for i in range(frames)
        ]
    )
