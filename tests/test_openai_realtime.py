"""livekit's real OpenAI Realtime model against the local emulator (``--stack openai-realtime``).

A few representative calls, a second or two each, and the wire itself from a bare websocket:
the realtime family on the stack is ``resilient-agent lab --stack openai-realtime``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import shlex
from typing import Any

import aiohttp
import numpy as np
import pytest
from livekit import rtc
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.stacks import stack_variants
from resilient_agent.testing import Scenario, run_scenario
from resilient_agent.testing.audio import KIND_USER, AudioMarker, marker_frame_samples, read_markers
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.emulators import OpenAIRealtimeEmulator, ScheduledUtterance
from resilient_agent.testing.emulators._energy import EnergyListener
from resilient_agent.testing.llm import LLMRule, ScriptedLLM, ToolCallScript
from resilient_agent.testing.scenario import ProviderFaults

pytest.importorskip("livekit.plugins.openai", exc_type=ImportError)

STACK = "openai-realtime"
_WORDS = ("please", "book", "a", "table", "tonight")


def _scenario(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def _spoken(words: int, *, silent_words: tuple[int, ...] = ()) -> np.ndarray:
    """The lab's marked caller audio at 16 kHz: 10 frames a word, some words left silent."""
    frames = [
        np.zeros(160, np.int16)
        if w in silent_words
        else marker_frame_samples(AudioMarker(KIND_USER, 0, w, i, 10))
        for w in range(words)
        for i in range(10)
    ]
    return np.concatenate(frames)


def _as_the_plugin_sends(samples: np.ndarray) -> bytes:
    """16 kHz to 24 kHz with livekit's resampler, as the plugin does before it sends."""
    resampler = rtc.AudioResampler(input_rate=16_000, output_rate=24_000, num_channels=1)
    frame = rtc.AudioFrame(samples.tobytes(), 16_000, 1, len(samples))
    out = [*resampler.push(frame), *resampler.flush()]
    return b"".join(bytes(f.data) for f in out)


def _heard(pcm: bytes, utterance: ScheduledUtterance, received_at: float) -> list[str]:
    listener = EnergyListener([utterance], lambda: received_at)
    listener.receive(pcm)
    return [t.word.text for frame in listener.hear() for t in frame.recognised]


def test_resampling_erases_the_word_marks_and_the_words_are_named_by_their_place() -> None:
    pcm = _as_the_plugin_sends(_spoken(len(_WORDS)))
    resampled = np.frombuffer(pcm, np.int16)
    marks = [m for i in range(0, len(resampled), 240) for m in read_markers(resampled[i : i + 240])]
    assert marks == []  # what the Gemini emulator reads is gone
    utterance = ScheduledUtterance(0, 2.0, 2.5, _WORDS)
    # all of it arrived at 2.5 s of the call: its audio began at 2.0 s on the line
    assert _heard(pcm, utterance, received_at=2.5) == list(_WORDS)
    # audio sent as silence is not heard: only the words that reached the server
    gaps = _as_the_plugin_sends(_spoken(len(_WORDS), silent_words=(1, 2)))
    assert _heard(gaps, utterance, received_at=2.5) == ["please", "table", "tonight"]


def test_a_race_free_booking_is_the_same_call_on_both_agents_over_the_wire() -> None:
    runs = {}
    for agent in (Agent, ResilientAgent, ResilientAgent):
        world, outcome = run_scenario(
            _scenario("control/realtime_openai_booking"), agent, stack=STACK
        )
        assert outcome.passed, (agent.__name__, outcome.reasons)
        emulator = world.stt
        assert isinstance(emulator, OpenAIRealtimeEmulator)
        assert [text for _, text, _ in emulator.finals] == ["please book a table for eight"]
        assert emulator.sentences == {
            1: "Let me book that table for you, one moment please.",
            2: "Your table is booked.",
        }
        # the tool's output went back as an item, and livekit asked for the tool reply
        assert emulator.received["conversation.item.create"] >= 1
        assert emulator.received["response.create"] == 1
        assert emulator.sent["response.function_call_arguments.done"] == 1
        assert world.connections == {"openai-realtime-emulator ws /v1/realtime": 1}
        assert world.race_events == []
        run = [(round(r.at, 3), r.reply) for r in world.llm.requests]
        finals = [(round(at, 3), text) for at, text, _ in emulator.finals]
        runs.setdefault(agent, []).append((run, finals, dict(emulator.sent)))
    # the same on both agents, and the same call again
    assert runs[Agent][0][:2] == runs[ResilientAgent][0][:2]
    assert runs[ResilientAgent][0] == runs[ResilientAgent][1]


def test_words_over_a_protected_tool_reach_the_model_on_resilient_agent_only() -> None:
    scenario = _scenario("realtime/openai/words_over_protected_tool")
    plain, plain_outcome = run_scenario(scenario, Agent, stack=STACK)
    world, outcome = run_scenario(scenario, ResilientAgent, stack=STACK)
    changed = "actually make it nine instead"
    # livekit sent silence in their place: the server never heard them
    assert not plain_outcome.passed
    assert changed not in [text for _, text, _ in plain.stt.finals]
    assert outcome.passed, outcome.reasons
    assert changed in [text for _, text, _ in world.stt.finals]
    assert "Nine it is, I changed the booking." in world.stt.sentences.values()


