"""Providers that fail mid-call: a dying STT stream, an LLM that always times out, a TTS error."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from livekit.agents import Agent, RunContext, function_tool
from resilient_agent.middleware.llm_fallback import DEFAULT_FALLBACK_LINE, LlmFallback
from resilient_agent.middleware.stt_recovery import SttRecovery
from resilient_agent.middleware.turn_keeper import TurnKeeper
from resilient_agent.middleware.watchdog import Watchdog
from structlog.testing import capture_logs

from resilient_agent import MiddlewareError, ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.catalog.provider_faults import FALLBACK_LINE
from resilient_agent.testing import (
    CallOutcome,
    CallWorld,
    LLMRule,
    ProviderFaults,
    Scenario,
    ToolCallScript,
    Utterance,
    heard_sentences,
    run_scenario,
)
from resilient_agent.testing.refusals import ConnectRefusals


def _scenario(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def _with_middleware(scenario: Scenario, *middleware: Any) -> Scenario:
    def build(base: type[Agent]) -> Agent:
        assert issubclass(base, ResilientAgent)
        return base(instructions="You answer calls.", middleware=list(middleware))

    return dataclasses.replace(scenario, agent=build)


def _events(outcome: CallOutcome, kind: str, action: str | None = None) -> list[dict[str, Any]]:
    return [e for e in outcome.race_events if e["kind"] == kind and e["action"] == action]


# -- an STT stream that dies ---------------------------------------------------------------------


def test_plain_agent_goes_deaf_when_the_stt_stream_dies() -> None:
    world, outcome = run_scenario(_scenario("provider/stt_dies_mid_call"), Agent)
    assert world.stt.died_at == pytest.approx(8.0, abs=0.02)
    # every word from the death on is lost: the rest of utterance 2 and all of utterance 3
    assert outcome.lost_words == 15
    assert outcome.reply_latencies_s[1:] == [None, None]


def test_dead_stt_stream_is_restarted_at_once_and_its_words_recovered() -> None:
    world, outcome = run_scenario(_scenario("provider/stt_dies_mid_call"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
    [restart] = _events(outcome, "stt_stream_died", "restarted_stream")
    assert restart["at_s"] == pytest.approx(8.0, abs=0.02)
    assert restart["restart_s"] < 0.05
    [recovered] = _events(outcome, "stt_stream_died", "recovered_words")
    # "I would like a" was said before the death, and only the buffered audio still held it
    assert recovered["words"] == 4
    # the words heard before and after the restart reach the LLM as one turn
    turn = "I would like a table for four people tonight"
    assert any(r.last_user_text == turn for r in world.llm.requests)


def test_without_the_turn_keeper_the_stream_restarts_and_the_loss_is_logged() -> None:
    scenario = _with_middleware(_scenario("provider/stt_dies_mid_call"), SttRecovery())
    with capture_logs() as logs:
        _world, outcome = run_scenario(scenario, ResilientAgent)
    assert _events(outcome, "stt_stream_died", "restarted_stream")
    assert not _events(outcome, "stt_stream_died", "recovered_words")
    # the words said before the death are gone; utterance 3 (after the restart) is heard
    assert outcome.lost_words == 4
    assert outcome.reply_latencies_s[2] is not None
    assert [r["why"] for r in logs if r["event"] == "stt_words_not_recovered"]


def test_stt_recovery_costs_nothing_on_a_healthy_call() -> None:
    recovery = SttRecovery()
    scenario = _with_middleware(_scenario("control/two_turns"), TurnKeeper(), recovery)
    _world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not _events(outcome, "stt_stream_died")
    assert not [h for h in type(recovery).__dict__ if h.startswith(("on_", "wrap_", "decide_"))]


# -- an LLM that always times out ----------------------------------------------------------------


def test_plain_agent_leaves_the_caller_in_silence_when_the_llm_times_out() -> None:
    world, outcome = run_scenario(_scenario("provider/llm_always_times_out"), Agent)
    assert outcome.reply_latencies_s == [None]
    assert not [s for s in heard_sentences(world) if s.started_at is not None]


def _fallback_heard_at(world: CallWorld) -> float:
    heard = [s for s in heard_sentences(world) if s.text in FALLBACK_LINE and s.complete]
    assert heard, "the fallback line was not heard to the end"
    return min(s.started_at for s in heard if s.started_at is not None)


def test_llm_that_always_times_out_gets_the_fallback_after_two_failed_attempts() -> None:
    world, outcome = run_scenario(_scenario("provider/llm_always_times_out"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    failures = _events(outcome, "llm_keeps_failing")
    assert [e["failed_attempts"] for e in failures] == [1, 2]
    [said] = _events(outcome, "llm_keeps_failing", "said_fallback_line")
    # the Watchdog abandons each silent attempt after 6 s; the line follows the second one
    assert said["since_first_failure_s"] == pytest.approx(6.0, abs=0.5)
    assert _fallback_heard_at(world) - said["at_s"] < 0.5
    # no third attempt for the same turn keeps the caller waiting once the line is decided
    assert not [r for r in world.llm.requests if r.at - world.t0 > said["at_s"] + 0.1]


def test_fallback_counts_the_providers_own_timeouts_without_the_watchdog() -> None:
    scenario = dataclasses.replace(
        _with_middleware(_scenario("provider/llm_always_times_out"), TurnKeeper(), LlmFallback()),
        duration=40.0,
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    failures = _events(outcome, "llm_keeps_failing")
    assert [e["how"] for e in failures] == ["provider_error", "provider_error"]
    # two attempts of livekit's default 10 s timeout, one request: livekit retried it itself
    assert len(world.llm.requests) == 1
    assert _fallback_heard_at(world) == pytest.approx(failures[1]["at_s"], abs=0.5)


def test_an_llm_that_recovers_on_the_second_attempt_gets_no_fallback() -> None:
    _world, outcome = run_scenario(_scenario("stall/llm_hangs"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [e["failed_attempts"] for e in _events(outcome, "llm_keeps_failing")] == [1]
    assert not _events(outcome, "llm_keeps_failing", "said_fallback_line")


# -- an LLM provider that refuses requests (429, 503) -----------------------------------------


def _refused(name: str, refusals: ConnectRefusals) -> Scenario:
    scenario = _scenario(name)
    faults = dataclasses.replace(scenario.provider_faults, llm_refused=refusals)
    return dataclasses.replace(scenario, provider_faults=faults)


def test_an_llm_refusing_every_attempt_gets_the_fallback_line_when_livekit_gives_up() -> None:
    scenario = _scenario("provider/llm_refuses_every_attempt")
    _, plain = run_scenario(scenario, Agent)
    # livekit's four attempts (0.1 s, then 2 s apart) are refused: the question is answered
    # only by the next turn's reply, 11.5 s later
    assert plain.reply_latencies_s[0] == pytest.approx(14.1, abs=0.01)
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    [failed] = _events(outcome, "llm_keeps_failing")
    assert failed["given_up"] and failed["failed_attempts"] == 1
    [said] = _events(outcome, "llm_keeps_failing", "said_fallback_line")
    # said when livekit's last retry failed, 4.1 s into the reply
    assert said["at_s"] == pytest.approx(3.05 + 4.1, abs=0.01)
    assert _fallback_heard_at(world) - said["at_s"] < 0.5


def test_an_llm_refused_twice_is_answered_by_livekits_retry_not_by_the_fallback_line() -> None:
    # two refusals 0.1 s apart: livekit's third attempt, 2 s later, answers; the caller must
    # hear that answer, not "say that again"
    scenario = _refused("control/llm_refused_once", ConnectRefusals(429, first=2))
    world, outcome = run_scenario(scenario, ResilientAgent)
    _, plain = run_scenario(scenario, Agent)
    assert outcome.reply_latencies_s == plain.reply_latencies_s
    assert outcome.reply_latencies_s[0] == pytest.approx(1.2 + 2.1, abs=0.01)
    assert outcome.race_events == []
    assert not [s for s in heard_sentences(world) if s.text in FALLBACK_LINE]


def test_an_llm_refused_once_raises_nothing() -> None:
    world, outcome = run_scenario(_scenario("control/llm_refused_once"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.race_events == []
    assert world.llm.refusals == 1


def test_the_fallback_line_is_configurable() -> None:
    line = "One moment please, our system is slow today."
    scenario = _with_middleware(
        _scenario("provider/llm_always_times_out"),
        TurnKeeper(),
        Watchdog(),
        LlmFallback(line=line, after_failed_attempts=1),
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    [said] = _events(outcome, "llm_keeps_failing", "said_fallback_line")
    assert said["failed_attempts"] == 1
    assert any(s.text in line and s.complete for s in heard_sentences(world))


def test_lab_and_middleware_agree_on_the_default_line() -> None:
    assert LlmFallback().line == DEFAULT_FALLBACK_LINE == FALLBACK_LINE


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"line": "  "}, "line"),
        ({"after_failed_attempts": 0}, "after_failed_attempts"),
        ({"stalled_s": 0.0}, "stalled_s"),
    ],
)
def test_bad_fallback_options_are_refused_at_construction(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(MiddlewareError, match=field):
        LlmFallback(**options)


def test_bad_stt_recovery_options_are_refused_at_construction() -> None:
    with pytest.raises(MiddlewareError, match="max_restarts"):
        SttRecovery(max_restarts=0)


# -- a TTS error mid-speech (a control: livekit recovers by itself) -------------------------------


@pytest.mark.parametrize("agent_class", [Agent, ResilientAgent])
def test_tts_error_mid_reply_ends_that_reply_only(agent_class: type[Agent]) -> None:
    world, outcome = run_scenario(_scenario("control/tts_error_mid_reply"), agent_class)
    assert outcome.passed, outcome.reasons
    sentences = {s.text: s for s in heard_sentences(world)}
    assert sentences["We make a lemon tart."].complete
    assert sentences["We also have a chocolate mousse."].started_at is None


class _Manager(Agent):
    """A plain ``Agent`` the front desk hands the call to: served by the front desk's chain."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the manager.")


