"""``--fuzz N --explore M``: fuzzed calls under explored schedules, failures shrunk over both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resilient_agent import ResilientAgent
from resilient_agent.lab.cli import main
from resilient_agent.lab.explore import judge_scheduled, schedule_for
from resilient_agent.lab.fuzz import FuzzCall, run_fuzz, shrink_scheduled
from resilient_agent.lab.fuzz_recipe import CallRecipe, generate
from resilient_agent.lab.run import AgentUnderTest
from resilient_agent.testing import Utterance
from resilient_agent.testing.schedule import Schedule
from tests.test_explore import _PLANTED

_RESILIENT = AgentUnderTest("resilient_agent:ResilientAgent", ResilientAgent)


def test_each_call_runs_under_the_schedules_the_explorer_draws_for_it() -> None:
    (report,) = run_fuzz(1, 7, [_RESILIENT], schedules=2, shrink_failures=False)
    assert (report.drawn, report.calls, report.schedules) == (1, 2, 2)
    recipe = generate(7, 0)
    # the second of the two: the explorer's draw for the call's name
    alone = judge_scheduled(recipe.scenario(), _RESILIENT, schedule_for(7, recipe.name, 1))
    assert alone.virtual_seconds > 0
    assert report.virtual_seconds > alone.virtual_seconds


# the explorer's planted ordering bug (tests/test_explore.py) as a fuzzed call: the caller's
# second sentence starts as the reply to the first starts playing; under this schedule the
# agent's first audio (tts#0) comes before the VAD's inference of the caller (vad#369)
_PLANTED_CALL = CallRecipe(
    name="fuzz/planted",
    app="announcement",
    agent_factory="plain_agent",
    agent_kwargs=(),
    llm=(),
    utterances=(
        Utterance(0.97, 2.5, "do you have a terrace"),  # the bug needs no such onset: 1.0
        Utterance(3.65, 4.5, "great thanks"),
    ),
    reply_bound=4.0,
).fitted()
_NEEDED = frozenset({("tts", 0), ("vad", 369)})


def test_a_failure_is_shrunk_over_the_call_then_its_schedule() -> None:
    seed = 92044767359854
    full = judge_scheduled(_PLANTED_CALL.scenario(), _PLANTED, Schedule(seed))
    # the two late deliveries the bug needs, and three it does not
    extra = [key for key, _ in full.late if key not in _NEEDED][:3]
    schedule = Schedule(seed, _NEEDED | frozenset(extra))
    failing = judge_scheduled(_PLANTED_CALL.scenario(), _PLANTED, schedule)
    assert "unanswered" in failing.contracts
    call = FuzzCall(0, _PLANTED_CALL, failing.contracts, failing.reasons, schedule=schedule)
    shrunk = shrink_scheduled(call, _PLANTED_CALL, schedule, _PLANTED, {"unanswered"})
    assert shrunk.shrunk is not None
    recipe, reasons = shrunk.shrunk
    assert recipe.utterances[0].start == 1.0
    assert shrunk.shrunk_schedule == Schedule(seed, _NEEDED)
    assert {key for key, _ in shrunk.shrunk_late} == _NEEDED
    assert any("never answered" in reason for reason in reasons)
    # the snippet runs the shrunk call under the shrunk schedule
    snippet = recipe.snippet(_PLANTED.path, shrunk.shrunk_schedule.token())
    assert f"with explored(Schedule.parse('{seed}:tts#0+vad#369')):" in snippet
    record = shrunk.as_json()
    assert record["schedule"] == schedule.token()
    assert record["shrunk"]["schedule"] == f"{seed}:tts#0+vad#369"


def test_cli_fuzz_explore_counts_calls_and_schedules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fe.json"
    argv = ["lab", "--fuzz", "1", "--explore", "2", "--seed", "7", "--json", str(out)]
    code = main([*argv, "--agent", "resilient_agent:ResilientAgent", "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "fuzzing 1 call(s) under 2 schedule(s) each, seed 7" in printed
    assert "1 calls under 2 schedules each (2 calls), 0 failed" in printed
    (agent,) = json.loads(out.read_text())["agents"]
    assert (agent["calls"], agent["schedules_per_call"], agent["schedules"]) == (1, 2, 2)
