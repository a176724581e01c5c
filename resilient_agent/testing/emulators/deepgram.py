"""Deepgram's live STT v1 websocket (``/v1/listen``), as ``livekit-plugins-deepgram`` uses it.

Settings come in the query string (``encoding=linear16``, ``sample_rate``, ``interim_results``,
``vad_events``, ``endpointing``, ``utterance_end_ms``); the client sends binary PCM16 and the
text messages ``KeepAlive``, ``Finalize`` and ``CloseStream``. The emulator answers with
``SpeechStarted``, ``Results`` (``is_final``, ``speech_final``, words with their times on the
connection's audio clock), ``UtteranceEnd`` and ``Metadata``, and closes after ``CloseStream``.
It transcribes the lab's marked caller words it decodes from the PCM it received
(:mod:`._hearing`); what Deepgram's docs leave open is in docs/provider-emulators.md.

Wire faults: ``half_open`` (the socket opens and takes audio but never answers),
``refuse_with`` (an HTTP status for the upgrade, e.g. 429), ``drop_after_s`` (the server closes
the socket once that much audio arrived on it, once per emulator), ``silent_after_s`` (the socket
stays open, takes audio and answers nothing once that much audio arrived on it, once per
emulator: a socket that went half-open mid-call).
"""

from __future__ import annotations

import asyncio
import io
import json
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from ..schedule import delivery_wait
from ..stt import HeardWord
from ._hearing import MarkedListener, TimedWord
from ._server import EmulatorServer

__all__ = ["DeepgramEmulator", "DeepgramFaults"]

_MODEL_UUID = "00000000-0000-4000-8000-00000000d9a0"
# what a pre-recorded request takes once the audio is in: an assumption
# (docs/provider-emulators.md)
PRERECORDED_SECONDS = 0.15


@dataclass(frozen=True)
class DeepgramFaults:
    """How the emulated Deepgram misbehaves at the wire.

    Attributes:
        half_open: Every socket opens and takes audio but never answers.
        refuse_with: Connections are refused with this HTTP status (429, 503, ...).
        refusals: How many connections are refused before they are accepted (None: all).
        drop_after_s: The server closes the first socket on which this much audio arrived.
        silent_after_s: The first socket on which this much audio arrived stays open, takes
            audio and never answers again (no result, no error); later sockets answer.
    """

    half_open: bool = False
    refuse_with: int | None = None
    refusals: int | None = None
    drop_after_s: float | None = None
    silent_after_s: float | None = None


@dataclass
class _LiveOptions:
    interim_results: bool
    vad_events: bool
    endpointing_s: float | None
    utterance_end_s: float | None
    sample_rate: int
    model: str

    @classmethod
    def from_query(cls, query: Any) -> _LiveOptions:
        def flag(name: str, default: bool) -> bool:
            value = query.get(name)
            return default if value is None else value.lower() == "true"

        endpointing = query.get("endpointing", "10")
        return cls(
            interim_results=flag("interim_results", False),
            vad_events=flag("vad_events", False),
            # Deepgram's default endpointing is 10 ms; "false" turns it off
            endpointing_s=None if endpointing.lower() == "false" else int(endpointing) / 1000,
            utterance_end_s=(
                int(query["utterance_end_ms"]) / 1000 if "utterance_end_ms" in query else None
            ),
            sample_rate=int(query.get("sample_rate", "16000")),
            model=query.get("model", "nova-3"),
        )