class _FrontDesk(ResilientAgent):
    def __init__(self) -> None:
        super().__init__(instructions="You are the front desk.")

    @function_tool
    async def transfer_to_manager(self, ctx: RunContext[None]) -> None:
        """Hand the call to the manager."""
        ctx.session.update_agent(_Manager())


_HANDED_TO_PLAIN = Scenario(
    name="t/stt_dies_after_handoff_to_plain_agent",
    family="t",
    description="",
    agent=lambda base: base(),
    utterances=(
        Utterance(1.0, 2.4, "let me talk to the manager", expect_reply=False),
        Utterance(7.0, 9.4, "I would like a table for four people tonight"),
    ),
    llm=(LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),)),),
    duration=16.0,
    provider_faults=ProviderFaults(stt_dies_at=8.0),
)


def test_a_plain_agent_handed_the_call_gets_the_words_of_a_dead_stt_stream_recovered() -> None:
    # the plain agent has no middleware of its own: SttRecovery finds the TurnKeeper's word
    # recovery on the context, offered by the chain that serves the plain agent
    world, outcome = run_scenario(_HANDED_TO_PLAIN, _FrontDesk)
    assert _events(outcome, "stt_stream_died", "restarted_stream")
    [recovered] = _events(outcome, "stt_stream_died", "recovered_words")
    assert recovered["words"] == 4
    assert outcome.lost_words == 0
    turn = "I would like a table for four people tonight"
    assert any(r.last_user_text == turn for r in world.llm.requests)


