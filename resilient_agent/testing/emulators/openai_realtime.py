"""OpenAI Realtime (GA events, one websocket), as livekit-plugins-openai drives it.

``ws://…/v1/realtime?model=...`` (the plugin turns its ``base_url`` into a websocket URL and adds
``/realtime``). Client events: ``session.update`` (answered with ``session.updated``),
``input_audio_buffer.append`` (base64 PCM16 at 24 kHz), ``input_audio_buffer.commit`` /
``clear``, ``conversation.item.create`` / ``delete`` / ``truncate``, ``response.create`` and
``response.cancel``.

Hearing. The plugin resamples the caller's audio, which erases the lab's word marks, so the
server's VAD hears speech by energy and names the words by their place on the caller's line
(:mod:`._energy`): ``input_audio_buffer.speech_started`` at the first loud frame, and after
``silence_s`` without one ``speech_stopped``, ``committed``, the user item
(``conversation.item.added`` / ``done``), its transcript
(``conversation.item.input_audio_transcription.completed``) and a response, as the server VAD's
``create_response`` does. Speech that starts while a response is being generated cancels it
(``interrupt_response``): ``response.done`` with ``status: cancelled``. A turn with no whole word
heard is not committed.

Answers come from the scenario's :class:`~resilient_agent.testing.llm.ScriptedLLM`, chosen from
the server's own conversation (its items, read back by :func:`._context.from_openai_realtime`),
led by the session's instructions and followed by the response's own. A response is
``response.created``; after the rule's ``ttft`` a message item (``response.output_item.added``,
``conversation.item.added``, ``response.content_part.added``) whose audio is the lab's marked
reply audio at 24 kHz in 100 ms ``response.output_audio.delta`` events, each followed by the
``response.output_audio_transcript.delta`` of the words due by then, generated evenly over the
rule's ``duration``; then its tool calls (``function_call`` items with their arguments whole in
``response.function_call_arguments.done``); then ``response.done``. One response at a time:
``response.create`` during another is an ``error`` (``conversation_already_has_active_response``).

What OpenAI's docs leave open is in docs/provider-emulators.md (assumptions 18-23).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from ..llm import LLMRule, ScriptedLLM, ToolCallScript
from ..realtime import quoted_line
from ..schedule import delivery_wait
from ..stt import HeardWord
from ._context import from_openai_realtime
from ._energy import EnergyListener, ScheduledUtterance
from ._server import EmulatorServer
from ._spoken import SpokenSentences
from .gemini_live import marked_reply_audio

__all__ = ["SAMPLE_RATE", "OpenAIRealtimeEmulator", "OpenAIRealtimeFaults", "ScheduledUtterance"]

SAMPLE_RATE = 24_000
_CHUNK_SAMPLES = SAMPLE_RATE // 10  # 100 ms of audio per delta
# a burst of held audio comes in many messages at one instant: it is heard once it is all in
_SETTLE_S = 0.002
_ACTIVE_RESPONSE = "conversation_already_has_active_response"


@dataclass(frozen=True)
class OpenAIRealtimeFaults:
    """Wire faults of the OpenAI Realtime emulator (each counts spoken replies from 1).

    Attributes:
        drop_in_reply: The socket is dropped (no close frame) halfway through that reply's audio.
        error_in_reply: The server closes the socket with 1011 (internal error) as that reply
            begins.
    """

    drop_in_reply: int | None = None
    error_in_reply: int | None = None


@dataclass
class _Response:
    """One response of the server, as it streams."""

    id: str
    metadata: dict[str, Any]
    task: asyncio.Task[None] | None = None
    generated: bool = False
    output: list[dict[str, Any]] = field(default_factory=list)
    message: dict[str, Any] | None = None
    spoken: str = ""


class OpenAIRealtimeEmulator(EmulatorServer, SpokenSentences):
    """The OpenAI Realtime API on loopback, answering from ``llm``.

    It also stands in for the STT and TTS the lab reads: ``finals`` (what its VAD committed),
    ``sentences``, ``synthesized_at`` and ``duration_of`` (what it spoke).

    Attributes:
        llm: The scripted LLM whose answers are served (its ``requests`` record each one).
        faults: Wire faults.
        utterances: The caller's utterances on the line, by span (what the VAD names words by).
        clock: The call's clock, the one the utterances' spans are on.
        silence_s: Seconds of silence that end the caller's turn (its VAD).
        finals: ``(loop time, text, words)`` of every committed caller turn.
        sentences: Sentence id to text, for every response that spoke.
        synthesized_at: Sentence id to the loop time its audio began to be generated.
        session_updates: The ``session`` of every ``session.update``.
        received: Client events received, by type.
        sent: Server events sent, by type.
        interruptions: Loop times at which the VAD cancelled a response being generated.
        truncations: ``(item id, audio_end_ms)`` of every ``conversation.item.truncate``.
        line_offsets: Each connection's audio start on the line, as its VAD placed it.
    """

    provider = "openai-realtime-emulator"

    def __init__(
        self,
        llm: ScriptedLLM,
        utterances: Sequence[ScheduledUtterance],
        clock: Callable[[], float],
        *,
        faults: OpenAIRealtimeFaults | None = None,
        silence_s: float = 0.5,
        seconds_per_char: float = 1 / 15,
        min_seconds: float = 0.3,
    ) -> None:
        super().__init__()
        self.llm = llm
        self.faults = faults or OpenAIRealtimeFaults()
        self.replies = 0
        self.utterances = tuple(utterances)
        self.clock = clock
        self.silence_s = silence_s
        self.seconds_per_char = seconds_per_char
        self.min_seconds = min_seconds
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.sentences: dict[int, str] = {}
        self.synthesized_at: dict[int, float] = {}
        self.session_updates: list[dict[str, Any]] = []
        self.received: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.interruptions: list[float] = []
        self.truncations: list[tuple[str, int]] = []
        self.line_offsets: list[float] = []
        self.model = "gpt-realtime"

    @property
    def base_url(self) -> str:
        """What the plugin's ``base_url`` is set to (``http://127.0.0.1:PORT/v1``)."""
        return f"{self.url}/v1"

    def routes(self) -> list[web.RouteDef]:
        """The realtime websocket."""
        return [web.get("/v1/realtime", self._connect)]

    async def _connect(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        connection = _Connection(self, ws, request)
        try:
            await connection.serve()
        finally:
            connection.close()
        return ws


class _Connection:
    """One websocket: the server's VAD, conversation and responses."""

    def __init__(
        self, server: OpenAIRealtimeEmulator, ws: web.WebSocketResponse, request: web.Request
    ) -> None:
        self.server = server
        self.ws = ws
        self.request = request
        self.listener = EnergyListener(server.utterances, server.clock, SAMPLE_RATE)
        self.offset_index = len(server.line_offsets)
        server.line_offsets.append(float("inf"))
        self.session: dict[str, Any] = {}
        self.server_vad = True
        self.transcribe = True
        # what the model heard in each user item: its context, whether or not it is transcribed
        self.heard: dict[str, str] = {}
        self.items: list[dict[str, Any]] = []
        self.speaking = False
        self.silence = 0.0
        self.turn_words: list[HeardWord] = []
        self.turn_item = ""
        self.response: _Response | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.hearing: asyncio.TimerHandle | None = None
        # frames are heard in order, one batch after the other
        self.hearing_lock = asyncio.Lock()

    async def serve(self) -> None:
        async for msg in self.ws:
            if msg.type != WSMsgType.TEXT:
                break
            event = json.loads(msg.data)
            kind = str(event.get("type", ""))
            self.server.received[kind] += 1
            handler = self._handlers().get(kind)
            if handler is not None:
                await handler(event)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit_event,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "conversation.item.delete": self._item_delete,
            "conversation.item.truncate": self._item_truncate,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
        }

    def close(self) -> None:
        if self.hearing is not None:
            self.hearing.cancel()
        for task in list(self.tasks):
            task.cancel()

    async def send(self, event: dict[str, Any]) -> None:
        if self.ws.closed:
            return
        self.server.sent[event["type"]] += 1
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_str(json.dumps({"event_id": self.server.next_id("event"), **event}))

    async def error(self, code: str, message: str, event_id: str | None = None) -> None:
        error = {"type": "invalid_request_error", "code": code, "message": message}
        await self.send({"type": "error", "error": {**error, "event_id": event_id}})

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # -- session --

    async def _session_update(self, event: dict[str, Any]) -> None:
        session = dict(event.get("session") or {})
        self.server.session_updates.append(session)
        self.server.model = str(session.get("model") or self.server.model)
        audio_input = (session.get("audio") or {}).get("input") or {}
        if "turn_detection" in audio_input:
            detection = audio_input["turn_detection"]
            self.server_vad = (
                detection is not None and detection.get("create_response") is not False
            )
        if "transcription" in audio_input:
            self.transcribe = audio_input["transcription"] is not None
        self.session.update({k: v for k, v in session.items() if v is not None})
        await self.send({"type": "session.updated", "session": self.session})

    # -- hearing --

    async def _append(self, event: dict[str, Any]) -> None:
        self.listener.receive(base64.b64decode(event.get("audio", "")))
        self.server.line_offsets[self.offset_index] = self.listener.line_offset
        if self.hearing is None:
            loop = asyncio.get_running_loop()
            self.hearing = loop.call_later(_SETTLE_S, lambda: self.spawn(self._hear()))

    async def _hear(self) -> None:
        self.hearing = None
        async with self.hearing_lock:
            await self._hear_frames()

    async def _hear_frames(self) -> None:
        for frame in self.listener.hear():
            if frame.speech:
                self.silence = 0.0
                if not self.speaking and self.server_vad:
                    self.speaking = True
                    await self._speech_started()
                self.turn_words.extend(timed.word for timed in frame.recognised)
            elif self.speaking:
                self.silence += self.listener.frame_seconds
                if self.silence >= self.server.silence_s - 1e-9:
                    self.speaking = False
                    await self._speech_stopped()

    async def _speech_started(self) -> None:
        self.turn_item = self.server.next_id("item")
        start_ms = round(self.listener.seconds * 1000)
        await self.send(
            {
                "type": "input_audio_buffer.speech_started",
                "audio_start_ms": start_ms,
                "item_id": self.turn_item,
            }
        )
        response = self.response
        if response is not None and not response.generated:
            # interrupt_response: the server cancels the response it is still generating
            self.server.interruptions.append(asyncio.get_running_loop().time())
            await self._cancel(response, "turn_detected")

    async def _speech_stopped(self) -> None:
        await self.send(
            {
                "type": "input_audio_buffer.speech_stopped",
                "audio_end_ms": round(self.listener.seconds * 1000),
                "item_id": self.turn_item,
            }
        )
        if await self._commit(self.turn_item):
            await self._create_response({}, event_id=None)

    async def _commit(self, item_id: str) -> bool:
        """Commit the input buffer as a user item; False when no whole word was heard."""
        words, self.turn_words = self.turn_words, []
        self.listener.forget_words()
        if not words:
            return False
        text = " ".join(w.text for w in words)
        self.server.finals.append((asyncio.get_running_loop().time(), text, tuple(words)))
        previous = self.items[-1]["id"] if self.items else None
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        self.items.append(item)
        await self.send(
            {
                "type": "input_audio_buffer.committed",
                "previous_item_id": previous,
                "item_id": item_id,
            }
        )
        await self.send(
            {"type": "conversation.item.added", "previous_item_id": previous, "item": item}
        )
        await self.send(
            {"type": "conversation.item.done", "previous_item_id": previous, "item": item}
        )
        self.heard[item_id] = text
        if not self.transcribe:
            return True
        item["content"] = [{"type": "input_audio", "transcript": text}]
        await self.send(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item_id,
                "content_index": 0,
                "transcript": text,
            }
        )
        return True

    async def _commit_event(self, event: dict[str, Any]) -> None:
        if self.hearing is not None:
            # what arrived before the commit belongs to it
            self.hearing.cancel()
            await self._hear()
        if not await self._commit(self.server.next_id("item")):
            await self.error(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small.",
                event.get("event_id"),
            )

    async def _clear(self, _event: dict[str, Any]) -> None:
        self.turn_words = []
        self.listener.forget_words()
        await self.send({"type": "input_audio_buffer.cleared"})

    # -- the conversation --

    def _index(self, item_id: str | None) -> int | None:
        return next((i for i, item in enumerate(self.items) if item["id"] == item_id), None)

    async def _item_create(self, event: dict[str, Any]) -> None:
        item = dict(event.get("item") or {})
        item.setdefault("id", self.server.next_id("item"))
        event_id = event.get("event_id")
        if self._index(item["id"]) is not None:
            await self.error(
                "item_create_duplicate_item_id",
                f"Item with item_id '{item['id']}' already exists.",
                event_id,
            )
            return
        previous = event.get("previous_item_id")
        if previous in (None, "root"):
            at = 0 if previous == "root" else len(self.items)
        else:
            index = self._index(previous)
            if index is None:
                await self.error(
                    "item_create_invalid_previous_item_id",
                    f"Previous item with item_id '{previous}' not found.",
                    event_id,
                )
                return
            at = index + 1
        item["object"] = "realtime.item"
        item.setdefault("status", "completed")
        self.items.insert(at, item)
        before = self.items[at - 1]["id"] if at else None
        await self.send(
            {"type": "conversation.item.added", "previous_item_id": before, "item": item}
        )
        await self.send(
            {"type": "conversation.item.done", "previous_item_id": before, "item": item}
        )

    async def _item_delete(self, event: dict[str, Any]) -> None:
        index = self._index(event.get("item_id"))
        if index is None:
            await self.error(
                "item_delete_invalid_item_id",
                f"Item with item_id '{event.get('item_id')}' not found.",
                event.get("event_id"),
            )
            return
        deleted = self.items.pop(index)
        await self.send({"type": "conversation.item.deleted", "item_id": deleted["id"]})

    async def _item_truncate(self, event: dict[str, Any]) -> None:
        item_id = str(event.get("item_id"))
        audio_end_ms = int(event.get("audio_end_ms", 0))
        self.server.truncations.append((item_id, audio_end_ms))
        index = self._index(item_id)
        if index is None:
            await self.error(
                "item_truncate_invalid_item_id",
                f"Item with item_id '{item_id}' not found.",
                event.get("event_id"),
            )
            return
        # the server deletes the transcript so that nothing unheard stays in the context
        self.items[index] = {**self.items[index], "content": []}
        await self.send(
            {
                "type": "conversation.item.truncated",
                "item_id": item_id,
                "content_index": int(event.get("content_index", 0)),
                "audio_end_ms": audio_end_ms,
            }
        )

    # -- responses --

    async def _response_create(self, event: dict[str, Any]) -> None:
        if self.response is not None:
            await self.error(
                _ACTIVE_RESPONSE,
                "Conversation already has an active response in progress: "
                f"{self.response.id}. Wait until the response is finished before creating a new "
                "one.",
                event.get("event_id"),
            )
            return
        await self._create_response(dict(event.get("response") or {}), event.get("event_id"))

    async def _response_cancel(self, event: dict[str, Any]) -> None:
        response = self.response
        wanted = event.get("response_id")
        if response is None or (wanted and wanted != response.id):
            await self.error(
                "response_cancel_not_active",
                "Cancellation failed: no active response found",
                event.get("event_id"),
            )
            return
        await self._cancel(response, "client_cancelled")

    def _reply_instructions(self, params: dict[str, Any]) -> str:
        """The response's own instructions (the plugin puts the session's before them)."""
        given = params.get("instructions")
        if not isinstance(given, str) or not given:
            return ""
        session = str(self.session.get("instructions") or "")
        if session and given.startswith(session):
            return given[len(session) :].strip("\n")
        return given

    async def _create_response(self, params: dict[str, Any], event_id: str | None) -> None:
        server = self.server
        instructions = self._reply_instructions(params)
        heard = [
            {**item, "content": [{"type": "input_audio", "transcript": self.heard[item["id"]]}]}
            if item["id"] in self.heard
            else item
            for item in self.items
        ]
        ctx = from_openai_realtime(str(self.session.get("instructions") or ""), heard)
        if instructions:
            ctx.add_message(role="system", content=instructions)
        choice = params.get("tool_choice", self.session.get("tool_choice"))
        answer = server.llm.answer(ctx, tools_allowed=choice != "none")
        rule = answer.rule
        if instructions and rule.when_instructed is None:
            quoted = quoted_line(instructions)
            if quoted is not None:
                rule = LLMRule(text=quoted, ttft=server.llm.fallback_ttft)
        metadata = dict(params.get("metadata") or {})
        response = _Response(server.next_id("resp"), metadata)
        self.response = response
        await self.send(
            {"type": "response.created", "response": self._shape(response, "in_progress")}
        )
        response.task = self.spawn(self._produce(response, rule, answer.calls, answer.hangs))

    def _shape(self, response: _Response, status: str, reason: str | None = None) -> dict[str, Any]:
        shape: dict[str, Any] = {
            "object": "realtime.response",
            "id": response.id,
            "status": status,
            "status_details": None,
            "output": response.output,
            "metadata": response.metadata or None,
            "output_modalities": ["audio"],
        }
        if reason is not None:
            shape["status_details"] = {"type": status, "reason": reason}
        if status != "in_progress":
            shape["usage"] = {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0}
        return shape

    async def _produce(
        self,
        response: _Response,
        rule: LLMRule,
        calls: tuple[ToolCallScript, ...],
        hangs: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        if hangs:
            await asyncio.Future()  # until the response is cancelled
        started = loop.time()
        await asyncio.sleep(delivery_wait("realtime", rule.ttft))
        if rule.text:
            self.server.replies += 1
            number = self.server.replies
            if self.server.faults.error_in_reply == number:
                await self.ws.close(code=1011, message=b"Internal error encountered.")
                return
            await self._speak(response, rule, drop=self.server.faults.drop_in_reply == number)
        remaining = delivery_wait("realtime", started + rule.duration - loop.time())
        if remaining > 0:
            await asyncio.sleep(remaining)
        for call in calls:
            await self._call(response, call)
        response.generated = True
        await self._done(response, "completed")

    async def _add_output(self, response: _Response, item: dict[str, Any]) -> None:
        index = len(response.output)
        response.output.append(item)
        previous = self.items[-1]["id"] if self.items else None
        self.items.append(item)
        common = {"response_id": response.id, "output_index": index}
        await self.send({"type": "response.output_item.added", **common, "item": item})
        await self.send(
            {"type": "conversation.item.added", "previous_item_id": previous, "item": item}
        )

    async def _finish_output(self, response: _Response, item: dict[str, Any], status: str) -> None:
        item["status"] = status
        index = response.output.index(item)
        common = {"response_id": response.id, "output_index": index}
        await self.send({"type": "response.output_item.done", **common, "item": item})
        await self.send({"type": "conversation.item.done", "item": item})

    async def _speak(self, response: _Response, rule: LLMRule, *, drop: bool) -> None:
        server = self.server
        text = rule.text.strip()
        item: dict[str, Any] = {
            "id": server.next_id("item"),
            "object": "realtime.item",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        response.message = item
        await self._add_output(response, item)
        part = {"response_id": response.id, "item_id": item["id"], "output_index": 0}
        await self.send(
            {
                "type": "response.content_part.added",
                **part,
                "content_index": 0,
                "part": {"type": "audio", "transcript": ""},
            }
        )
        audio = marked_reply_audio(server.new_sentence(text), server.duration_of(text))
        chunks = [audio[i : i + _CHUNK_SAMPLES] for i in range(0, len(audio), _CHUNK_SAMPLES)]
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
                await self.server.park()
                return
            delta = base64.b64encode(piece.tobytes()).decode()
            await self.send(
                {"type": "response.output_audio.delta", **part, "content_index": 0, "delta": delta}
            )
            # the transcript keeps pace with the audio
            due = -(-(index + 1) * len(words) // len(chunks))
            said = ""
            while sent_words < due:
                said += words[sent_words] if sent_words == 0 else " " + words[sent_words]
                sent_words += 1
            if said:
                response.spoken += said
                item["content"] = [{"type": "output_audio", "transcript": response.spoken}]
                await self.send(
                    {
                        "type": "response.output_audio_transcript.delta",
                        **part,
                        "content_index": 0,
                        "delta": said,
                    }
                )
        await self._end_message(response, "completed")

    async def _end_message(self, response: _Response, status: str) -> None:
        item = response.message
        if item is None or item["status"] != "in_progress":
            return
        part = {"response_id": response.id, "item_id": item["id"], "output_index": 0}
        transcript = response.spoken
        await self.send({"type": "response.output_audio.done", **part, "content_index": 0})
        await self.send(
            {
                "type": "response.output_audio_transcript.done",
                **part,
                "content_index": 0,
                "transcript": transcript,
            }
        )
        await self.send(
            {
                "type": "response.content_part.done",
                **part,
                "content_index": 0,
                "part": {"type": "audio", "transcript": transcript},
            }
        )
        await self._finish_output(response, item, status)

    async def _call(self, response: _Response, call: ToolCallScript) -> None:
        server = self.server
        arguments = json.dumps(call.arguments)
        item: dict[str, Any] = {
            "id": server.next_id("item"),
            "object": "realtime.item",
            "type": "function_call",
            "status": "in_progress",
            "call_id": server.next_id("call"),
            "name": call.name,
            "arguments": "",
        }
        await self._add_output(response, item)
        item["arguments"] = arguments
        await self.send(
            {
                "type": "response.function_call_arguments.done",
                "response_id": response.id,
                "item_id": item["id"],
                "output_index": response.output.index(item),
                "call_id": item["call_id"],
                "name": call.name,
                "arguments": arguments,
            }
        )
        await self._finish_output(response, item, "completed")

    async def _cancel(self, response: _Response, reason: str) -> None:
        """The server stops ``response`` where it is: what was spoken stays in the conversation."""
        if response.task is not None and response.task is not asyncio.current_task():
            response.task.cancel()
        response.generated = True
        await self._end_message(response, "incomplete")
        await self._done(response, "cancelled", reason)

    async def _done(self, response: _Response, status: str, reason: str | None = None) -> None:
        if self.response is not response:
            return
        self.response = None
        await self.send(
            {"type": "response.done", "response": self._shape(response, status, reason)}
        )
