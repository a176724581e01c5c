"""A newcomer's own app in the lab: configuration mistakes, unmocked tools, the lab's output.

Each test runs ``resilient-agent lab --agent`` on a small pizza app written to a temporary
directory, as a new user would from their app's root.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from resilient_agent.lab.cli import main

PIZZA = '''
from __future__ import annotations

import logging

from livekit.agents import RunContext, function_tool

from resilient_agent import ResilientAgent, end_call_tool
from resilient_agent.middleware import ToolGuard, TurnKeeper, WaitForCaller

log = logging.getLogger("pizza")
SENT: list[str] = []


class PizzaAgent(ResilientAgent):
    def __init__(self) -> None:
        super().__init__(
            instructions="You take pizza orders.",
            tools=[end_call_tool(farewell="Thanks for calling, goodbye!")],
        )

    @function_tool
    async def place_order(self, ctx: RunContext, pizza: str) -> str:
        """Place an order.

        Args:
            pizza: Which pizza.
        """
        log.warning("PIZZA-APP-LOG placing an order for %s", pizza)
        await ctx.session.say("One moment while I place that.", allow_interruptions=False)
        return f"Ordered {pizza}."

    @function_tool
    async def text_confirmation(self, ctx: RunContext, phone_number: str) -> str:
        """Text the caller a confirmation.

        Args:
            phone_number: Where to send it.
        """
        SENT.append(phone_number)
        raise ConnectionError("sms.example.com is unreachable")


class BadOption(PizzaAgent):
    def __init__(self) -> None:
        ResilientAgent.__init__(
            self, instructions="x", middleware=[WaitForCaller(wait_s="3")]
        )


class BadPlugin(PizzaAgent):
    def __init__(self) -> None:
        ResilientAgent.__init__(self, instructions="x", plugins=["no_such_plugin_xyz"])


class Misspelled(PizzaAgent):
    def __init__(self) -> None:
        ResilientAgent.__init__(
            self,
            instructions="x",
            middleware=[
                ToolGuard(policies={"place_ordr": "protect"}),
                TurnKeeper(),
                WaitForCaller(tools={"text_confirmaton": {"wait_s": 1.0}}),
            ],
        )
'''


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "pizza.py").write_text(PIZZA, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    yield tmp_path
    import sys

    sys.modules.pop("pizza", None)


def _one_error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ("pizza:BadOption", "wait_s='3' is a str, not a number. Fix: "),
        ("pizza:BadPlugin", "plugin 'no_such_plugin_xyz'"),
    ],
)
def test_a_configuration_error_building_the_agent_is_one_line_exit_2(
    app: Path, agent: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error_line(["lab", "--agent", agent], capsys)
    assert line.startswith(f"resilient-agent lab: error: --agent {agent!r}: ")
    assert expected in line


def test_a_misspelled_module_says_where_it_looked_src_included(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error_line(["lab", "--agent", "piza:PizzaAgent"], capsys)
    assert "no module named 'piza'" in line and "src/" in line


def test_only_matching_nothing_is_said_before_any_tool_runs(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error_line(["lab", "--agent", "pizza:PizzaAgent", "--only", "nomatch"], capsys)
    assert "--only 'nomatch' matches no scenario" in line
    import pizza  # type: ignore[import-not-found]

    assert pizza.SENT == []  # no probe ran the app's tools


def test_unknown_tool_names_in_options_are_listed_with_did_you_mean(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["lab", "--agent", "pizza:Misspelled", "--only", "app_tool/place_order/gap"])
    out = capsys.readouterr().out
    assert (
        "Misspelled: ToolGuard(policies=...) names 'place_ordr', which is not one of its tools: "
        "did you mean 'place_order'?" in out
    )
    assert "WaitForCaller(tools=...) names 'text_confirmaton'" in out
    assert "did you mean 'text_confirmation'?" in out


def test_unmocked_tools_are_named_before_the_run_and_an_erroring_one_gets_its_mock_line(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["lab", "--agent", "pizza:PizzaAgent", "--only", "app_tool/text_confirmation/gap"])
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "run for real" in line]
    assert line.startswith("PizzaAgent: place_order, text_confirmation run for real")
    assert out.index(line) < out.index("tool text_confirmation(")  # before its probe ran it
    assert (
        "PizzaAgent: text_confirmation ran for real and ended in an error; if it has side "
        "effects, add to your --mock file: "
        "MOCKS = {'text_confirmation': lambda phone_number: 'the result'}" in out
    )


def test_the_apps_own_log_lines_stay_out_of_the_lab_output_unless_asked(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger().addHandler(handler := logging.StreamHandler())
    try:
        argv = ["lab", "--agent", "pizza:PizzaAgent", "--only", "app_tool/place_order/gap"]
        main(argv)
        quiet = capsys.readouterr()
        main([*argv, "--app-logs"])
        loud = capsys.readouterr()
    finally:
        logging.getLogger().removeHandler(handler)
    assert "PIZZA-APP-LOG" not in quiet.out + quiet.err
    assert "PIZZA-APP-LOG" in loud.out + loud.err


def test_every_first_party_middleware_imports_from_the_package_and_its_module() -> None:
    import importlib
    import subprocess
    import sys

    import resilient_agent.middleware as package
    from resilient_agent.middleware import ToolGuard, WaitForCaller
    from resilient_agent.middleware.tool_guard import ToolGuard as FromModule

    assert ToolGuard is FromModule
    classes = {type(m).__name__: type(m) for m in package.default_middleware()}
    for name, cls in classes.items():
        assert getattr(package, name) is cls, name
        assert name in package.__all__
    assert (
        WaitForCaller
        is importlib.import_module("resilient_agent.middleware.wait_for_caller").WaitForCaller
    )
    with pytest.raises(AttributeError, match="no attribute 'NoSuch'"):
        package.NoSuch  # noqa: B018
    # lazily: importing the package imports none of them
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, resilient_agent.middleware; "
            "print('resilient_agent.middleware.watchdog' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"


def test_the_readme_mock_file_runs_as_written_its_mock_reading_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    import shutil
    import sys

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "MOCKS" in b]
    shutil.copy(root / "examples" / "own-tools" / "shop.py", tmp_path / "shop.py")
    (tmp_path / "mocks.py").write_text(block, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("shop", None)
    try:
        code = main(
            ["lab", "--agent", "shop:Shop", "--mock", "mocks.py", "--only", "check_order_status"]
        )
    finally:
        sys.modules.pop("shop", None)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tool check_order_status(order_id='A1234') (mocked): windows gap" in out
    # every row passed, the tool_outputs contract included: each call of the tool gave the LLM
    # what the mock returns for order_id='A1234'
    rows = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert rows and all(line.startswith("PASS") for line in rows)


def test_the_report_opens_on_the_apps_own_tools(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = app / "lab.html"
    only = "app_tool/place_order/gap|control/two_turns"
    main(["lab", "--agent", "pizza:PizzaAgent", "--only", only, "--report", str(report)])
    capsys.readouterr()
    html = report.read_text(encoding="utf-8")
    own = html.index("<h2>app_tool/place_order/gap</h2>")
    assert html.index("<h2>Your own tools</h2>") < own < html.index('<table class="summary"')
    assert html.index('<table class="summary"') < html.index("<h2>control/two_turns</h2>")
    assert html.count("<h2>app_tool/place_order/gap</h2>") == 1


def test_an_unconfigured_structlog_of_the_app_stays_quiet_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import structlog

    from resilient_agent.lab.app_logs import app_logs_silenced

    structlog.reset_defaults()
    with app_logs_silenced():
        structlog.get_logger("agent").info("STRUCTLOG-APP-LINE")
    assert "STRUCTLOG-APP-LINE" not in capsys.readouterr().out
    assert not structlog.is_configured()
    structlog.get_logger("agent").info("STRUCTLOG-APP-LINE")
    assert "STRUCTLOG-APP-LINE" in capsys.readouterr().out


def test_two_tools_of_one_name_are_one_line_exit_2(
    app: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (app / "src" / "twice.py").write_text(
        "from resilient_agent import ResilientAgent, end_call_tool\n\n\n"
        "class Twice(ResilientAgent):\n"
        "    def __init__(self) -> None:\n"
        "        super().__init__(instructions='x', tools=[end_call_tool(), end_call_tool()])\n",
        encoding="utf-8",
    )
    line = _one_error_line(["lab", "--agent", "twice:Twice"], capsys)
    assert "its tools cannot be used: duplicate function name: end_call" in line
