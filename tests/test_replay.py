"""Replaying a call from livekit's session report: the plan, the fidelity, the verdict."""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import Agent
from readme_call import livekit_report_of_the_readme_call

from resilient_agent import ResilientAgent
from resilient_agent._livekit.versions import installed_livekit_version
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.cli import main
from resilient_agent.lab.replay import ReportError, load_plan, run_replay
from resilient_agent.lab.replay.emit import emitted_test_source, redacted, trimmed_report
from resilient_agent.lab.replay.fidelity import divergences
from resilient_agent.lab.run import BASELINE_PATH as BASELINE
from resilient_agent.lab.run import RESILIENT_PATH as RESILIENT
from resilient_agent.testing import run_scenario
from resilient_agent.testing.session_report import session_report

# the seed report's race: a tool calls disallow_interruptions() and says its hold message with
# allow_interruptions=False; the caller corrects the booking in the gap and while it plays
SEED = next(s for s in CATALOG if s.name == "tool_gap/gap_disallow_and_say")


@pytest.fixture(scope="module")
def seed_report() -> dict[str, Any]:
    world, outcome = run_scenario(SEED, Agent)
    assert outcome.lost_words > 0  # the race the replay must reproduce
    return session_report(world)


def test_the_plan_reads_turns_answers_tools_and_lines(seed_report: dict[str, Any]) -> None:
    plan = load_plan(seed_report)
    first = plan.turns[0]
    assert (first.start, first.end, first.heard) == (
        1.0,
        2.8,
        ("please", "book", "a", "table", "for", "eight"),
    )
    lost = plan.turns[1]
    assert (lost.start, lost.end, lost.heard) == (3.7, 5.4, ())  # said, never transcribed
    assert [a.tool_calls[0].name for a in plan.answers if a.tool_calls] == ["book_table"]
    assert [a.after_tool for a in plan.answers] == [None, "book_table"]
    assert [r.output for r in plan.tool_runs] == ["Table booked for eight."]
    (hold,) = plan.tool_runs[0].says
    assert hold.protected and hold.offset == 0.0
    assert any("placeholder" in a for a in plan.assumptions)


def test_a_lab_call_round_trips_on_agent_and_resilient_agent_keeps_it(
    seed_report: dict[str, Any],
) -> None:
    plan = load_plan(seed_report)
    as_recorded = run_replay(plan, Agent)
    assert as_recorded.divergences == ()
    assert as_recorded.outcome.lost_words == 4  # the same words lost as recorded
    kept = run_replay(plan, ResilientAgent)
    assert kept.outcome.passed, kept.outcome.reasons
    assert kept.outcome.lost_words == 0


def test_a_divergence_names_its_time(seed_report: dict[str, Any]) -> None:
    recorded = load_plan(seed_report)
    later = tuple(dataclasses.replace(t, start=t.start + 0.5) for t in recorded.turns)
    found = divergences(recorded, dataclasses.replace(recorded, turns=later))
    assert str(found[0]) == "   1.00 s  caller turn 1 starts at 1.500 s, not 1.000 s"


def _bad(report: dict[str, Any], change: Any) -> str:
    broken = copy.deepcopy(report)
    change(broken)
    with pytest.raises(ReportError) as caught:
        load_plan(broken)
    return str(caught.value)


def test_bad_reports_name_the_field(seed_report: dict[str, Any]) -> None:
    assert "sdk_version" in _bad(seed_report, lambda r: r.update(sdk_version="1.2.0"))
    assert "events: missing" in _bad(seed_report, lambda r: r.pop("events"))
    assert "events[3].created_at" in _bad(
        seed_report, lambda r: r["events"][3].update(created_at="soon")
    )
    assert "events[5].created_at" in _bad(
        seed_report, lambda r: r["events"][5].update(created_at=r["events"][0]["created_at"] - 60)
    )
    assert "out of order" in _bad(
        seed_report, lambda r: r["events"][5].update(created_at=r["events"][0]["created_at"] - 60)
    )
    assert "options.min_interruption_duration: expected int or float" in _bad(
        seed_report, lambda r: r["options"].update(min_interruption_duration="x")
    )
    with pytest.raises(ReportError, match="expected a JSON object"):
        load_plan([1, 2])


