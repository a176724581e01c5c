"""The schedule explorer: its schedules replay exactly, and it finds and shrinks ordering bugs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import Agent, StopResponse
from livekit.agents.voice import events as lk_events
from resilient_agent.middleware import default_middleware_specs

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent, UserTurn, UserTurnNext
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.explore import (
    JITTER_SLACK_S,
    run_explore,
    schedule_for,
    with_jitter_slack,
    write_explore_json,
)
from resilient_agent.lab.run import AgentUnderTest, run_lab
from resilient_agent.lab.timeline import extract_timeline
from resilient_agent.testing import Scenario, Utterance, run_scenario
from resilient_agent.testing.schedule import SOURCES, Schedule, explored


def _catalog(name: str) -> Scenario:
    return {s.name: s for s in scenarios()}[name]


_ID = re.compile(r"\b(speech|item|call|llm|tts|fnc|GI|AG|resp)_[0-9a-zA-Z]{8,}\b")


def _timeline_json(scenario: Scenario, schedule: Schedule | None) -> tuple[str, list[Any]]:
    """The call's timeline, its ids numbered in order (each call of a process draws its own)."""
    with explored(schedule) as exploration:
        world, outcome = run_scenario(scenario, ResilientAgent)
    late = exploration.late if exploration is not None else []
    timeline = extract_timeline(world, outcome, agent="r:R", agent_label="R")
    text = json.dumps(dataclasses.asdict(timeline), sort_keys=True, default=str)
    ids: dict[str, str] = {}
    numbered = _ID.sub(lambda m: ids.setdefault(m.group(0), f"{m.group(1)}_{len(ids)}"), text)
    return numbered, late


# -- schedules ---------------------------------------------------------------------------------


def test_a_schedule_token_names_the_deliveries_it_keeps() -> None:
    schedule = Schedule(42, frozenset({("stt", 7), ("caller_audio", 120)}))
    assert schedule.token() == "42:caller_audio#120+stt#7"
    assert Schedule.parse(schedule.token()) == schedule
    assert Schedule.parse("42") == Schedule(42)


@pytest.mark.parametrize(
    ("token", "named"),
    [("x1", "give SEED"), ("5:stt7", "'stt7' is not source#index"), ("5:radio#1", "radio#1")],
)
def test_a_bad_schedule_token_names_the_part(token: str, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        Schedule.parse(token)


def test_the_explorer_draws_each_scenario_its_own_schedules() -> None:
    first = schedule_for(3, "control/two_turns", 0)
    assert first == schedule_for(3, "control/two_turns", 0)
    assert first != schedule_for(3, "control/two_turns", 1)
    assert first != schedule_for(3, "tool_gap/gap_protected_say", 0)
    assert first != schedule_for(4, "control/two_turns", 0)


def test_a_schedule_that_keeps_no_delivery_is_the_lab_s_own_timing() -> None:
    scenario = _catalog("tool_gap/gap_protected_say")
    plain, _ = _timeline_json(scenario, None)
    nothing_late, late = _timeline_json(scenario, Schedule(11, frozenset()))
    assert late == []
    assert nothing_late == plain


def test_a_schedule_moves_the_call_and_replays_it_byte_for_byte() -> None:
    scenario = _catalog("tool_gap/gap_protected_say")
    plain, _ = _timeline_json(scenario, None)
    first, late = _timeline_json(scenario, Schedule(11))
    again, late_again = _timeline_json(scenario, Schedule(11))
    assert late, "a schedule makes some deliveries late"
    assert {source for (source, _), _ in late} >= {"caller_audio", "vad", "stt"}
    assert first != plain, "the late deliveries show in the call's timeline"
    assert (again, late_again) == (first, late)


def test_late_deliveries_stay_within_their_source_s_bound() -> None:
    with explored(Schedule(5)) as exploration:
        run_scenario(_catalog("tool_gap/gap_protected_say"), ResilientAgent)
    assert exploration is not None
    for (source, _), late in exploration.late:
        assert 0 < late <= SOURCES[source].max_late_s


def test_the_explorer_judges_reply_bounds_with_the_schedule_s_slack() -> None:
    scenario = _catalog("lost_words/typed_after_words_over_filler")
    slack = with_jitter_slack(scenario)
    assert slack.reply_bound == scenario.reply_bound + JITTER_SLACK_S
    bounds = [u.reply_within for u in slack.utterances] + [t.reply_within for t in slack.typed]
    written = [u.reply_within for u in scenario.utterances] + [
        t.reply_within for t in scenario.typed
    ]
    assert bounds == [None if w is None else w + JITTER_SLACK_S for w in written]


# -- a planted ordering bug --------------------------------------------------------------------


class _IgnoresEcho(Middleware):
    """Planted bug: assumes the caller's voice is reported before the agent's first audio.

    When the caller starts speaking in the very instant the agent's reply starts playing,
    livekit reports the two in the order their deliveries reach the loop. This middleware takes
    the order agent-then-caller for the agent's own echo and declines to answer that turn.
    """

    def __init__(self) -> None:
        self._agent_speaking_at: float | None = None
        self._echo = False

    async def on_agent_state(
        self, ctx: MiddlewareContext, ev: lk_events.AgentStateChangedEvent
    ) -> None:
        if ev.new_state == "speaking":
            self._agent_speaking_at = asyncio.get_running_loop().time()

    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        now = asyncio.get_running_loop().time()
        started = self._agent_speaking_at
        if ev.new_state == "speaking" and started is not None and now - started < 1e-3:
            self._echo = True

    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, call_next: UserTurnNext
    ) -> None:
        if self._echo:
            self._echo = False
            raise StopResponse()
        await call_next(turn)