class DeepgramEmulator(EmulatorServer):
    """Deepgram live STT v1 on loopback; ``word_lookup(utterance, word)`` gives each word's text.

    Attributes:
        finals: ``(loop time, text, words)`` of every final result sent, as
            :class:`~resilient_agent.testing.stt.ScriptedSTT` keeps them.
        faults: The wire faults in force.
        drops: Sockets the server dropped (``faults.drop_after_s``).
        silenced: Sockets that stopped answering (``faults.silent_after_s``).
    """

    provider = "deepgram-emulator"
    # the live socket's upgrade: a pre-recorded request (POST) is served
    refusable = (("GET", "/v1/listen"),)

    def __init__(
        self,
        word_lookup: Callable[[int, int], str],
        *,
        faults: DeepgramFaults | None = None,
    ) -> None:
        super().__init__()
        self.word_lookup = word_lookup
        self.faults = faults or DeepgramFaults()
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.drops = 0
        self.silenced = 0
        self.model = "nova-3"

    def refusal_body(self, status: int) -> dict[str, Any]:
        """Deepgram's error object (``TOO_MANY_REQUESTS`` for 429)."""
        code = "TOO_MANY_REQUESTS" if status == 429 else "SERVICE_UNAVAILABLE"
        message = "Too many requests. Please try again later" if status == 429 else "Unavailable"
        return {"err_code": code, "err_msg": message, "request_id": self.next_id("dg-request")}

    def routes(self) -> list[web.RouteDef]:
        """``/v1/listen``: the live STT websocket (GET) and pre-recorded audio (POST)."""
        return [web.get("/v1/listen", self._listen), web.post("/v1/listen", self._prerecorded)]

    async def _prerecorded(self, request: web.Request) -> web.StreamResponse:
        """A WAV file transcribed whole, as ``STT.recognize()`` sends it."""
        with wave.open(io.BytesIO(await request.read())) as wav:
            listener = MarkedListener(self.word_lookup, wav.getframerate())
            pcm = wav.readframes(wav.getnframes())
        words = [w for frame in listener.hear(pcm) for w in frame.recognised]
        await asyncio.sleep(delivery_wait("stt", PRERECORDED_SECONDS))
        text = " ".join(w.word.text for w in words)
        if words:
            loop_time = asyncio.get_running_loop().time()
            self.finals.append((loop_time, text, tuple(w.word for w in words)))
        request_id = self.next_id("dg-request")
        return web.json_response(
            {
                "metadata": {
                    "request_id": request_id,
                    "duration": round(listener.seconds, 3),
                    "channels": 1,
                    "models": [_MODEL_UUID],
                },
                "results": {
                    "channels": [
                        {
                            "alternatives": [
                                {
                                    "transcript": text,
                                    "confidence": 1.0 if words else 0.0,
                                    "words": [_word(w) for w in words],
                                }
                            ]
                        }
                    ]
                },
            }
        )

    async def _listen(self, request: web.Request) -> web.StreamResponse:
        faults = self.faults
        refused = self.connections[request.path] - 1
        if faults.refuse_with is not None and (
            faults.refusals is None or refused < faults.refusals
        ):
            return web.json_response(
                {"err_code": "TOO_MANY_REQUESTS", "err_msg": "emulated refusal"},
                status=faults.refuse_with,
            )
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        options = _LiveOptions.from_query(request.query)
        self.model = options.model
        live = _LiveConnection(self, ws, options, self.next_id("dg-request"))
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                if not faults.half_open and not live.silent:
                    await live.audio(msg.data)
                    if live.dropped:
                        break
            elif msg.type == WSMsgType.TEXT:
                kind = json.loads(msg.data).get("type")
                if faults.half_open or live.silent or kind == "KeepAlive":
                    continue
                if kind == "Finalize":
                    await live.finalize(from_finalize=True)
                elif kind == "CloseStream":
                    await live.finalize(from_finalize=False)
                    await live.send(live.metadata())
                    break
            else:
                break
        await ws.close()
        return ws


