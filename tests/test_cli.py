"""The ``resilient-agent`` command's user errors: one line on stderr, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from resilient_agent.lab.cli import main


def _error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["lab", "--only", "["], "--only '[' is not a regular expression"),
        (["lab", "--only", "no-such-scenario"], "matches no scenario"),
        (["lab", "--agent", "livekit.agents"], "expected 'module:Class'"),
        (["lab", "--agent", "no_such_module_xyz:Agent"], "no module named 'no_such_module_xyz'"),
        (["lab", "--agent", "livekit.agents:NoSuch"], "has no attribute 'NoSuch'"),
        (
            ["lab", "--agent", "livekit.agents:AgentSession"],
            "is a class but not a livekit.agents.Agent subclass",
        ),
        (["lab", "--agent", "livekit.agents:__version__"], "is a str object"),
        (["lab", "--json", "/no/such/dir/lab.json"], "--json '/no/such/dir/lab.json'"),
        (["lab", "--no-such-option"], "unrecognized arguments: --no-such-option"),
        # options that would do nothing in the mode chosen
        (["lab", "--seed", "3"], "--seed only applies with --fuzz N"),
        (["lab", "--jobs", "2"], "--jobs only applies with --fuzz N"),
        (["lab", "--fuzz", "0"], "--fuzz 0: give 1 or more calls"),
        (["lab", "--fuzz", "2", "--sweep"], "--sweep does not apply with --fuzz N"),
        (["lab", "--fuzz", "2", "--only", "vad/"], "--only does not apply with --fuzz N"),
        (["lab", "--fuzz", "2", "--report", "lab.html"], "--report does not apply with --fuzz N"),
        (["lab", "--fuzz", "2", "--timeline", "t.json"], "--timeline does not apply with --fuzz"),
        (["lab", "--fuzz", "2", "--speech", "real"], "--speech real does not apply with --fuzz"),
        (["lab", "--list", "--fuzz", "2"], "--list only lists the scenarios: drop --fuzz"),
        (["lab", "--list", "--json", "lab.json"], "--list only lists the scenarios: drop --json"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_user_errors_are_one_line_and_exit_code_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert expected in _error_line(argv, capsys)


def test_module_that_fails_to_import_is_told_apart_from_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken_app.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _error_line(["lab", "--agent", "broken_app:MyAgent"], capsys)
    assert "importing 'broken_app' failed: ModuleNotFoundError" in line


def test_help_describes_the_command_without_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text
    assert "race" in text and "resilient-agent lab" in text


def test_header_says_reference_rows_are_expected_to_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["lab", "--quiet", "--only", "control/two_turns"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "reference" in first and "FAIL is expected" in first
    assert "ResilientAgent rows are under test" in first


def test_fuzz_seed_defaults_to_0(monkeypatch: pytest.MonkeyPatch) -> None:
    from resilient_agent.lab import fuzz

    seeds: list[int] = []

    def fake(count: int, seed: int, *args: object, **kwargs: object) -> int:
        seeds.append(seed)
        return 0

    monkeypatch.setattr(fuzz, "run_fuzz_command", fake)
    assert main(["lab", "--fuzz", "1"]) == 0
    assert main(["lab", "--fuzz", "1", "--seed", "7"]) == 0
    assert seeds == [0, 7]


def test_a_reply_to_part_of_an_utterance_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    # the plain agent drops the words said after its protected speech ends: the reply that plays
    # in full answers only the words said before
    argv = ["lab", "--agent", "livekit.agents:Agent", "--only", "straddling_protected_end$"]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert (
        "utterance 1 (4.3-6.8s): never answered audibly to the end: the reply that played in "
        "full (at 8.0s) answered only 'change my booking please' of it (4 of 7 words)"
    ) in printed
