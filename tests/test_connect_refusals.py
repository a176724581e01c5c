"""Providers that refuse their first connection attempts (429, 503), on the real plugins.

Each emulator answers the refused attempts with its provider's documented status and error
body; livekit's plugins retry per their ``APIConnectOptions`` (0.1 s, then every 2 s). A few
calls per part, a few seconds each.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.catalog.agents import handoff_agent
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    heard_sentences,
    run_scenario,
)
from resilient_agent.testing.emulators import (
    CartesiaEmulator,
    DeepgramEmulator,
    EmulatorServer,
    GeminiEmulator,
    OpenAIEmulator,
)
from resilient_agent.testing.llm import ScriptedLLM
from resilient_agent.testing.refusals import ConnectRefusals


@pytest.fixture(autouse=True)
def _refused_tasks_collected_here() -> Iterator[None]:
    # the Cartesia plugin leaves the task of a refused connection with its exception unread;
    # freed by the collector, asyncio logs "Task exception was never retrieved": collect what
    # this test left while it is over (a task can outlive the module all the same: the tests
    # that compare livekit logs collect first, conftest's earlier_tests_garbage_collected)
    yield
    gc.collect()


pytest.importorskip("livekit.plugins.deepgram", exc_type=ImportError)
pytest.importorskip("livekit.plugins.cartesia", exc_type=ImportError)
pytest.importorskip("livekit.plugins.openai", exc_type=ImportError)
pytest.importorskip("livekit.plugins.google", exc_type=ImportError)

DEEPGRAM_OPENAI = "deepgram+openai+cartesia"


def _scenario(name: str, **refused: ConnectRefusals) -> Scenario:
    scenario = next(s for s in scenarios() if s.name == name)
    faults = dataclasses.replace(
        scenario.provider_faults, **{f"{part}_refused": r for part, r in refused.items()}
    )
    return dataclasses.replace(scenario, provider_faults=faults)


def _kinds(outcome: Any) -> set[tuple[str, str | None]]:
    return {(race["kind"], race["action"]) for race in outcome.race_events}


async def _refused_answers() -> dict[str, tuple[int, str | None, Any]]:
    def lookup(_u: int, _w: int) -> str:
        return "word"

    servers: dict[str, tuple[EmulatorServer, str, str]] = {
        "openai": (OpenAIEmulator(ScriptedLLM()), "POST", "/v1/chat/completions"),
        "gemini": (
            GeminiEmulator(ScriptedLLM()),
            "POST",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        ),
        "cartesia": (CartesiaEmulator(), "POST", "/tts/bytes"),
        "deepgram": (DeepgramEmulator(lookup), "GET", "/v1/listen"),
    }
    answers = {}
    async with aiohttp.ClientSession() as http:
        for name, (server, method, path) in servers.items():
            status = 429 if name in ("openai", "deepgram") else 503
            server.refuse_first(ConnectRefusals(status, first=1, retry_after_s=2.0))
            async with server, http.request(method, server.url + path, data=b"{}") as response:
                body = await response.json()
                answers[name] = (response.status, response.headers.get("Retry-After"), body)
            assert server.refusals[path] == 1
    return answers


def test_each_emulator_refuses_with_its_providers_status_and_error_body() -> None:
    import asyncio

    answers = asyncio.run(_refused_answers())
    assert answers["openai"][:2] == (429, "2")
    assert answers["openai"][2]["error"]["code"] == "rate_limit_exceeded"
    assert answers["gemini"][0] == 503
    assert answers["gemini"][2]["error"]["status"] == "UNAVAILABLE"
    assert answers["cartesia"][0] == 503
    assert {"error_code", "title", "message", "request_id"} <= set(answers["cartesia"][2])
    assert answers["deepgram"][0] == 429
    assert answers["deepgram"][2]["err_code"] == "TOO_MANY_REQUESTS"


def test_gemini_refusing_every_attempt_gets_the_fallback_line_when_the_plugin_gives_up() -> None:
    scenario = _scenario("provider/llm_refuses_every_attempt")
    world, plain = run_scenario(scenario, Agent, stack="deepgram+google+cartesia")
    # livekit's four attempts refused: the question is answered only by the next turn's reply
    assert plain.reply_latencies_s[0] == pytest.approx(14.1, abs=0.01)
    # four refused requests, and the next turn's
    [requests] = [n for path, n in world.connections.items() if "streamGenerateContent" in path]
    assert requests == 5
    _, resilient = run_scenario(scenario, ResilientAgent, stack="deepgram+google+cartesia")
    assert resilient.passed, resilient.reasons
    assert ("llm_keeps_failing", "said_fallback_line") in _kinds(resilient)


def test_an_openai_request_refused_once_is_retried_by_the_plugin_and_raises_nothing() -> None:
    world, outcome = run_scenario(
        _scenario("control/llm_refused_once"), ResilientAgent, stack=DEEPGRAM_OPENAI
    )
    assert outcome.passed, outcome.reasons
    assert outcome.race_events == []
    # the refused request, its retry, and the second turn's
    assert world.connections["openai-emulator http /v1/chat/completions"] == 3


def test_words_said_while_deepgram_refuses_the_connection_are_recovered() -> None:
    # the plugin's four attempts (0, 0.1, 2.1 and 4.1 s) are refused while the caller says
    # "do you have a terrace" (1.0-2.5 s): livekit keeps the audio for each retry, then gives
    # the stream up and recreates it, and the audio kept for it is gone
    scenario = _scenario("control/two_turns", stt=ConnectRefusals(429, first=4))
    _, plain = run_scenario(scenario, Agent, stack=DEEPGRAM_OPENAI)
    assert plain.lost_words == 5
    world, resilient = run_scenario(scenario, ResilientAgent, stack=DEEPGRAM_OPENAI)
    assert resilient.lost_words == 0
    # re-transcribed when livekit gave up (4.1 s), one pre-recorded request
    assert resilient.reply_latencies_s == [pytest.approx(3.05, abs=0.01), 1.2]
    assert ("stt_reconnected", "recovered_words") in _kinds(resilient)
    assert world.connections["deepgram-emulator ws /v1/listen"] == 1


def test_a_refused_connection_retried_in_time_loses_nothing_and_raises_nothing() -> None:
    # three refusals: livekit's fourth attempt (4.1 s) connects and sends the audio it kept,
    # "do you have a terrace" included: late, nothing lost, nothing recovered twice
    scenario = _scenario("control/two_turns", stt=ConnectRefusals(503, first=3))
    _, plain = run_scenario(scenario, Agent, stack=DEEPGRAM_OPENAI)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=DEEPGRAM_OPENAI)
    assert resilient.reply_latencies_s == plain.reply_latencies_s
    assert resilient.race_events == []
    assert [text for _, text, _ in world.stt.finals] == ["do you have a terrace", "great thanks"]


def test_cartesia_refusing_four_connections_answers_late_on_both_agents_and_loses_nothing() -> None:
    # the pool's prewarm and the stream's first three attempts (0, 0.1 and 2.1 s into the
    # reply) are refused, the fourth (4.1 s) connects: the answer is 3.9 s late, the same on
    # both agents, and nothing is said again or reported (a late answer, not a lost one)
    scenario = _scenario("control/llm_refused_once", tts=ConnectRefusals(429, first=4))
    scenario = dataclasses.replace(
        scenario, provider_faults=dataclasses.replace(scenario.provider_faults, llm_refused=None)
    )
    latencies = []
    for agent in (Agent, ResilientAgent):
        world, outcome = run_scenario(scenario, agent, stack=DEEPGRAM_OPENAI)
        latencies.append(outcome.reply_latencies_s)
        assert outcome.lost_words == 0
        assert [s.text for s in heard_sentences(world) if s.complete] == [
            "Sure: do you have parking.",
            "Sure: is the terrace open.",
        ]
        if agent is ResilientAgent:
            assert outcome.race_events == []
    assert latencies[0] == latencies[1]
    assert latencies[0][0] == pytest.approx(5.1, abs=0.01)


def _one_question(tts_refused: ConnectRefusals) -> Scenario:
    # "do you have parking" (1.0-2.5 s), then a caller who waits for the answer
    scenario = _scenario("control/llm_refused_once", tts=tts_refused)
    return dataclasses.replace(
        scenario,
        utterances=scenario.utterances[:1],
        duration=30.0,
        provider_faults=dataclasses.replace(scenario.provider_faults, llm_refused=None),
    )


def _silent_reply_actions(outcome: Any) -> list[str | None]:
    return [race["action"] for race in outcome.race_events if race["kind"] == "silent_reply"]


def test_a_reply_cartesia_refuses_past_one_saying_again_is_said_once_it_accepts() -> None:
    # the pool's prewarm and the reply's four attempts are refused (livekit drops the reply at
    # 7.45 s), then the four attempts of its saying again (given up at 11.55 s); the ninth
    # connection would be accepted
    scenario = _one_question(ConnectRefusals(503, first=9))
    plain_world, plain = run_scenario(scenario, Agent, stack=DEEPGRAM_OPENAI)
    assert plain.reply_latencies_s == [None]
    assert heard_sentences(plain_world) == []
    world, resilient = run_scenario(scenario, ResilientAgent, stack=DEEPGRAM_OPENAI)
    assert resilient.passed is False  # 11 s late: but heard, not left in silence
    assert [s.text for s in heard_sentences(world) if s.complete] == ["Sure: do you have parking."]
    assert _silent_reply_actions(resilient) == [None, "said_again", None, "said_again"]
    # said again 2 s after the second saying was given up (11.55 s), once the TTS accepts
    [latency] = resilient.reply_latencies_s
    assert latency == pytest.approx(11.2, abs=0.1)


def test_a_reply_cartesia_never_accepts_is_reported_as_not_said_within_a_bound() -> None:
    world, resilient = run_scenario(
        _one_question(ConnectRefusals(503, first=1000)), ResilientAgent, stack=DEEPGRAM_OPENAI
    )
    assert heard_sentences(world) == []
    # the reply and two sayings dropped: livekit's budget of three TTS failures in a row is
    # spent (a fourth closes the session), so the words are reported as not said
    assert _silent_reply_actions(resilient) == [None, "said_again"] * 2 + [None, "gave_up"]
    gave_up = resilient.race_events[-1]
    assert gave_up["words_not_said"] == 5
    assert gave_up["at_s"] == pytest.approx(17.65, abs=0.01)
    assert not any("hung up" in reason for reason in resilient.reasons), resilient.reasons
    # the prewarm, and livekit's four attempts for the reply and each of its two sayings
    assert world.connections["cartesia-emulator http /tts/websocket"] == 13


def test_a_handoff_does_not_reset_the_count_of_tts_failures_livekit_closes_the_session_at() -> None:
    # cartesia never accepts: the reply to "do you have parking" and its saying again are
    # livekit's first two TTS failures; the caller asks for the manager (a handoff to another
    # ResilientAgent, its own chain) and asks again; the manager's reply is the third: saying it
    # again would be livekit's fourth in a row, which closes the session
    scenario = _one_question(ConnectRefusals(503, first=1000))
    scenario = dataclasses.replace(
        scenario,
        agent=handoff_agent(exit_work_seconds=0.0),
        utterances=(
            *scenario.utterances,
            Utterance(12.0, 13.4, "let me talk to the manager", expect_reply=False),
            Utterance(16.0, 17.4, "is the terrace open", expect_reply=False),
        ),
        llm=(
            LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),)),
            *scenario.llm,
        ),
        duration=40.0,
    )
    world, resilient = run_scenario(scenario, ResilientAgent, stack=DEEPGRAM_OPENAI)
    # not "call hung up although no farewell was planned": the session stays open
    assert resilient.reasons == ["utterance 1 (1.0-2.5s): never answered audibly to the end"]
    assert _silent_reply_actions(resilient) == [
        None,  # the reply dropped: livekit's first failure (7.45 s)
        "said_again",
        None,  # its saying again dropped: the second (11.55 s)
        "caller_moved_on",  # the caller asked for the manager before the retry (13.55 s)
        None,  # the manager's reply dropped: the third (22.35 s)
        "gave_up",  # a fourth would close the session
    ]
    gave_up = resilient.race_events[-1]
    assert gave_up["at_s"] == pytest.approx(22.35, abs=0.01)
    assert gave_up["words_not_said"] == 5
    # the session's count listened until the session ended, and no longer
    assert isinstance(world.agent, ResilientAgent) and world.agent._runtime is not None
    assert len(world.agent._runtime.ctx.subscriptions) == 0