@dataclass
class _LiveConnection:
    """One live socket: its audio clock, its pending words and its endpointing."""

    server: DeepgramEmulator
    ws: web.WebSocketResponse
    options: _LiveOptions
    request_id: str
    listener: MarkedListener = field(init=False)
    pending: list[TimedWord] = field(default_factory=list)
    speaking: bool = False
    silence_s: float = 0.0
    utterance_open: bool = False
    dropped: bool = False
    silent: bool = False

    def __post_init__(self) -> None:
        self.listener = MarkedListener(self.server.word_lookup, self.options.sample_rate)

    async def send(self, message: dict[str, Any]) -> None:
        wait = delivery_wait("stt", 0.0)
        if wait > 0:
            await asyncio.sleep(wait)
        if not self.ws.closed:
            await self.ws.send_str(json.dumps(message))

    async def audio(self, data: bytes) -> None:
        options = self.options
        drop_after = self.server.faults.drop_after_s
        silent_after = self.server.faults.silent_after_s
        for frame in self.listener.hear(data):
            if silent_after is not None and self.server.silenced == 0 and frame.end >= silent_after:
                self.server.silenced += 1
                self.silent = True
                return
            if drop_after is not None and self.server.drops == 0 and frame.end >= drop_after:
                self.server.drops += 1
                self.dropped = True
                return
            if frame.speech:
                self.silence_s = 0.0
                if not self.speaking:
                    self.speaking = True
                    if options.vad_events:
                        await self.send(
                            {"type": "SpeechStarted", "channel": [0], "timestamp": frame.end - 0.01}
                        )
            else:
                self.silence_s += self.listener.frame_seconds
            if frame.recognised:
                self.pending.extend(frame.recognised)
                self.utterance_open = True
                if options.interim_results:
                    await self.send(self.results(is_final=False, speech_final=False))
            endpoint = options.endpointing_s
            if (
                self.pending
                and not frame.speech
                and endpoint is not None
                and self.silence_s >= endpoint - 1e-9
            ):
                await self.send(self.results(is_final=True, speech_final=True))
                self.speaking = False
            utterance_end = options.utterance_end_s
            if (
                self.utterance_open
                and not self.pending
                and utterance_end is not None
                and self.silence_s >= utterance_end - 1e-9
            ):
                self.utterance_open = False
                self.speaking = False
                await self.send(
                    {
                        "type": "UtteranceEnd",
                        "channel": [0, 1],
                        "last_word_end": round(frame.end - self.silence_s, 3),
                    }
                )

    async def finalize(self, *, from_finalize: bool) -> None:
        # a Finalize is answered with a final result (empty when nothing is pending)
        await self.send(
            self.results(is_final=True, speech_final=False, from_finalize=from_finalize)
        )

    def results(
        self, *, is_final: bool, speech_final: bool, from_finalize: bool = False
    ) -> dict[str, Any]:
        words = list(self.pending)
        text = " ".join(w.word.text for w in words)
        start = words[0].start if words else self.listener.seconds
        end = words[-1].end if words else self.listener.seconds
        if is_final:
            self.pending = []
            if words:
                loop_time = asyncio.get_running_loop().time()
                self.server.finals.append((loop_time, text, tuple(w.word for w in words)))
        return {
            "type": "Results",
            "channel_index": [0, 1],
            "duration": round(end - start, 3),
            "start": start,
            "is_final": is_final,
            "speech_final": speech_final,
            "from_finalize": from_finalize,
            "channel": {
                "alternatives": [
                    {
                        "transcript": text,
                        "confidence": 1.0 if words else 0.0,
                        "words": [_word(w) for w in words],
                    }
                ]
            },
            "metadata": {
                "request_id": self.request_id,
                "model_info": {"name": self.options.model, "version": "emulated", "arch": "-"},
                "model_uuid": _MODEL_UUID,
            },
        }

    def metadata(self) -> dict[str, Any]:
        return {
            "type": "Metadata",
            "transaction_key": "deprecated",
            "request_id": self.request_id,
            "sha256": "",
            "created": "1970-01-01T00:00:00.000Z",
            "duration": round(self.listener.seconds, 3),
            "channels": 1,
            "models": [_MODEL_UUID],
        }


def _word(timed: TimedWord) -> dict[str, Any]:
    text = timed.word.text
    return {
        "word": text.strip(".,!?;:").lower(),
        "start": timed.start,
        "end": timed.end,
        "confidence": 1.0,
        "punctuated_word": text,
    }