def test_the_command_says_what_it_assumed_and_judges_both_agents(
    seed_report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "call.json"
    path.write_text(json.dumps(seed_report))
    test_path = tmp_path / "test_call.py"
    code = main(["replay", str(path), "--emit-test", str(test_path), "--redact"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "assumed: at 3.70 s: no transcript" in out
    assert "Agent (as recorded): faithful" in out
    assert "ResilientAgent: PASS  lost words 0" in out
    written = test_path.read_text()
    assert "please" not in written and "book_table" in written  # words redacted, tools kept
    assert main(["replay", str(path), "--explore", "2"]) == 0
    assert "replay/call" in capsys.readouterr().out.split("exploring")[1]


def test_an_unreadable_report_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "call.json"
    path.write_text("{not json")
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not JSON" in err
    path.write_text(json.dumps({"sdk_version": "1.9.0", "events": []}))
    assert main(["replay", str(path)]) == 2
    assert "sdk_version: '1.9.0'" in capsys.readouterr().err


def test_a_hang_up_pad_out_of_range_or_with_the_round_trip_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "call.json"
    path.write_text("{}")
    assert main(["replay", str(path), "--hang-up-pad", "-0.3"]) == 2
    assert "--hang-up-pad SECONDS takes 0 to 10 seconds" in capsys.readouterr().err
    assert main(["replay", "--round-trip", "--hang-up-pad", "0.3"]) == 2
    assert "--round-trip knows each agent's own" in capsys.readouterr().err


def test_redaction_keeps_words_apart_and_the_replay_working(seed_report: dict[str, Any]) -> None:
    kept = redacted(trimmed_report(seed_report))
    assert "please" not in json.dumps(kept)
    plan = load_plan(kept)
    assert plan.turns[0].heard == ("w1", "w2", "w3", "w4", "w5", "w6")
    assert run_replay(plan, Agent).divergences == ()


def test_livekits_own_report_of_the_readme_agent_replays_faithfully() -> None:
    data, outcome = livekit_report_of_the_readme_call()
    plan = load_plan(data)
    assert plan.sdk_version.startswith("1.8.")
    assert [r.name for r in plan.tool_runs] == ["book_table"]
    # no provider failed: nothing is read from what the report lacks (see pipeline_evidence)
    assert plan.faults.llm_hangs is None and not plan.faults.lost_playout_report
    assert plan.faults.faults.stt_silent_at is None
    replayed = run_replay(plan, Agent)
    assert replayed.divergences == (), [str(d) for d in replayed.divergences]
    # the same turn lost whole; how many words it had, the report cannot say (estimated)
    assert outcome.lost_words > 0 and replayed.outcome.lost_words > 0
    assert [t.heard for t in replayed.replayed.turns][1] == ()


RECORD = "resilient-agent lab --quiet --agent livekit.agents:Agent --only tool_gap/gap_disallow_and_say$ --record reports"  # noqa: E501
REPLAY = "resilient-agent replay reports/Agent/tool_gap__gap_disallow_and_say.json"
ROUND_TRIP = "resilient-agent replay --round-trip --only tool_gap/gap_"


def test_a_replay_prints_no_library_log_line_when_the_app_configured_structlog_to_print(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An app module that configures structlog's printer on import keeps the verdicts clean."""
    import structlog

    monkeypatch.chdir(tmp_path)
    main(shlex.split(RECORD)[1:])
    capsys.readouterr()
    structlog.configure()  # structlog's defaults: a console renderer printing to stdout
    try:
        assert main(shlex.split(REPLAY)[1:]) == 0
    finally:
        structlog.reset_defaults()
    printed = capsys.readouterr().out
    assert "ResilientAgent: PASS" in printed
    assert "race_detected" not in printed, printed
    assert "call_summary" not in printed, printed


def test_the_replay_guide_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/replay.md's commands: the lab records its call as livekit's report, it replays."""
    monkeypatch.chdir(tmp_path)
    main(shlex.split(RECORD)[1:])
    capsys.readouterr()
    (path,) = tmp_path.glob("reports/*/*.json")
    assert path.relative_to(tmp_path) == Path("reports/Agent/tool_gap__gap_disallow_and_say.json")
    assert main(shlex.split(REPLAY)[1:]) == 0
    printed = capsys.readouterr().out
    guide = (Path(__file__).parents[1] / "docs" / "replay.md").read_text()
    # the guide shows what the command prints, on the release it names
    installed = f"(livekit-agents {installed_livekit_version()})"
    assert installed in printed
    assert printed.replace(installed, "(livekit-agents 1.8.9)") in guide, printed
    assert main(shlex.split(ROUND_TRIP)[1:]) == 0
    out = capsys.readouterr().out
    assert "replayed within one frame (same turns, words lost, lines, handoffs, close): 4" in out
    # nothing was left out: no clause says so
    assert "left out" not in out


def test_the_emitted_test_passes_on_resilient_agent_and_fails_on_plain_agent(
    seed_report: dict[str, Any],
) -> None:
    report = redacted(trimmed_report(seed_report))
    kept: dict[str, Any] = {}
    exec(emitted_test_source(report, agent_path=RESILIENT, source="call.json"), kept)
    kept["test_the_replay_is_faithful_on_plain_agent"]()
    kept["test_resilientagent_keeps_the_call"]()
    lost: dict[str, Any] = {}
    exec(emitted_test_source(report, agent_path=BASELINE, source="call.json"), lost)
    with pytest.raises(AssertionError, match="never reached the LLM"):
        lost["test_agent_keeps_the_call"]()


def test_the_emitted_test_replays_with_the_hang_up_pad_given(seed_report: dict[str, Any]) -> None:
    source = emitted_test_source(
        trimmed_report(seed_report), agent_path=RESILIENT, source="call.json", hang_up_pad=0.3
    )
    assert source.count("plan = load_plan(REPORT, hang_up_pad=0.3)") == 2
    compile(source, "test_call.py", "exec")


def test_an_emitted_test_passes_in_a_fresh_project_and_fails_on_plain_agent(
    seed_report: dict[str, Any], tmp_path: Path
) -> None:
    """The incident as a regression test in an app's own suite: pytest run in a project of its
    own (no conftest, no pytest settings of ours), on the emitted file as written."""
    import subprocess
    import sys

    report = tmp_path / "call.json"
    report.write_text(json.dumps(seed_report))
    project = tmp_path / "app"
    kept = project / "tests" / "test_incident.py"
    on_agent = project / "tests" / "test_incident_on_agent.py"
    assert main(["replay", str(report), "--emit-test", str(kept)]) == 0
    # the recorded call lost words on Agent: the replay says so, and the test still is written
    assert main(["replay", str(report), "--agent", BASELINE, "--emit-test", str(on_agent)]) == 1

    def pytest_in_project(test: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=600,
        )

    passed = pytest_in_project(kept)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "2 passed" in passed.stdout
    failed = pytest_in_project(on_agent)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 failed, 1 passed" in failed.stdout
    assert "never reached the LLM" in failed.stdout
