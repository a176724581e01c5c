"""livekit's real Gemini Live model against the local emulator (``lab --stack gemini-live``).

A few representative calls, a second or two each: the realtime family on the stack is
``resilient-agent lab --stack gemini-live``.
"""

from __future__ import annotations

import dataclasses
import shlex
import ssl

import aiohttp
import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.stacks import stack_variants
from resilient_agent.testing import Scenario, run_scenario
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.emulators import GeminiLiveEmulator
from resilient_agent.testing.llm import ScriptedLLM
from resilient_agent.testing.scenario import ProviderFaults

pytest.importorskip("livekit.plugins.google")

STACK = "gemini-live"
_LIVE_PATH = "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"


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
        assert world.connections == {f"gemini-live-emulator ws {_LIVE_PATH}": 1}
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
    assert "Agent (livekit.agents:Agent, reference): 2 passed, 5 failed" in out
    assert "ResilientAgent (resilient_agent:ResilientAgent, under test): 7 passed, 0 failed" in out


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
    assert world.connections[f"gemini-live-emulator ws {_LIVE_PATH}"] == 2
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
