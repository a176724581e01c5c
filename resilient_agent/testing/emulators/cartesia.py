"""Cartesia's TTS websocket (``/tts/websocket``) and ``/tts/bytes``, as the plugin uses them.

``livekit-plugins-cartesia`` speaks to them. On the websocket each message carries a
``context_id`` and a ``transcript``; ``continue: true`` says more text follows,
``continue: false`` closes the context. The emulator synthesizes each transcript it receives as
the lab's marked audio (every 10 ms says which sentence it is, see
:func:`~resilient_agent.testing.tts.marked_sentence_audio`), sends it as base64 ``data``
messages with ``word_timestamps``, and ``done`` once a closed context has all its audio out. A
context the client abandons goes on being synthesized, as the protocol allows (the plugin sends
no cancel); ``cancel: true`` stops one; ``flush: true`` is answered with ``flush_done``.
What Cartesia's docs leave open is in docs/provider-emulators.md.

Wire faults: ``error_on_sentence`` (the n-th sentence, 1-based, is answered with an error
message instead of audio).
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from ..audio import SAMPLE_RATE
from ..schedule import delivery_wait
from ..tts import marked_sentence_audio, spoken_seconds
from ._server import EmulatorServer

__all__ = ["CartesiaEmulator"]

# audio goes out in 100 ms messages: whole lab frames, so each keeps its marks
_CHUNK_FRAMES = 10  # 100 ms of audio per chunk message


@dataclass
class _Context:
    id: str
    queue: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


class CartesiaEmulator(EmulatorServer):
    """Cartesia TTS on loopback, speaking the lab's marked audio.

    Attributes:
        sentences: Sentence id to text, for every transcript synthesized (as
            :class:`~resilient_agent.testing.tts.ScriptedTTS` keeps them).
        synthesized_at: Sentence id to the loop time its transcript arrived.
        abandoned: Contexts still synthesizing when their socket closed.
    """

    provider = "cartesia-emulator"
    refusable = (("GET", "/tts/websocket"), ("POST", "/tts/bytes"))

    def __init__(
        self,
        *,
        seconds_per_char: float = 1 / 15,
        min_seconds: float = 0.3,
        ttfb: float = 0.15,
        error_on_sentence: int | None = None,
    ) -> None:
        super().__init__()
        self.seconds_per_char = seconds_per_char
        self.min_seconds = min_seconds
        self.ttfb = ttfb
        self.error_on_sentence = error_on_sentence
        self.sentences: dict[int, str] = {}
        self.synthesized_at: dict[int, float] = {}
        self.abandoned = 0
        self.model = "sonic-3"

    def routes(self) -> list[web.RouteDef]:
        """The websocket and the bytes endpoint."""
        return [web.get("/tts/websocket", self._websocket), web.post("/tts/bytes", self._bytes)]

    def refusal_body(self, status: int) -> dict[str, Any]:
        """Cartesia's HTTP error object (``concurrency_limited`` for 429)."""
        if status == 429:
            code, title = "concurrency_limited", "Too many concurrent requests"
            message = "You have exceeded your plan's concurrency limit."
        else:
            code, title = None, "Service unavailable"
            message = "The service is temporarily unavailable. Please try again later."
        request_id = self.next_id("cartesia-request")
        return {"error_code": code, "title": title, "message": message, "request_id": request_id}

    def duration_of(self, text: str) -> float:
        """How long the audio for ``text`` lasts (the scripted TTS's rule)."""
        return spoken_seconds(
            text, seconds_per_char=self.seconds_per_char, min_seconds=self.min_seconds
        )

    def _sentence(self, text: str) -> int:
        sentence_id = len(self.sentences) + 1
        self.sentences[sentence_id] = text.strip()
        self.synthesized_at[sentence_id] = asyncio.get_running_loop().time()
        return sentence_id

    async def _bytes(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bad = _unsupported_format(body)
        if bad is not None:
            return web.json_response({"error": bad}, status=400)
        self.model = body.get("model_id", self.model)
        text = body.get("transcript", "")
        sentence_id = self._sentence(text)
        await asyncio.sleep(delivery_wait("tts", self.ttfb))
        audio = marked_sentence_audio(sentence_id, self.duration_of(text), _rate(body))
        return web.Response(body=audio.tobytes(), content_type="application/octet-stream")

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        contexts: dict[str, _Context] = {}
        lock = asyncio.Lock()
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            packet = json.loads(msg.data)
            context_id = packet.get("context_id", "")
            if packet.get("cancel"):
                cancelled = contexts.pop(context_id, None)
                if cancelled is not None and cancelled.task is not None:
                    cancelled.task.cancel()
                continue
            bad = _unsupported_format(packet)
            if bad is not None:
                await _send(ws, lock, {"type": "error", "context_id": context_id, "error": bad})
                continue
            self.model = packet.get("model_id", self.model)
            context = contexts.get(context_id)
            if context is None:
                context = contexts[context_id] = _Context(context_id)
                context.task = asyncio.get_running_loop().create_task(
                    self._speak(
                        ws, lock, context, bool(packet.get("add_timestamps")), _rate(packet)
                    )
                )
            transcript = packet.get("transcript", "")
            if transcript.strip():
                context.queue.put_nowait(transcript)
            if packet.get("flush"):
                context.queue.put_nowait("")
            if not packet.get("continue", False):
                context.queue.put_nowait(None)
        for context in contexts.values():
            if context.task is not None and not context.task.done():
                self.abandoned += 1
                context.task.cancel()
        return ws

    async def _speak(
        self,
        ws: web.WebSocketResponse,
        lock: asyncio.Lock,
        context: _Context,
        timestamps: bool,
        sample_rate: int,
    ) -> None:
        """Synthesize a context's transcripts in order, then say it is done."""
        while True:
            transcript = await context.queue.get()
            if transcript is None:
                await _send(ws, lock, {"type": "done", "done": True, "context_id": context.id})
                return
            if transcript == "":
                await _send(ws, lock, {"type": "flush_done", "context_id": context.id})
                continue
            sentence_id = self._sentence(transcript)
            await asyncio.sleep(delivery_wait("tts", self.ttfb))
            if sentence_id == self.error_on_sentence:
                await _send(
                    ws,
                    lock,
                    {
                        "type": "error",
                        "context_id": context.id,
                        "status_code": 500,
                        "error": "emulated synthesis failure",
                        "done": True,
                    },
                )
                return
            seconds = self.duration_of(transcript)
            audio = marked_sentence_audio(sentence_id, seconds, sample_rate)
            chunk = _CHUNK_FRAMES * sample_rate // 100
            for start in range(0, len(audio), chunk):
                piece = audio[start : start + chunk].tobytes()
                message = {
                    "type": "chunk",
                    "context_id": context.id,
                    "data": base64.b64encode(piece).decode(),
                    "done": False,
                }
                await _send(ws, lock, message)
            if timestamps:
                await _send(ws, lock, _word_timestamps(context.id, transcript, seconds))


def _word_timestamps(context_id: str, transcript: str, seconds: float) -> dict[str, Any]:
    """Each word's share of the sentence's time, in proportion to its characters."""
    words = transcript.split()
    total = sum(len(w) for w in words) or 1
    starts, ends, at = [], [], 0.0
    for word in words:
        starts.append(round(at, 3))
        at += seconds * len(word) / total
        ends.append(round(at, 3))
    return {
        "type": "timestamps",
        "context_id": context_id,
        "word_timestamps": {"words": words, "start": starts, "end": ends},
        "done": False,
    }


def _rate(packet: dict[str, Any]) -> int:
    return int((packet.get("output_format") or {}).get("sample_rate", SAMPLE_RATE))


def _unsupported_format(packet: dict[str, Any]) -> str | None:
    output = packet.get("output_format") or {}
    rate = _rate(packet)
    # the marks need whole 10 ms frames of at least their header's samples
    if output.get("encoding", "pcm_s16le") != "pcm_s16le" or rate % 100 or rate < 8_000:
        return (
            "the emulator speaks pcm_s16le at a multiple of 100 Hz from 8000 Hz (its marked "
            f"audio), got {output.get('encoding')} at {rate} Hz"
        )
    return None


async def _send(ws: web.WebSocketResponse, lock: asyncio.Lock, message: dict[str, Any]) -> None:
    if ws.closed:
        return
    async with lock:
        await ws.send_str(json.dumps(message))