class _PlantedAgent(ResilientAgent):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(middleware=[*default_middleware_specs(), _IgnoresEcho()], **kwargs)


# the caller's second sentence starts so that the VAD reports it (0.05 s in) in the very
# instant the reply to the first one starts playing (3.70 s)
_SIMULTANEOUS = Scenario(
    name="explore/simultaneous_start",
    family="explore",
    description="The caller speaks again in the instant the agent's reply starts playing.",
    agent=agents.plain_agent,
    utterances=(
        Utterance(1.0, 2.5, "do you have a terrace"),
        Utterance(3.65, 4.5, "great thanks"),
    ),
    # the second sentence stops the first reply before it is heard: one reply answers both
    reply_bound=4.0,
    duration=12.0,
)
_PLANTED = AgentUnderTest("tests.test_explore:_PlantedAgent", _PlantedAgent)


def test_the_planted_bug_hides_on_the_lab_s_own_timing() -> None:
    result = run_lab([_SIMULTANEOUS], [_PLANTED])[0]
    assert result.outcome.passed, result.outcome.reasons


def test_the_explorer_finds_the_planted_ordering_bug_and_shrinks_it() -> None:
    report = run_explore([_SIMULTANEOUS], [_PLANTED], 40, 1)[0]
    assert report.schedules == 40
    assert report.failures, "no schedule put the agent's audio before the caller's voice"
    shrunk = report.failures[0]
    assert "unanswered" in shrunk.contracts
    assert shrunk.shrunk is not None and shrunk.shrunk_late
    # the caller's side (its frame or the VAD's inference) delivered after the agent's audio,
    # and nothing the bug does not need: without any one of the late deliveries it passes
    kept = [key for key, _ in shrunk.shrunk_late]
    assert len(kept) <= 2
    assert any(source in ("caller_audio", "vad") for source, _ in kept)
    for key in kept:
        fewer = dataclasses.replace(shrunk.shrunk, keep=frozenset(set(kept) - {key}))
        with explored(fewer):
            without = run_lab([with_jitter_slack(_SIMULTANEOUS)], [_PLANTED])[0]
        assert without.outcome.passed, (key, without.outcome.reasons)
    # the printed token replays the failure
    with explored(shrunk.shrunk):
        replayed = run_lab([with_jitter_slack(_SIMULTANEOUS)], [_PLANTED])[0]
    assert any("never answered" in r for r in replayed.outcome.reasons)
    # and on the same schedules an agent without the planted assumption passes
    clean = run_explore([_SIMULTANEOUS], [AgentUnderTest("r:R", ResilientAgent)], 40, 1)[0]
    assert clean.failures == []


# -- what the explorer found -------------------------------------------------------------------


def test_words_still_being_recovered_join_a_typed_message_s_reply() -> None:
    # found by the explorer (seed 1) and shrunk to four late STT answers: the re-transcription
    # of the words said over the filler finished a millisecond after the caller typed; the typed
    # message's reply went out without them and they got a reply of their own, 5.8 s late
    token = "2292147798694:stt#681+stt#726+stt#748+stt#766"
    scenario = with_jitter_slack(_catalog("lost_words/typed_after_words_over_filler"))
    with explored(Schedule.parse(token)):
        world, outcome = run_scenario(scenario, ResilientAgent)
    typed_at = scenario.typed[0].at
    recovered = [
        e["at_s"]
        for e in world.race_events
        if e["kind"] == "speech_withheld_from_stt" and e["action"] == "recovered_words"
    ]
    assert recovered and recovered[0] > typed_at, "the schedule no longer recovers them late"
    assert outcome.passed, outcome.reasons
    replies = [r for r in world.llm.requests if r.at - world.t0 >= typed_at]
    assert "and any vegan options" in replies[0].user_texts


