"""OpenAI's chat completions (SSE) and audio transcriptions, as the openai plugin uses them.

``POST /v1/chat/completions`` with ``stream=true`` answers with the scripted LLM's reply
(:class:`~resilient_agent.testing.llm.ScriptedLLM`, chosen from the context the request carries)
as server-sent events: a role chunk, content deltas, tool calls whose ``arguments`` stream in
pieces, the finish reason, a usage chunk (``stream_options.include_usage``) and ``[DONE]``.
``GET /v1/models`` answers the plugin's prewarm. ``POST /v1/audio/transcriptions`` is the
non-streaming STT: it transcribes the lab's marked caller words in the WAV it received.
What OpenAI's docs leave open is in docs/provider-emulators.md.
"""

from __future__ import annotations

import asyncio
import io
import json
import wave
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..llm import KEEP_ALIVE_S, ScriptedAnswer, ScriptedLLM
from ..schedule import delivery_wait
from ..stt import HeardWord
from ._context import from_openai
from ._hearing import MarkedListener
from ._server import EmulatorServer

__all__ = ["OpenAIEmulator"]

# the slices a tool call's JSON arguments stream in (OpenAI sends a few tokens per delta)
_ARGUMENT_SLICE = 8
# what a transcription takes once the request is in: an assumption (docs/provider-emulators.md)
TRANSCRIBE_SECONDS = 0.15
_CREATED = 1_800_000_000


class OpenAIEmulator(EmulatorServer):
    """OpenAI's REST API on loopback: chat completions from ``llm``, transcriptions of marks.

    Attributes:
        llm: The scripted LLM whose answers are served (its ``requests`` record each one).
        finals: ``(loop time, text, words)`` of every transcription, as the scripted STT keeps
            its finals.
        completions: Chat completion requests received.
        transcribing: Each transcription request's loop times: received, answered.
    """

    provider = "openai-emulator"
    refusable = (("POST", "/v1/chat/completions"), ("POST", "/v1/audio/transcriptions"))

    def __init__(
        self,
        llm: ScriptedLLM,
        word_lookup: Callable[[int, int], str] | None = None,
    ) -> None:
        super().__init__()
        self.llm = llm
        self.word_lookup = word_lookup
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.transcribing: list[tuple[float, float]] = []
        self.model = "gpt-4o-mini-transcribe"

    def routes(self) -> list[web.RouteDef]:
        """Chat completions, models and transcriptions under ``/v1``."""
        return [
            web.post("/v1/chat/completions", self._completions),
            web.get("/v1/models", self._models),
            web.post("/v1/audio/transcriptions", self._transcriptions),
        ]

    def refusal_body(self, status: int) -> dict[str, Any]:
        """OpenAI's error object: ``rate_limit_exceeded`` (429), ``server_is_overloaded`` (503)."""
        if status == 429:
            message, kind, code = (
                "Rate limit reached for requests",
                "requests",
                "rate_limit_exceeded",
            )
        else:
            message = "The server is overloaded. Please try again later."
            kind, code = "service_unavailable_error", "server_is_overloaded"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    @property
    def longest_transcription_s(self) -> float:
        """The longest a transcription request of this call took to answer (0.0: none)."""
        return max((answered - received for received, answered in self.transcribing), default=0.0)

    @property
    def base_url(self) -> str:
        """What the OpenAI client takes as ``base_url``."""
        return f"{self.url}/v1"

    async def _models(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"object": "list", "data": [{"id": "gpt-4.1", "object": "model", "owned_by": "emu"}]}
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        ctx = from_openai(body.get("messages", []))
        answer = self.llm.answer(ctx, tools_allowed=body.get("tool_choice") != "none")
        if answer.malformed is not None:
            return web.json_response(
                {
                    "error": {
                        "message": f"Invalid parameter: messages: {answer.malformed}",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": None,
                    }
                },
                status=400,
            )
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if answer.hangs or answer.times_out:
            # headers sent, no token: the client's own read timeout decides
            await self.park()
            return response
        if answer.keeps_alive:
            await self._keep_alive(response, body.get("model", "gpt-4.1"), answer)
            return response
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        await self._stream(response, body.get("model", "gpt-4.1"), answer, include_usage, ctx)
        return response

    async def _keep_alive(
        self, response: web.StreamResponse, model: str, answer: ScriptedAnswer
    ) -> None:
        """A role-only chunk, then chunks with an empty delta, and never a token.

        Each chunk resets the client's read timeout: the stream stays alive until the client
        gives it up.
        """
        completion_id = self.next_id("chatcmpl")

        async def send(delta: dict[str, Any]) -> None:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": _CREATED,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())

        await asyncio.sleep(delivery_wait("llm", answer.rule.ttft))
        await send({"role": "assistant", "content": ""})
        while True:
            await asyncio.sleep(delivery_wait("llm", KEEP_ALIVE_S))
            await send({})

    async def _stream(
        self,
        response: web.StreamResponse,
        model: str,
        answer: ScriptedAnswer,
        include_usage: bool,
        ctx: Any,
    ) -> None:
        completion_id = self.next_id("chatcmpl")
        rule = answer.rule

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": _CREATED,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        async def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            await response.write(f"data: {data}\n\n".encode())

        await asyncio.sleep(delivery_wait("llm", rule.ttft))
        await send(chunk({"role": "assistant", "content": ""}))
        words = rule.text.split(" ") if rule.text else []
        for i, word in enumerate(words):
            await send(chunk({"content": word if i == 0 else " " + word}))
        wait = delivery_wait("llm", rule.duration - rule.ttft)
        if wait > 0:
            await asyncio.sleep(wait)
        for index, call in enumerate(answer.calls):
            arguments = json.dumps(call.arguments)
            head = {
                "index": index,
                "id": self.next_id("call"),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            await send(chunk({"tool_calls": [head]}))
            for start in range(0, len(arguments), _ARGUMENT_SLICE):
                piece = arguments[start : start + _ARGUMENT_SLICE]
                await send(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        await send(chunk({}, "tool_calls" if answer.calls else "stop"))
        if include_usage:
            prompt = sum(
                len((i.text_content or "") if i.type == "message" else "") for i in ctx.items
            )
            completion = len(words) + sum(len(json.dumps(c.arguments)) // 4 for c in answer.calls)
            usage = {
                "prompt_tokens": prompt // 4,
                "completion_tokens": completion,
                "total_tokens": prompt // 4 + completion,
            }
            await send({**chunk({}), "choices": [], "usage": usage})
        await send("[DONE]")

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        if self.word_lookup is None:
            return web.json_response({"error": {"message": "no transcription here"}}, status=404)
        received = asyncio.get_running_loop().time()
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response({"error": {"message": "file is required"}}, status=400)
        self.model = str(form.get("model", self.model))
        with wave.open(io.BytesIO(upload.file.read())) as wav:
            rate = wav.getframerate()
            pcm = wav.readframes(wav.getnframes())
        listener = MarkedListener(self.word_lookup, rate)
        words = [w.word for frame in listener.hear(pcm) for w in frame.recognised]
        await asyncio.sleep(delivery_wait("stt", TRANSCRIBE_SECONDS))
        text = " ".join(w.text for w in words)
        answered = asyncio.get_running_loop().time()
        self.transcribing.append((received, answered))
        if words:
            self.finals.append((answered, text, tuple(words)))
        payload: dict[str, Any] = {
            "text": text,
            "usage": {"type": "duration", "seconds": round(listener.seconds)},
        }
        if form.get("response_format") == "verbose_json":
            payload.update(language="english", duration=listener.seconds, segments=[])
        return web.json_response(payload)
