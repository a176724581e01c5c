"""The race fuzzer: calls are a pure function of (seed, index), printable, shrinkable."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import agents
from resilient_agent.lab.cli import main
from resilient_agent.lab.fuzz import (
    contracts_broken,
    run_fuzz,
    shrink,
    write_fuzz_json,
)
from resilient_agent.lab.fuzz_recipe import APPS, CallRecipe, generate
from resilient_agent.lab.run import AgentUnderTest, run_lab
from resilient_agent.testing import (
    CallOutcome,
    LLMRule,
    Scenario,
    ToolCallScript,
    Typed,
    Utterance,
    VADFault,
)

BASELINE = AgentUnderTest("livekit.agents:Agent", Agent, reference=True)


def _as_python(recipe: CallRecipe) -> Scenario:
    namespace = {
        "Scenario": Scenario,
        "Utterance": Utterance,
        "Typed": Typed,
        "LLMRule": LLMRule,
        "ToolCallScript": ToolCallScript,
        "VADFault": VADFault,
        "agents": agents,
    }
    scenario = eval(recipe.source(), namespace)  # the printed scenario is pasted as code
    assert isinstance(scenario, Scenario)
    return scenario


def test_a_call_is_a_pure_function_of_seed_and_index() -> None:
    assert generate(3, 17) == generate(3, 17)
    assert generate(3, 17) != generate(3, 18)
    assert generate(3, 17) != generate(4, 17)


def test_calls_cover_every_app_and_the_windows() -> None:
    recipes = [generate(0, i) for i in range(300)]
    assert {r.app for r in recipes} == set(APPS)
    assert any(r.typed for r in recipes)
    assert any(r.vad_fault.mode != "healthy" for r in recipes)
    gaps = [
        b.start - a.end
        for r in recipes
        for a, b in zip(r.utterances, r.utterances[1:], strict=False)
    ]
    # dense just over the VAD's 0.55 s end-of-speech silence
    assert sum(0.5 <= g <= 0.85 for g in gaps) > len(gaps) / 4


def test_printed_scenario_is_the_scenario_run() -> None:
    for index in range(40):
        recipe = generate(5, index)
        pasted = _as_python(recipe)
        built = recipe.scenario()
        for attribute in ("name", "utterances", "llm", "typed", "vad_fault", "duration"):
            assert getattr(pasted, attribute) == getattr(built, attribute)


def test_contracts_are_named_from_the_reasons() -> None:
    outcome = CallOutcome(
        passed=False,
        reasons=[
            "utterance 2 (4.9-5.9s): 3 word(s) never reached the LLM",
            "1 speech handle(s) never finished",
            "something new",
        ],
        reply_latency_s=None,
        lost_words=3,
        end_user_state="listening",
        unfinished_handles=1,
        interruption_timeouts=0,
        hung_up=False,
        farewell_heard=False,
    )
    assert contracts_broken(outcome) == ("lost_words", "unfinished_speech", "other")


def test_shrinker_keeps_the_failure_and_simplifies() -> None:
    words_over_hold = CallRecipe(
        name="shrink-me",
        app="announcement",
        agent_factory="greeting_agent",
        agent_kwargs=(("protected", True), ("text", "This call is recorded for quality, thanks.")),
        llm=(),
        utterances=(
            Utterance(0.73, 1.91, "hello there"),
            Utterance(4.37, 5.02, "apple river"),
            Utterance(6.81, 7.4, "candle"),
        ),
        typed=(Typed(8.03, "any quiet corner seats"),),
        reply_bound=9.0,
    ).fitted()
    shrunk, reasons = shrink(words_over_hold, BASELINE, {"lost_words"})
    assert "never reached the LLM" in " ".join(reasons)
    assert len(shrunk.utterances) == 1 and not shrunk.typed
    start, end = shrunk.utterances[0].start, shrunk.utterances[0].end
    assert (start, end) == (round(start, 1), round(end, 1))  # rounder


def test_fuzz_json_is_byte_identical_across_runs_and_processes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write_fuzz_json(run_fuzz(4, 11, [BASELINE]), 11, first)
    write_fuzz_json(run_fuzz(4, 11, [BASELINE], jobs=2), 11, second)  # judged in 2 processes
    assert first.read_bytes() == second.read_bytes()
    assert json.loads(first.read_text())["agents"][0]["calls"] == 4


def test_cli_fuzz_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fuzz.json"
    main(["lab", "--fuzz", "1", "--seed", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "Agent (livekit.agents:Agent, reference): 1 calls" in printed
    assert "ResilientAgent (resilient_agent:ResilientAgent, under test): 1 calls" in printed
    assert [a["agent"] for a in json.loads(out.read_text())["agents"]] == [
        "livekit.agents:Agent",
        "resilient_agent:ResilientAgent",
    ]


def test_every_printed_snippet_imports_what_it_uses() -> None:
    for index in range(200):
        recipe = generate(9, index)
        namespace: dict[str, object] = {}
        exec(recipe.snippet(), namespace)  # a fresh namespace: nothing but the snippet's imports
        pasted, built = namespace["scenario"], recipe.scenario()
        for attribute in ("name", "utterances", "llm", "typed", "vad_fault", "duration"):
            assert getattr(pasted, attribute) == getattr(built, attribute)


def test_cli_fuzz_labels_the_reference_failures_as_expected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # seed 1's first call breaks contracts on the plain Agent (the reference), not on ResilientAgent
    assert main(["lab", "--fuzz", "1", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "Agent rows are the reference" in lines[0] and "decide the exit code" in lines[0]
    verdicts = [line for line in lines if line.startswith(("FAIL", "NOTE"))]
    assert verdicts and all(line.startswith("FAIL (reference, expected)") for line in verdicts)
    (summary,) = [line for line in lines if line.startswith("Agent (livekit.agents:Agent")]
    assert "1 failed (100.0%; a reference: failures expected, not counted" in summary
    assert "exit code 0: 0 failed call(s) on the agent(s) under test (ResilientAgent)" in lines


def test_a_printed_shrunk_scenario_runs_as_pasted(capsys: pytest.CaptureFixture[str]) -> None:
    # the plain Agent under test: seed 1's first call fails and shrinks in a few trials
    assert main(["lab", "--agent", "livekit.agents:Agent", "--fuzz", "1", "--seed", "1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    (fail,) = [line for line in lines if line.startswith("FAIL")]
    contracts = set(fail.split(maxsplit=3)[3].split(", "))
    start = next(i for i, line in enumerate(lines) if "shrunk to" in line) + 1
    block = []
    for line in lines[start:]:
        if line and not line.startswith(" " * 8):
            break
        block.append(line[8:])
    snippet = "\n".join(block)
    namespace: dict[str, object] = {}
    with pytest.raises(AssertionError) as failed:  # it runs the call and asserts it passed
        exec(snippet, namespace)
    assert "never reached the LLM" in str(failed.value)
    scenario = namespace["scenario"]
    assert isinstance(scenario, Scenario)
    (result,) = run_lab([scenario], [AgentUnderTest("livekit.agents:Agent", Agent)])
    assert set(contracts_broken(result.outcome)) & contracts


def test_reference_failures_are_listed_not_shrunk() -> None:
    reports = run_fuzz(1, 0, [dataclasses.replace(BASELINE)], shrink_failures=True)
    assert all(call.shrunk is None for call in reports[0].failures)


# CI's fuzz run: a fixed seed and a few hundred calls, judged in as many processes as CI's
# machine has cores (two). Every contract must hold on every call.
CI_SEED, CI_CALLS = 18, 300


def test_fuzzed_calls_break_no_contract_on_resilient_agent() -> None:
    resilient = AgentUnderTest("resilient_agent:ResilientAgent", ResilientAgent)
    jobs = min(2, os.cpu_count() or 1)
    report = run_fuzz(CI_CALLS, CI_SEED, [resilient], shrink_failures=False, jobs=jobs)[0]
    assert report.calls == CI_CALLS
    assert not report.failures, "\n\n".join(
        f"{call.reasons}\n{call.recipe.source()}" for call in report.failures
    )


def test_callers_start_within_two_frames_of_a_protected_speechs_start_and_end() -> None:
    # the booking's protected hold message starts 1.2 s after the caller's question ends (VAD end
    # of speech, the LLM's tool call, the TTS's first audio) and plays 43 chars at 15 a second
    hold = len(agents.HOLD_MESSAGE) / 15
    near = 0
    for index in range(400):
        recipe = generate(0, index)
        styles = dict(recipe.agent_kwargs)
        if recipe.app != "booking" or "say" not in str(styles["style"]) or recipe.llm[0].text:
            continue
        start = recipe.utterances[0].end + 1.2
        near += sum(
            abs(u.start - edge) <= 0.04
            for u in recipe.utterances[1:]
            for edge in (start, start + hold)
        )
    assert near >= 3
