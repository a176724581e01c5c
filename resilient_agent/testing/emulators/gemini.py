"""Gemini's ``streamGenerateContent`` (SSE), as ``livekit-plugins-google`` (google-genai) uses it.

``POST /{version}/models/{model}:streamGenerateContent?alt=sse`` answers with the scripted LLM's
reply (:class:`~resilient_agent.testing.llm.ScriptedLLM`, chosen from the context the request
carries) as server-sent events: the text in one candidate chunk at the time to first token, then
each function call whole (Gemini never streams a call's arguments) with ``finishReason`` and
``usageMetadata``. The stream ends when the response ends (no ``[DONE]``).
What Google's docs leave open is in docs/provider-emulators.md.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from ..llm import KEEP_ALIVE_S, ScriptedAnswer, ScriptedLLM
from ..schedule import delivery_wait
from ._context import from_gemini
from ._server import EmulatorServer

__all__ = ["GeminiEmulator"]


class GeminiEmulator(EmulatorServer):
    """The Gemini API's streaming generation on loopback, answering from ``llm``.

    Attributes:
        llm: The scripted LLM whose answers are served (its ``requests`` record each one).
    """

    provider = "gemini-emulator"
    refusable = (("POST", "/"),)

    def __init__(self, llm: ScriptedLLM) -> None:
        super().__init__()
        self.llm = llm
        self.model = "gemini-2.5-flash"

    def routes(self) -> list[web.RouteDef]:
        """``/{version}/models/{model}:streamGenerateContent``."""
        return [web.post("/{version}/models/{action}", self._generate)]

    def refusal_body(self, status: int) -> dict[str, Any]:
        """Google's error object: ``RESOURCE_EXHAUSTED`` (429), ``UNAVAILABLE`` (503)."""
        if status == 429:
            return {
                "error": {
                    "code": 429,
                    "message": "Resource has been exhausted (e.g. check quota).",
                    "status": "RESOURCE_EXHAUSTED",
                }
            }
        message = "The model is overloaded. Please try again later."
        return {"error": {"code": status, "message": message, "status": "UNAVAILABLE"}}

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["action"].partition(":")
        if method != "streamGenerateContent":
            return _error(
                404, "NOT_FOUND", f"the emulator serves streamGenerateContent, not {method}"
            )
        self.model = model
        body = await request.json()
        ctx = from_gemini(body)
        mode = (
            ((body.get("toolConfig") or body.get("tool_config") or {}).get("functionCallingConfig"))
            or {}
        ).get("mode")
        answer = self.llm.answer(ctx, tools_allowed=mode != "NONE")
        if answer.malformed is not None:
            return _error(400, "INVALID_ARGUMENT", f"invalid contents: {answer.malformed}")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if answer.hangs or answer.times_out:
            await self.park()
            return response
        if answer.keeps_alive:
            await self._keep_alive(response, model, answer)
            return response
        await self._stream(response, model, answer, body)
        return response

    async def _keep_alive(
        self, response: web.StreamResponse, model: str, answer: ScriptedAnswer
    ) -> None:
        """Chunks whose only part is an empty text, and never a token, until the client leaves."""
        response_id = self.next_id("gemini-response")
        payload = {
            "candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "index": 0}],
            "modelVersion": model,
            "responseId": response_id,
        }
        await asyncio.sleep(delivery_wait("llm", answer.rule.ttft))
        while True:
            await response.write(f"data: {json.dumps(payload)}\r\n\r\n".encode())
            await asyncio.sleep(delivery_wait("llm", KEEP_ALIVE_S))

    async def _stream(
        self, response: web.StreamResponse, model: str, answer: ScriptedAnswer, body: Any
    ) -> None:
        rule = answer.rule
        response_id = self.next_id("gemini-response")
        prompt_tokens = len(json.dumps(body.get("contents", []))) // 4
        words = len(rule.text.split())

        async def send(parts: list[dict[str, Any]], finish: str | None) -> None:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            payload: dict[str, Any] = {
                "candidates": [candidate],
                "modelVersion": model,
                "responseId": response_id,
            }
            if finish is not None:
                candidate["finishReason"] = finish
                payload["usageMetadata"] = {
                    "promptTokenCount": prompt_tokens,
                    "candidatesTokenCount": words + 8 * len(answer.calls),
                    "totalTokenCount": prompt_tokens + words + 8 * len(answer.calls),
                }
            await response.write(f"data: {json.dumps(payload)}\r\n\r\n".encode())

        await asyncio.sleep(delivery_wait("llm", rule.ttft))
        if rule.text:
            await send([{"text": rule.text}], None)
        wait = delivery_wait("llm", rule.duration - rule.ttft)
        if wait > 0:
            await asyncio.sleep(wait)
        calls = [
            {"functionCall": {"id": self.next_id("call"), "name": c.name, "args": c.arguments}}
            for c in answer.calls
        ]
        await send(calls or [{"text": ""}], "STOP")


def _error(status: int, reason: str, message: str) -> web.StreamResponse:
    return web.json_response(
        {"error": {"code": status, "message": message, "status": reason}}, status=status
    )
