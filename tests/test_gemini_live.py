"""livekit's real Gemini Live model against the local emulator (``lab --stack gemini-live``).

A few representative calls, a second or two each: the realtime family on the stack is
``resilient-agent lab --stack gemini-live``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shlex
import ssl

import aiohttp
import numpy as np
import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.catalog.realtime import (
    realtime_controls,
    reply_cut_by_server_error,
    reply_never_comes,
)
from resilient_agent.lab.cli import main
from resilient_agent.lab.stacks import stack_variants
from resilient_agent.testing import Scenario, heard_sentences, run_scenario
from resilient_agent.testing.audio import KIND_USER, AudioMarker, marker_frame_samples
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.emulators import GeminiLiveEmulator
from resilient_agent.testing.llm import LLMRule, ScriptedLLM, ToolCallScript
from resilient_agent.testing.scenario import ProviderFaults

pytest.importorskip("livekit.plugins.google", exc_type=ImportError)

STACK = "gemini-live"
DEPOT = "Your parcel is at the depot and arrives tomorrow morning."
_LIVE_PATH = "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"


def _live_sockets(connections: dict[str, int]) -> int:
    """Gemini Live sockets opened: the SDK picks the API version in the path (v1, v1beta)."""
    return sum(
        count
        for name, count in connections.items()
        if name.startswith("gemini-live-emulator ws /ws/google.ai.generativelanguage.")
        and name.endswith(".GenerativeService.BidiGenerateContent")
    )


def _scenario(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def test_a_race_free_booking_is_the_same_call_on_both_agents_over_the_wire() -> None:
    runs = {}
    for agent in (Agent, ResilientAgent):
        world, outcome = run_scenario(
            _scenario("control/realtime_gemini_booking"), agent, stack=STACK
        )
        assert outcome.passed, (agent.__name__, outcome.reasons)
        emulator = world.stt
        assert isinstance(emulator, GeminiLiveEmulator)
        # the model heard the caller in the PCM the plugin sent, and spoke over the socket
        assert [text for _, text, _ in emulator.finals] == ["please book a table for eight"]
        assert emulator.sentences == {
            1: "Let me book that table for you, one moment please.",
            2: "Your table is booked.",
        }
        assert emulator.received["tool_response"] == 1
        assert len(world.connections) == 1 and _live_sockets(world.connections) == 1
        assert world.race_events == []
        runs[agent] = [(round(r.at, 3), r.reply) for r in world.llm.requests]
    assert runs[Agent] == runs[ResilientAgent]


DOCUMENTED = "resilient-agent lab --quiet --stack gemini-live"


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


def test_a_silent_turn_is_asked_again_on_resilient_agent_only() -> None:
    scenario = _scenario("realtime/gemini/silent_turn")
    plain_world, plain = run_scenario(scenario, Agent, stack=STACK)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=STACK)
    # the plain agent: a text-only turn, nothing played, nothing reported
    assert not plain.passed
    assert plain_world.stt.silent_replies == 1 and plain_world.stt.sentences == {}
    assert resilient.passed, resilient.reasons
    assert world.stt.sentences == {1: "Your parcel arrives tomorrow morning."}
    assert [(e["kind"], e["action"]) for e in world.race_events] == [
        ("silent_realtime_turn", None),
        ("silent_realtime_turn", "regenerated"),
    ]


def test_a_silent_turn_on_the_scripted_model_too_and_an_empty_turn_complete() -> None:
    scenario = _scenario("realtime/gemini/silent_turn")
    empty = dataclasses.replace(
        scenario, llm=tuple(dataclasses.replace(r, silent_as="empty") for r in scenario.llm)
    )
    for call, stack in ((scenario, None), (empty, STACK)):
        _, plain = run_scenario(call, Agent, stack=stack)
        world, resilient = run_scenario(call, ResilientAgent, stack=stack)
        assert not plain.passed, stack
        assert resilient.passed, (stack, resilient.reasons)
        assert [e["action"] for e in world.race_events] == [None, "regenerated"]


def test_a_socket_dropped_mid_reply_reconnects_and_the_next_turn_is_answered() -> None:
    scenario = dataclasses.replace(
        _scenario("realtime/gemini/words_over_protected_tool"),
        provider_faults=ProviderFaults(realtime_drop_in_reply=1),
    )
    world, _ = run_scenario(scenario, ResilientAgent, stack=STACK)
    assert _live_sockets(world.connections) == 2
    assert "actually make it nine instead" in [text for _, text, _ in world.stt.finals]
    assert "Nine it is, I changed the booking." in world.stt.sentences.values()


def test_the_certificate_is_trusted_by_the_redirected_client_only() -> None:
    async def main() -> tuple[int, str]:
        async with GeminiLiveEmulator(ScriptedLLM(), lambda u, w: "") as emulator:
            url = f"{emulator.url.replace('https', 'wss')}{_LIVE_PATH}"
            async with aiohttp.ClientSession() as http:
                async with http.ws_connect(url, ssl=emulator.tls.client) as ws:
                    await ws.send_json({"setup": {"model": "models/x"}})
                    answer = await ws.receive_json()
                try:
                    # the process's own trust store does not know the throwaway certificate
                    async with http.ws_connect(url, ssl=ssl.create_default_context()):
                        return len(answer), "trusted"
                except aiohttp.ClientConnectorCertificateError:
                    return len(answer), "refused"

    assert run_virtual(main()) == (1, "refused")


def test_the_stack_plays_the_gemini_realtime_calls_only() -> None:
    runnable, left_out = stack_variants(scenarios(), STACK)
    assert runnable and all(s.model == "realtime_gemini" for s in runnable)
    assert {s.name for s in runnable} >= {
        "control/realtime_gemini_booking",
        "realtime/gemini/silent_turn",
    }
    assert any("realtime_gemini" in o.why for o in left_out)


def _words(utterance: int, count: int) -> list[np.ndarray]:
    return [
        marker_frame_samples(AudioMarker(KIND_USER, utterance, w, i, 10))
        for w in range(count)
        for i in range(10)
    ]


def _audio(frames: list[np.ndarray]) -> dict[str, object]:
    pcm = np.concatenate(frames).tobytes()
    data = base64.urlsafe_b64encode(pcm).decode()
    return {"realtime_input": {"audio": {"data": data, "mime_type": "audio/pcm;rate=16000"}}}


def test_the_wire_barge_in_tool_call_cancellation_and_resumption() -> None:
    words = {(0, 0): "book", (1, 0): "nine", (2, 0): "wait"}
    rules = [
        LLMRule(text="Sure, booked.", when_user_says="book"),
        LLMRule(
            tool_calls=(ToolCallScript("change_booking", {"time": "nine"}),), when_user_says="nine"
        ),
    ]
    silence = [np.zeros(160, np.int16)] * 60
    llm = ScriptedLLM(rules)

    async def until(ws: aiohttp.ClientWebSocketResponse, key: str) -> list[str]:
        seen = []
        while True:
            message = await ws.receive_json()
            kind = next(iter(message))
            seen.append(next(iter(message[kind]), kind) if kind == "serverContent" else kind)
            if key in json.dumps(message):
                return seen

    async def main() -> tuple[list[str], list[str], list[str], str]:
        async with (
            GeminiLiveEmulator(llm, lambda u, w: words[(u, w)]) as emulator,
            aiohttp.ClientSession() as http,
        ):
            url = f"{emulator.url.replace('https', 'wss')}{_LIVE_PATH}"
            async with http.ws_connect(url, ssl=emulator.tls.client) as ws:
                await ws.send_json({"setup": {"model": "models/x"}})
                await until(ws, "setupComplete")
                await ws.send_json(_audio([*_words(0, 1), *silence]))
                answered = await until(ws, "inlineData")
                # the caller speaks over the reply while it plays: the server's barge-in
                await ws.send_json(_audio(_words(2, 1)))
                barged = await until(ws, "newHandle")
                handle = emulator.resumable and list(emulator.resumable)[-1]
            async with http.ws_connect(url, ssl=emulator.tls.client) as ws:
                await ws.send_json({"setup": {"session_resumption": {"handle": handle}}})
                await until(ws, "setupComplete")
                await ws.send_json(_audio([*_words(1, 1), *silence]))
                await until(ws, "functionCalls")
                # speech before the call was answered: the call is cancelled
                await ws.send_json(_audio(_words(2, 1)))
                cancelled = await until(ws, "toolCallCancellation")
            return answered, barged, cancelled, handle

    answered, barged, cancelled, handle = run_virtual(main())
    assert answered == ["inputTranscription", "modelTurn"]
    # cut while still generating: the rest of its audio never comes
    assert barged == [
        "outputTranscription",
        "interrupted",
        "turnComplete",
        "sessionResumptionUpdate",
    ]
    assert cancelled[-1] == "toolCallCancellation" and handle
    # the resumed session answered from the conversation its handle stands for
    assert llm.requests[-1].user_texts == ("book", "nine")


def test_a_reply_silent_twice_is_asked_again_once_then_reported() -> None:
    scenario = _scenario("realtime/gemini/silent_turn")
    twice = dataclasses.replace(
        scenario, llm=tuple(dataclasses.replace(r, silent_answers=2) for r in scenario.llm)
    )
    world, outcome = run_scenario(twice, ResilientAgent)
    assert not outcome.passed
    assert [e["action"] for e in world.race_events] == [None, "regenerated", None, "gave_up"]
    assert len(world.llm.requests) == 2


def test_an_app_agents_own_model_is_redirected_not_replaced() -> None:
    from livekit.plugins import google

    def own_model_agent(base: type[Agent]) -> Agent:
        class OwnModel(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                # the app's own instance, key and voice: redirected to the emulator, kept
                own = google.realtime.RealtimeModel(api_key="app-key", voice="Kore")
                super().__init__(instructions="Be brief.", llm=own)

        return OwnModel()

    question = _scenario("realtime/gemini/silent_turn")
    answered = dataclasses.replace(
        question,
        agent=own_model_agent,
        llm=tuple(dataclasses.replace(r, silent_answers=0) for r in question.llm),
    )
    world, outcome = run_scenario(answered, Agent, stack=STACK)
    assert outcome.passed, outcome.reasons
    (setup,) = world.stt.setups
    # google-genai's setup mixes camelCase and snake_case keys
    speech = setup["generationConfig"]["speechConfig"]
    assert speech["voice_config"]["prebuilt_voice_config"] == {"voice_name": "Kore"}
    assert world.stt.sentences == {1: "Your parcel arrives tomorrow morning."}


def test_a_1011_close_mid_reply_is_asked_again_on_resilient_agent_only() -> None:
    scenario = reply_cut_by_server_error()
    plain_world, plain = run_scenario(scenario, Agent, stack=STACK)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=STACK)
    # the plain agent: half the answer heard, the plugin reconnected, nothing asked again
    assert not plain.passed
    assert _live_sockets(plain_world.connections) == 2
    ((cut, heard),) = [(s.text, round(s.heard, 2)) for s in heard_sentences(plain_world)]
    assert cut == DEPOT and heard == 1.9
    assert len(plain_world.llm.requests) == 1 and plain_world.race_events == []
    # ResilientAgent: once the cut reply played out, the model is told and answers again
    assert resilient.passed, resilient.reasons
    assert [(s.text, round(s.heard, 2)) for s in heard_sentences(world)] == [
        (DEPOT, 1.9),
        (DEPOT, 3.8),
    ]
    assert [(e["kind"], e["action"]) for e in world.race_events] == [
        ("realtime_reply_cut", None),
        ("realtime_reply_cut", "asked_again"),
    ]
    assert [round(r.at, 2) for r in world.llm.requests] == [3.5, 5.7]
    assert resilient.reply_latency_s == pytest.approx(3.0)


def test_a_1011_close_once_the_reply_is_whole_raises_nothing() -> None:
    # the server fails after generationComplete, while it waits for the playout: the reply was
    # whole (its stream ended before the error), it plays out, and is not asked for again
    scenario = reply_cut_by_server_error(after_reply=True)
    for agent in (Agent, ResilientAgent):
        world, outcome = run_scenario(scenario, agent, stack=STACK)
        assert outcome.passed, (agent.__name__, outcome.reasons)
        assert _live_sockets(world.connections) == 2, agent.__name__
        assert [(s.text, round(s.heard, 2)) for s in heard_sentences(world)] == [(DEPOT, 3.8)]
        assert world.race_events == [] and len(world.llm.requests) == 1, agent.__name__


def test_a_hung_reply_is_asked_again_and_its_answer_heard_once_within_6_s() -> None:
    # the plugin routes the server's new reply into the generation still open (the hung
    # reply's handle): interrupting it first left that audio unplayed and the request waiting
    # for livekit's 5 s interruption timeout ("How can I help?" heard after 15.7 s)
    world, outcome = run_scenario(reply_never_comes("gemini"), ResilientAgent, stack=STACK)
    assert outcome.passed, outcome.reasons
    heard = [s.text for s in heard_sentences(world) if s.heard]
    assert heard == ["Your parcel is at the depot."]
    assert [(e["kind"], e["action"]) for e in world.race_events] == [
        ("realtime_reply_missing", None),
        ("realtime_reply_missing", "asked_again"),
    ]
    assert world.logs.count("speech not done in time after interruption") == 0
    assert outcome.reply_latency_s == pytest.approx(5.70, abs=0.05)


def test_a_slow_but_live_reply_raises_no_alarm_over_the_wire() -> None:
    (scenario,) = [s for s in realtime_controls() if s.name == "control/realtime_gemini_slow_reply"]
    world, outcome = run_scenario(scenario, ResilientAgent, stack=STACK)
    assert outcome.passed, outcome.reasons
    assert world.race_events == []