# -- an STT stream that stays open and answers nothing (a half-open socket) ----------------------


def test_plain_agent_goes_deaf_when_the_stt_stream_goes_silent() -> None:
    world, outcome = run_scenario(_scenario("provider/stt_goes_silent"), Agent)
    assert world.stt.went_silent_at == pytest.approx(6.0, abs=0.05)
    # no error, no transcript: every word from the silence on is lost, nobody is told
    assert outcome.lost_words == 15
    assert outcome.reply_latencies_s[1:] == [None, None]
    assert outcome.race_events == []


def test_a_silent_stt_stream_is_restarted_and_its_words_recovered() -> None:
    world, outcome = run_scenario(_scenario("provider/stt_goes_silent"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
    [found] = [e for e in outcome.race_events if e["kind"] == "stt_silent" and e["action"] is None]
    # the VAD ended the second sentence at 9.95 s; no transcript came in the 2 s after it
    assert found["after_end_of_speech_s"] == pytest.approx(2.0, abs=0.05)
    assert found["words"] == 9
    [restart] = _events(outcome, "stt_silent", "restarted_stream")
    assert restart["at_s"] == pytest.approx(11.95, abs=0.05)
    [recovered] = _events(outcome, "stt_silent", "recovered_words")
    assert recovered["words"] == 9
    turn = "I would like a table for four people tonight"
    assert any(r.last_user_text == turn for r in world.llm.requests)
    # the restarted stream hears the third sentence
    assert outcome.reply_latencies_s[2] == pytest.approx(1.2, abs=0.05)


def test_a_slow_but_live_stt_raises_no_alarm() -> None:
    scenario = _scenario("control/slow_stt_final")
    _, plain = run_scenario(scenario, Agent)
    _, resilient = run_scenario(scenario, ResilientAgent)
    assert resilient.passed, resilient.reasons
    assert resilient.reply_latencies_s == plain.reply_latencies_s
    assert resilient.race_events == []
    # the bound is what keeps it quiet: waiting less than the STT's 1.5 s takes it for deaf
    hasty = _with_middleware(scenario, TurnKeeper(), SttRecovery(silent_s=0.5))
    _, outcome = run_scenario(hasty, ResilientAgent)
    assert _events(outcome, "stt_silent", "restarted_stream")


# -- an LLM that keeps the stream alive and sends no token ---------------------------------------


def test_plain_agent_waits_in_silence_on_an_llm_that_keeps_alive_without_tokens() -> None:
    world, outcome = run_scenario(_scenario("provider/llm_keeps_alive_without_tokens"), Agent)
    # one request, never given up: its chunks keep it alive for the whole 30 s call
    [request] = world.llm.requests
    assert request.hung
    assert outcome.reply_latencies_s == [None]


def test_an_llm_that_keeps_alive_without_tokens_is_asked_again() -> None:
    world, outcome = run_scenario(
        _scenario("provider/llm_keeps_alive_without_tokens"), ResilientAgent
    )
    assert outcome.passed, outcome.reasons
    # the role-only and empty chunks are not a first token: the reply is abandoned 6 s into
    # its thinking and counted as a failed attempt, and asked again
    [asked] = _events(outcome, "thinking_without_speech", "asked_for_the_reply_again")
    assert asked["at_s"] == pytest.approx(9.05, abs=0.05)
    [failed] = _events(outcome, "llm_keeps_failing")
    assert failed["how"] == "abandoned"
    assert [r.hung for r in world.llm.requests] == [True, False]
    assert outcome.reply_latencies_s == [pytest.approx(7.2, abs=0.05)]


def test_an_llm_that_always_keeps_alive_without_tokens_gets_the_fallback_line() -> None:
    scenario = _scenario("provider/llm_keeps_alive_without_tokens")
    rule = dataclasses.replace(scenario.llm[0], keeps_alive_before=60.0)
    scenario = dataclasses.replace(
        scenario, llm=(rule,), provider_faults=ProviderFaults(fallback_line=FALLBACK_LINE)
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    [said] = _events(outcome, "llm_keeps_failing", "said_fallback_line")
    assert said["failed_attempts"] == 2
    assert _fallback_heard_at(world) - said["at_s"] < 0.5


def test_an_llm_slow_to_its_first_token_raises_nothing() -> None:
    scenario = _scenario("control/slow_llm_first_token")
    _, plain = run_scenario(scenario, Agent)
    world, resilient = run_scenario(scenario, ResilientAgent)
    assert resilient.passed, resilient.reasons
    assert resilient.reply_latencies_s == plain.reply_latencies_s
    assert resilient.race_events == []
    assert len(world.llm.requests) == 2
    # the Watchdog's thinking period is what keeps it quiet: 2 s is shorter than the model
    hasty = _with_middleware(scenario, TurnKeeper(), Watchdog(thinking_s=2.0))
    _, outcome = run_scenario(hasty, ResilientAgent)
    assert _events(outcome, "thinking_without_speech", "asked_for_the_reply_again")