@pytest.mark.parametrize(
    "faults",
    [ProviderFaults(realtime_drop_in_reply=1), ProviderFaults(realtime_error_in_reply=1)],
    ids=["dropped_mid_reply", "closed_1011"],
)
def test_a_lost_socket_reconnects_and_the_next_turn_is_heard_on_the_new_one(
    faults: ProviderFaults,
) -> None:
    scenario = dataclasses.replace(
        _scenario("realtime/openai/words_over_protected_tool"), provider_faults=faults
    )
    world, _ = run_scenario(scenario, ResilientAgent, stack=STACK)
    assert world.connections == {"openai-realtime-emulator ws /v1/realtime": 2}
    first, second = world.stt.sockets
    assert first.closed_at is not None and second.opened_at >= first.closed_at
    # the new socket's audio is placed on the line from where it began
    assert world.stt.line_offsets[1] == pytest.approx(second.opened_at - world.t0, abs=0.15)
    assert "actually make it nine instead" in [text for _, text, _ in world.stt.finals]
    assert "Nine it is, I changed the booking." in world.stt.sentences.values()


def test_the_stack_plays_the_openai_realtime_calls_only() -> None:
    runnable, left_out = stack_variants(scenarios(), STACK)
    assert runnable and all(s.model == "realtime_openai" for s in runnable)
    assert "realtime/openai/reply_never_comes" in {s.name for s in runnable}
    assert any("realtime_openai" in o.why for o in left_out)


def test_an_app_agents_own_model_is_redirected_not_replaced() -> None:
    from livekit.plugins import openai

    def own_model_agent(base: type[Agent]) -> Agent:
        class OwnModel(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                # the app's own instance, key and voice: redirected to the emulator, kept
                own = openai.realtime.RealtimeModel(api_key="app-key", voice="cedar")
                super().__init__(instructions="Be brief.", llm=own)

        return OwnModel()

    scenario = dataclasses.replace(
        _scenario("control/realtime_openai_booking"), agent=own_model_agent
    )
    world, _ = run_scenario(scenario, Agent, stack=STACK)
    voices = {u["audio"]["output"]["voice"] for u in world.stt.session_updates if "audio" in u}
    assert voices == {"cedar"}
    assert [text for _, text, _ in world.stt.finals] == ["please book a table for eight"]


async def _say(ws: aiohttp.ClientWebSocketResponse, seconds: float, *, loud: bool) -> None:
    """Send ``seconds`` of 24 kHz audio in real time, 100 ms a message, as the plugin does."""
    n = 2_400
    tone = (np.sin(np.arange(n) * 2 * np.pi * 220 / 24_000) * 3_000).astype(np.int16)
    chunk = base64.b64encode((tone if loud else np.zeros(n, np.int16)).tobytes()).decode()
    for _ in range(round(seconds / 0.1)):
        await asyncio.sleep(0.1)
        await ws.send_json({"type": "input_audio_buffer.append", "audio": chunk})


def test_the_wire_barge_in_one_response_at_a_time_cancel_and_truncate() -> None:
    rules = [
        LLMRule(text="Sure, your table is booked for tonight.", duration=2.0, ttft=0.3),
        LLMRule(
            tool_calls=(ToolCallScript("change_booking", {"time": "nine"}),),
            when_user_says="nine",
        ),
    ]
    llm = ScriptedLLM(rules)
    utterances = [
        ScheduledUtterance(0, 0.0, 0.5, ("book", "tonight")),
        ScheduledUtterance(1, 0.5, 0.7, ("wait",)),
    ]

    async def until(ws: aiohttp.ClientWebSocketResponse, kind: str) -> list[dict[str, Any]]:
        seen = []
        while True:
            event = await ws.receive_json()
            seen.append(event)
            if event["type"] == kind:
                return seen

    def kinds(events: list[dict[str, Any]]) -> list[str]:
        return [e["type"] for e in events if e["type"] != "response.output_audio.delta"]

    async def main() -> tuple[list[str], ...]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with (
            OpenAIRealtimeEmulator(llm, utterances, lambda: loop.time() - t0) as emulator,
            aiohttp.ClientSession() as http,
        ):
            url = emulator.base_url.replace("http", "ws") + "/realtime?model=gpt-realtime"
            async with http.ws_connect(url) as ws:
                await ws.send_json({"type": "session.update", "session": {"instructions": "Hi."}})
                await until(ws, "session.updated")
                await _say(ws, 0.5, loud=True)
                await _say(ws, 0.6, loud=False)
                answered = await until(ws, "response.output_audio_transcript.delta")
                item_id = answered[-1]["item_id"]
                await ws.send_json({"type": "response.create", "event_id": "ask-1"})
                busy = await until(ws, "error")
                # the caller speaks while the response is still generated: the server cancels it
                await _say(ws, 0.2, loud=True)
                barged = await until(ws, "response.done")
                await ws.send_json({"type": "response.cancel"})
                nothing = await until(ws, "error")
                await ws.send_json(
                    {
                        "type": "conversation.item.truncate",
                        "item_id": item_id,
                        "content_index": 0,
                        "audio_end_ms": 300,
                    }
                )
                truncated = await until(ws, "conversation.item.truncated")
            return (
                kinds(answered),
                [busy[-1]["error"]["code"], busy[-1]["error"]["event_id"]],
                [*kinds(barged), barged[-1]["response"]["status"]],
                [nothing[-1]["error"]["message"]],
                [str(truncated[-1]["audio_end_ms"]), str(emulator.truncations)],
            )

    answered, busy, barged, nothing, truncated = run_virtual(main())
    assert answered == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_audio_transcript.delta",
    ]
    assert busy == ["conversation_already_has_active_response", "ask-1"]
    assert barged[0] == "input_audio_buffer.speech_started"
    assert barged[-3:] == ["conversation.item.done", "response.done", "cancelled"]
    assert nothing == ["Cancellation failed: no active response found"]
    assert truncated[0] == "300" and "300" in truncated[1]
    assert llm.requests[0].user_texts == ("book tonight",)