def test_a_reply_made_before_the_caller_spoke_never_plays_before_their_answer() -> None:
    # found by the explorer (seed 2026) and shrunk to seven late STT answers: the words said over
    # the filler were recovered late enough that livekit's turn delay outlasted the filler, and
    # the reply queued behind it, made before the caller spoke, played whole before the answer
    token = "126136336007889:stt#683+stt#687+stt#708+stt#721+stt#741+stt#753+stt#780"
    scenario = with_jitter_slack(_catalog("lost_words/said_over_filler_with_reply_queued"))
    with explored(Schedule.parse(token)):
        world, outcome = run_scenario(scenario, ResilientAgent)
    filler_end = world.audio_out.segments[0].ended_at
    recovered = [
        e["at_s"]
        for e in world.race_events
        if e["kind"] == "speech_withheld_from_stt" and e["action"] == "recovered_words"
    ]
    turn_delay = 0.5  # the lab's min_delay: livekit's turn would end after the filler
    assert filler_end is not None and recovered
    assert recovered[0] + turn_delay > filler_end, "the schedule no longer recovers them late"
    assert outcome.passed, outcome.reasons
    # the filler, then the answer: the stale reply never began to play
    assert len(world.audio_out.segments) == 2, world.audio_out.segments


# -- the command -------------------------------------------------------------------------------


def test_lab_explore_ends_with_its_count_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "lab",
            "--explore",
            "2",
            "--seed",
            "3",
            "--only",
            "^control/two_turns$",
            "--agent",
            "resilient_agent:ResilientAgent",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.rstrip().splitlines()[-1] == "explored 2 schedules of 1 scenarios: 0 failed"


def test_a_replayed_schedule_writes_the_same_bytes(tmp_path: Path) -> None:
    outputs = []
    for run in ("a", "b"):
        timeline = tmp_path / f"{run}.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "resilient_agent",
                "lab",
                "--quiet",
                "--only",
                "^tool_gap/gap_protected_say$",
                "--schedule",
                "11",
                "--timeline",
                str(timeline),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(timeline.read_bytes())
    assert outputs[0] == outputs[1]
    assert b"speech_" in outputs[0]


def test_lab_schedule_replays_one_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["lab", "--only", "^control/two_turns$", "--schedule", "12:stt#3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "schedule 12:stt#3" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--explore", "0"], "--explore 0: give 1 or more schedules"),
        (["--schedule", "nope"], "--schedule: schedule 'nope'"),
        (["--explore", "2", "--schedule", "3"], "--schedule does not apply with --explore"),
        (["--explore", "2", "--fuzz", "3", "--only", "x"], "--only does not apply with --fuzz N"),
        (["--explore", "2", "--report", "/tmp/r.html"], "--report does not apply with --explore"),
        (["--seed", "2"], "--seed only applies with --fuzz N or --explore N"),
    ],
)
def test_lab_explore_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["lab", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert message in captured.err


# -- the catalog under exploration -------------------------------------------------------------

_RESILIENT = AgentUnderTest("resilient_agent:ResilientAgent", ResilientAgent)
_BASELINE = AgentUnderTest("livekit.agents:Agent", Agent, reference=True)


def test_on_plain_agent_the_explorer_finds_the_races_and_no_false_alarm() -> None:
    chosen = [_catalog("tool_gap/gap_protected_say"), _catalog("control/two_turns")]
    baseline, resilient = run_explore(chosen, [_BASELINE, _RESILIENT], 3, 5)
    # the race fails under every schedule on Agent; its control never does
    assert [f.scenario for f in baseline.failures] == ["tool_gap/gap_protected_say"] * 3
    assert all(f.shrunk is None for f in baseline.failures), "a reference is not shrunk"
    assert resilient.failures == []


def test_explore_json_is_byte_identical_across_runs_and_processes(tmp_path: Path) -> None:
    chosen = [_catalog("control/two_turns")]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write_explore_json(run_explore(chosen, [_RESILIENT], 3, 8), 3, 8, first)
    write_explore_json(run_explore(chosen, [_RESILIENT], 3, 8, jobs=2), 3, 8, second)
    assert first.read_bytes() == second.read_bytes()
    assert json.loads(first.read_text())["agents"][0]["schedules"] == 3


def test_docs_give_every_source_s_rates_and_bound() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "lab.md").read_text(encoding="utf-8")
    for name, jitter in SOURCES.items():
        row = (
            f"| {jitter.reorder_rate:.0%} | {jitter.late_rate:.0%} | "
            f"{jitter.max_late_s * 1000:.0f} ms | {jitter.why} |"
        )
        assert f"| `{name}`" in text and row in text, (name, row)


# CI's exploration: every catalog scenario under a fixed seed's first schedules, judged in as
# many processes as CI's cores; the whole catalog under 100 schedules each is in docs/lab.md
CI_SEED, CI_SCHEDULES = 2026, 2


def test_explored_catalog_breaks_no_contract_on_resilient_agent() -> None:
    jobs = max(1, min(2, os.cpu_count() or 1))
    (report,) = run_explore(scenarios(), [_RESILIENT], CI_SCHEDULES, CI_SEED, jobs=jobs)
    assert report.schedules == CI_SCHEDULES * len(scenarios())
    assert [f.as_json() for f in report.failures] == []
