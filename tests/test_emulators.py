"""The wire emulators speak each provider's protocol (raw clients, no plugin)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp
import numpy as np

from resilient_agent.testing.audio import KIND_USER, AudioMarker, marker_frame_samples, read_markers
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.emulators import (
    CartesiaEmulator,
    DeepgramEmulator,
    DeepgramFaults,
    GeminiEmulator,
    OpenAIEmulator,
)
from resilient_agent.testing.llm import LLMRule, ScriptedLLM, ToolCallScript

_WORDS = {(0, 0): "book", (0, 1): "nine"}


def _speech() -> bytes:
    word = [
        marker_frame_samples(AudioMarker(KIND_USER, 0, w, i, 10)) for w in (0, 1) for i in range(10)
    ]
    silence = [np.zeros(160, np.int16)] * 30
    return np.concatenate([*silence, *word, *silence]).tobytes()


def _lookup(u: int, w: int) -> str:
    return _WORDS[(u, w)]


def test_deepgram_live_results_interims_finals_and_the_close_after_close_stream() -> None:
    async def main() -> tuple[list[dict[str, Any]], DeepgramEmulator]:
        async with DeepgramEmulator(_lookup) as server, aiohttp.ClientSession() as http:
            url = f"{server.url}/v1/listen?interim_results=true&vad_events=true&endpointing=25"
            messages = []
            async with http.ws_connect(url) as ws:
                await ws.send_str(json.dumps({"type": "KeepAlive"}))
                audio = _speech()
                for start in range(0, len(audio), 1600):
                    await ws.send_bytes(audio[start : start + 1600])
                await ws.send_str(json.dumps({"type": "Finalize"}))
                await ws.send_str(json.dumps({"type": "CloseStream"}))
                async for msg in ws:
                    messages.append(json.loads(msg.data))
            return messages, server

    messages, server = run_virtual(main())
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "SpeechStarted" and kinds[-1] == "Metadata"
    results = [m for m in messages if m["type"] == "Results"]
    assert [(r["is_final"], r["speech_final"]) for r in results[:3]] == [
        (False, False),
        (False, False),
        (True, True),
    ]
    final = results[2]["channel"]["alternatives"][0]
    assert final["transcript"] == "book nine"
    assert [(w["word"], w["start"], w["end"]) for w in final["words"]] == [
        ("book", 0.3, 0.4),
        ("nine", 0.4, 0.5),
    ]
    # the Finalize and the CloseStream are each answered with a final, empty here
    assert [r["from_finalize"] for r in results[3:]] == [True, False]
    assert [text for _, text, _ in server.finals] == ["book nine"]
    assert server.connections["/v1/listen"] == 1


def test_deepgram_refuses_a_connection_with_429() -> None:
    async def main() -> int:
        faults = DeepgramFaults(refuse_with=429)
        async with (
            DeepgramEmulator(_lookup, faults=faults) as server,
            aiohttp.ClientSession() as http,
        ):
            try:
                async with http.ws_connect(f"{server.url}/v1/listen"):
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    assert run_virtual(main()) == 429


def _sse(raw: str) -> list[str]:
    return [line[len("data: ") :] for line in raw.splitlines() if line.startswith("data: ")]


def test_openai_streams_content_then_tool_call_arguments_in_pieces_usage_and_done() -> None:
    rule = LLMRule(
        text="Let me book it.",
        tool_calls=(ToolCallScript("book_table", {"time": "eight", "people": 4}),),
    )

    async def main() -> list[str]:
        async with OpenAIEmulator(ScriptedLLM([rule])) as server, aiohttp.ClientSession() as http:
            body = {
                "model": "gpt-4.1",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "book a table"}],
            }
            async with http.post(f"{server.base_url}/chat/completions", json=body) as response:
                return _sse(await response.text())

    events = run_virtual(main())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == "Let me book it."
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"] == {"name": "book_table", "arguments": ""}
    pieces = [c["function"]["arguments"] for c in calls[1:]]
    assert len(pieces) > 1
    assert json.loads("".join(pieces)) == {"time": "eight", "people": 4}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_rejects_a_tool_output_without_its_call_with_400() -> None:
    async def main() -> int:
        async with OpenAIEmulator(ScriptedLLM()) as server, aiohttp.ClientSession() as http:
            body = {
                "model": "gpt-4.1",
                "stream": True,
                "messages": [{"role": "tool", "tool_call_id": "call_x", "content": "done"}],
            }
            async with http.post(f"{server.base_url}/chat/completions", json=body) as response:
                return response.status

    assert run_virtual(main()) == 400


def test_gemini_sends_a_function_call_whole_with_finish_reason_and_usage() -> None:
    rule = LLMRule(tool_calls=(ToolCallScript("book_table", {"time": "eight"}),))

    async def main() -> list[str]:
        async with GeminiEmulator(ScriptedLLM([rule])) as server, aiohttp.ClientSession() as http:
            body = {"contents": [{"role": "user", "parts": [{"text": "book a table"}]}]}
            url = f"{server.url}/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
            async with http.post(url, json=body) as response:
                return _sse(await response.text())

    (event,) = run_virtual(main())
    payload = json.loads(event)
    candidate = payload["candidates"][0]
    assert candidate["content"]["parts"][0]["functionCall"]["args"] == {"time": "eight"}
    assert candidate["finishReason"] == "STOP"
    assert payload["usageMetadata"]["totalTokenCount"] > 0


def test_cartesia_speaks_marked_audio_per_transcript_then_done_and_word_timestamps() -> None:
    async def main() -> tuple[list[dict[str, Any]], CartesiaEmulator]:
        async with CartesiaEmulator() as server, aiohttp.ClientSession() as http:
            messages = []
            async with http.ws_connect(f"{server.url}/tts/websocket") as ws:
                base = {
                    "context_id": "ctx1",
                    "add_timestamps": True,
                    "output_format": {
                        "container": "raw",
                        "encoding": "pcm_s16le",
                        "sample_rate": 16000,
                    },
                }
                await ws.send_str(
                    json.dumps({**base, "transcript": "Hello there. ", "continue": True})
                )
                await ws.send_str(json.dumps({**base, "transcript": "Bye now. ", "continue": True}))
                await ws.send_str(json.dumps({**base, "transcript": " ", "continue": False}))
                async for msg in ws:
                    message = json.loads(msg.data)
                    messages.append(message)
                    if message.get("done") and message.get("type") == "done":
                        break
            return messages, server

    messages, server = run_virtual(main())
    assert server.sentences == {1: "Hello there.", 2: "Bye now."}
    audio = b"".join(base64.b64decode(m["data"]) for m in messages if m.get("data"))
    sentence_ids = {m.source_id for m in read_markers(np.frombuffer(audio, dtype=np.int16))}
    assert sentence_ids == {1, 2}
    stamps = [m["word_timestamps"]["words"] for m in messages if "word_timestamps" in m]
    assert stamps == [["Hello", "there."], ["Bye", "now."]]
    assert messages[-1] == {"type": "done", "done": True, "context_id": "ctx1"}


def test_openai_keeps_the_stream_alive_with_empty_chunks_and_never_a_token() -> None:
    rule = LLMRule(text="Yes, we have free parking.", keeps_alive_before=60.0)

    async def main() -> list[str]:
        async with OpenAIEmulator(ScriptedLLM([rule])) as server, aiohttp.ClientSession() as http:
            body = {
                "model": "gpt-4.1",
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
            async with http.post(f"{server.base_url}/chat/completions", json=body) as response:
                lines: list[str] = []
                # the role chunk and then one empty chunk a second, for as long as one listens
                while len(lines) < 4:
                    line = (await response.content.readline()).decode().strip()
                    if line.startswith("data: "):
                        lines.append(line.removeprefix("data: "))
                return lines

    events = run_virtual(main())
    deltas = [json.loads(e)["choices"][0] for e in events]
    assert deltas[0]["delta"] == {"role": "assistant", "content": ""}
    assert [d["delta"] for d in deltas[1:]] == [{}, {}, {}]
    assert all(d["finish_reason"] is None for d in deltas)


def test_deepgram_socket_goes_silent_after_its_audio_and_a_new_one_answers() -> None:
    async def send_speech(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
        async with http.ws_connect(f"{url}/v1/listen?encoding=linear16&sample_rate=16000") as ws:
            await ws.send_bytes(_speech())
            await ws.send_str(json.dumps({"type": "Finalize"}))
            messages: list[dict[str, Any]] = []
            try:
                while True:
                    msg = await ws.receive(timeout=2.0)
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    messages.append(json.loads(msg.data))
            except asyncio.TimeoutError:  # not the builtin before Python 3.11
                pass
            return messages

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        faults = DeepgramFaults(silent_after_s=0.1)
        async with (
            DeepgramEmulator(_lookup, faults=faults) as server,
            aiohttp.ClientSession() as http,
        ):
            first = await send_speech(http, server.url)
            second = await send_speech(http, server.url)
            return first, second, server.silenced

    first, second, silenced = run_virtual(main())
    # open, audio taken, nothing answered (not even the Finalize); the next socket answers
    assert first == []
    assert silenced == 1
    assert any(m.get("is_final") and "book nine" in json.dumps(m) for m in second)