DOCUMENTED = "resilient-agent lab --quiet --stack openai-realtime"


def test_the_documented_run_the_realtime_races_on_the_real_plugin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    program, *arguments = shlex.split(DOCUMENTED)
    assert program == "resilient-agent"
    assert main(arguments) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.startswith(("realtime/", "control/realtime_"))
    }
    runnable, _ = stack_variants(scenarios(), STACK)
    assert set(rows) == {s.name for s in runnable}
    for scenario in runnable:
        on_agent, _, on_resilient, *_ = rows[scenario.name]
        assert on_agent == ("pass" if scenario.control else "FAIL"), scenario.name
        assert on_resilient == "pass", scenario.name
    assert "Agent (livekit.agents:Agent, reference): 4 passed, 7 failed" in out
    assert "ResilientAgent (resilient_agent:ResilientAgent, under test): 11 passed, 0 failed" in out


def test_with_turn_detection_off_the_client_commits_the_turn_untranscribed() -> None:
    llm = ScriptedLLM([LLMRule(text="Booked.")])
    utterances = [ScheduledUtterance(0, 0.0, 0.4, ("book", "it"))]

    async def main() -> tuple[list[str], list[str], list[str]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with (
            OpenAIRealtimeEmulator(llm, utterances, lambda: loop.time() - t0) as emulator,
            aiohttp.ClientSession() as http,
        ):
            url = emulator.base_url.replace("http", "ws") + "/realtime?model=gpt-realtime"
            async with http.ws_connect(url) as ws:
                off = {"audio": {"input": {"turn_detection": None, "transcription": None}}}
                await ws.send_json({"type": "session.update", "session": off})
                await ws.receive_json()
                await ws.send_json({"type": "input_audio_buffer.commit", "event_id": "c-1"})
                empty = await ws.receive_json()
                await _say(ws, 0.4, loud=True)
                await _say(ws, 0.6, loud=False)  # no VAD: silence ends nothing
                await ws.send_json({"type": "input_audio_buffer.commit"})
                committed = [(await ws.receive_json())["type"] for _ in range(3)]
                await ws.send_json({"type": "response.create"})
                answered = [(await ws.receive_json())["type"] for _ in range(2)]
            return [empty["error"]["code"], empty["error"]["event_id"]], committed, answered

    empty, committed, answered = run_virtual(main())
    assert empty == ["input_audio_buffer_commit_empty", "c-1"]
    assert committed == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
    ]  # no transcription asked for: none sent, and the model still heard the words
    assert answered == ["response.created", "response.output_item.added"]
    assert llm.requests[0].user_texts == ("book it",)


def test_the_stack_takes_an_openai_realtime_model_only_and_not_azure() -> None:
    from livekit.plugins import google, openai

    from resilient_agent.testing.redirect import NotRedirectable, check_redirects

    own = openai.realtime.RealtimeModel(api_key="app-key")
    assert check_redirects(Agent(instructions="t", llm=own), STACK, "App") == [
        "openai.RealtimeModel(model='gpt-realtime')"
    ]
    gemini = google.realtime.RealtimeModel(api_key="app-key")
    with pytest.raises(NotRedirectable, match=r"emulates only openai\.realtime\.RealtimeModel"):
        check_redirects(Agent(instructions="t", llm=gemini), STACK, "App")
    azure = openai.realtime.RealtimeModel.with_azure(
        azure_deployment="d", azure_endpoint="https://x.openai.azure.com", api_key="k"
    )
    with pytest.raises(NotRedirectable, match="an Azure realtime model has no emulator"):
        check_redirects(Agent(instructions="t", llm=azure), STACK, "App")
