"""``resilient-agent lab --agent`` races the app's own tools, found on its class."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
from livekit.agents import Agent, RunContext, function_tool
from livekit.agents.beta.tools import EndCallTool
from livekit.agents.llm.utils import function_arguments_to_pydantic_model

from resilient_agent.lab.app_agent import catalog_base
from resilient_agent.lab.app_tools import (
    MockFileError,
    ToolMocks,
    app_tools,
    example_arguments,
    function_tools,
    load_mocks,
)
from resilient_agent.lab.catalog.own_tools import (
    ToolWindows,
    app_tool_scenarios,
    build_app_agent,
    probe_tool,
    question_span,
    tool_windows,
)
from resilient_agent.lab.cli import main
from resilient_agent.lab.fuzz import fuzz_exit_code, run_fuzz
from resilient_agent.lab.fuzz_own_tools import OwnToolCall, OwnTools, draw_own_tool_call
from resilient_agent.lab.run import AgentUnderTest, LabResult, run_lab

SHOP = Path(__file__).resolve().parents[1] / "examples" / "own-tools"
sys.path.insert(0, str(SHOP))
import shop  # noqa: E402  (the example app, imported from its folder as the lab does)


class Kitchen(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="x", tools=[EndCallTool(), _standalone])

    @function_tool
    async def order_dish(
        self,
        context: RunContext,
        dish: Literal["soup", "salad"],
        guests: int,
        note: str = "none",
    ) -> str:
        """Order a dish.

        Args:
            dish: Which dish.
            guests: For how many.
            note: Anything else.
        """
        return "ordered"


@function_tool
async def _standalone(size: float) -> str:
    """A tool passed in tools=.

    Args:
        size: How big.
    """
    return "ok"


def test_every_tool_is_found_toolsets_flattened_with_arguments_valid_for_its_schema() -> None:
    agent = Kitchen()
    found = {t.name: t for t in app_tools(agent)}

    assert set(found) == {"end_call", "order_dish", "_standalone"}
    assert found["order_dish"].arguments == {"dish": "soup", "guests": 1}
    assert found["_standalone"].arguments == {"size": 1.0}
    for name, tool in function_tools(agent).items():
        if name != "end_call":
            function_arguments_to_pydantic_model(tool).model_validate(found[name].arguments)


def test_example_arguments_follow_refs_unions_and_bounds() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "$defs": {"Size": {"enum": ["small", "large"]}},
        "properties": {
            "size": {"$ref": "#/$defs/Size"},
            "count": {"type": "integer", "minimum": 2},
            "when": {"anyOf": [{"type": "null"}, {"type": "string"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "optional": {"type": "string"},
        },
        "required": ["size", "count", "when", "tags"],
    }

    assert example_arguments(schema) == {
        "size": "small",
        "count": 2,
        "when": "example",
        "tags": ["example"],
    }


def _mock_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mocks.py"
    path.write_text(text)
    return path


def test_a_mock_file_naming_an_unknown_tool_says_which_tools_there_are(tmp_path: Path) -> None:
    mocks = load_mocks(_mock_file(tmp_path, "MOCKS = {'order_dsh': lambda: 'x'}\n"))
    with pytest.raises(MockFileError, match=r"'order_dsh'.*its tools: _standalone, end_call"):
        app_tools(Kitchen(), mocks)


def test_mock_arguments_that_do_not_fit_name_the_field(tmp_path: Path) -> None:
    mocks = load_mocks(_mock_file(tmp_path, "ARGUMENTS = {'order_dish': {'dish': 'pie'}}\n"))
    with pytest.raises(MockFileError, match=r"ARGUMENTS\['order_dish'\].*dish: .*guests: "):
        app_tools(Kitchen(), mocks)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MOCKS = {'a': 1}\n", "MOCKS must map tool names to callables"),
        ("ARGUMENTS = ['a']\n", "ARGUMENTS must map tool names to dicts"),
        ("x = 1\n", "defines neither MOCKS nor ARGUMENTS"),
        ("raise RuntimeError('boom')\n", "failed to run: RuntimeError: boom"),
    ],
)
def test_a_bad_mock_file_is_refused_before_any_call(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(MockFileError, match=message):
        load_mocks(_mock_file(tmp_path, text))


def test_mock_needs_agent_and_a_bad_one_is_a_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lab", "--mock", str(SHOP / "mocks.py")]) == 2
    assert "--mock only applies with --agent" in capsys.readouterr().err
    bad = _mock_file(tmp_path, "MOCKS = {'nope': lambda: 1}\n")
    assert main(["lab", "--agent", "shop:Shop", "--mock", str(bad), "--list"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "'nope', which Shop does not have" in err[0]


def _race_own_tools(cls: type[Agent]) -> tuple[list[ToolWindows], dict[str, LabResult]]:
    mocks = load_mocks(SHOP / "mocks.py")
    windows = [probe_tool(cls, tool, mocks) for tool in app_tools(build_app_agent(cls), mocks)]
    results = run_lab(app_tool_scenarios(windows, mocks), [AgentUnderTest("shop:x", cls)])
    return windows, {r.scenario.name: r for r in results}


@pytest.fixture(scope="module")
def plain_shop() -> tuple[list[ToolWindows], dict[str, LabResult]]:
    return _race_own_tools(shop.PlainShop)


@pytest.fixture(scope="module")
def resilient_shop() -> tuple[list[ToolWindows], dict[str, LabResult]]:
    return _race_own_tools(shop.Shop)


def test_the_probe_finds_each_tools_windows(
    plain_shop: tuple[list[ToolWindows], dict[str, LabResult]],
) -> None:
    windows = {w.tool.name: w for w in plain_shop[0]}

    assert all(w.ran for w in windows.values())
    hold = windows["hold_parcel"]
    assert list(hold.onsets) == ["gap", "speech", "work", "reply"]
    # the hold message is protected and lasts its length at the lab's 15 characters a second
    assert hold.held_s == pytest.approx(
        len("One moment while I put that parcel on hold.") / 15, abs=0.1
    )
    assert windows["end_call"].ends_call and not hold.ends_call
    assert list(windows["end_call"].onsets) == ["gap", "goodbye", "after_goodbye"]
    # the side effect is mocked: the tool's network call never ran, its mock answered
    assert windows["check_order_status"].tool.mocked
    assert windows["check_order_status"].status == "done"


def test_the_plain_agent_version_shows_the_races_on_its_own_tools(
    plain_shop: tuple[list[ToolWindows], dict[str, LabResult]],
) -> None:
    results = plain_shop[1]
    broken = {name for name, r in results.items() if not r.outcome.passed}

    assert {
        "app_tool/hold_parcel/gap",
        "app_tool/hold_parcel/speech",
        "app_tool/end_call/goodbye",
        "app_tool/end_call/after_goodbye",
    } <= broken
    hang_up = results["app_tool/end_call/goodbye"].outcome
    assert hang_up.hung_up and any("hung up although" in r for r in hang_up.reasons)
    assert any(
        "never reached the LLM" in r for r in results["app_tool/hold_parcel/gap"].outcome.reasons
    )


def test_the_resilient_version_passes_every_window_of_every_tool(
    resilient_shop: tuple[list[ToolWindows], dict[str, LabResult]],
) -> None:
    results = resilient_shop[1]

    assert len(results) == 9
    assert all(r.outcome.passed for r in results.values()), {
        n: r.outcome.reasons for n, r in results.items() if not r.outcome.passed
    }
    for name, result in results.items():
        tool = name.split("/")[1]
        assert tool in result.as_json()["tools_run"], name


def test_the_json_of_every_call_lists_the_tools_that_ran(tmp_path: Path) -> None:
    out = tmp_path / "lab.json"
    only = "app_tool/hold_parcel/speech|tool_gap/gap_protected_say$"
    mocks = str(SHOP / "mocks.py")
    code = main(
        [
            "lab",
            "--agent",
            "shop:Shop",
            "--mock",
            mocks,
            "--quiet",
            "--only",
            only,
            "--json",
            str(out),
        ]
    )
    records = {r["scenario"]: r for r in json.loads(out.read_text())["results"]}

    assert code == 0
    assert records["app_tool/hold_parcel/speech"]["tools_run"] == ["hold_parcel"]
    assert records["tool_gap/gap_protected_say"]["tools_run"] == ["book_table"]


def test_a_tool_the_probe_never_reaches_gets_no_scenario() -> None:
    never = ToolWindows(app_tools(Kitchen())[0], False, None, {}, False, None, 0.0, 5.0)
    assert app_tool_scenarios([never], ToolMocks()) == []


def _own(cls: type[Agent], path: str) -> OwnTools:
    mocks = load_mocks(SHOP / "mocks.py")
    return OwnTools(path, tool_windows(catalog_base(cls).cls, mocks), mocks, "mocks.py")


def test_fuzzed_calls_fall_on_the_apps_tools_inside_their_spans() -> None:
    own = _own(shop.Shop, "shop:Shop")
    drawn = [draw_own_tool_call(7, index, own) for index in range(200)]
    calls = [c for c in drawn if c is not None]

    assert 60 < len(calls) < 140  # about half
    assert {c.window.tool.name for c in calls} == {"end_call", "check_order_status", "hold_parcel"}
    for call in calls:
        earliest, latest = question_span(call.window)
        assert earliest <= call.onset <= latest
    # a pure function of (seed, index)
    assert [draw_own_tool_call(7, i, own) for i in range(200)] == drawn


def test_a_fuzzed_call_on_an_own_tool_pastes_and_runs_as_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = _own(shop.PlainShop, "shop:PlainShop")
    hold = next(w for w in own.windows if w.tool.name == "hold_parcel")
    # the caller asks over the protected hold message: a race on plain Agent
    call = OwnToolCall("app_tool/hold_parcel/fuzz-x", hold, hold.onsets["speech"], 1.5, own)
    monkeypatch.chdir(SHOP)
    namespace: dict[str, Any] = {}
    exec(call.source(), namespace)  # prints outcome.reasons

    outcome = namespace["outcome"]
    assert not outcome.passed
    assert any("never reached the LLM" in reason for reason in outcome.reasons)


def test_fuzz_on_an_app_runs_its_tools_and_exits_0_on_the_resilient_version() -> None:
    own = _own(shop.Shop, "shop:Shop")
    agent = AgentUnderTest("shop:Shop", shop.Shop, catalog_cls=catalog_base(shop.Shop).cls)
    seen: list[str] = []

    reports = run_fuzz(10, 0, [agent], own=own, on_call=lambda _a, c: seen.append(c.recipe.name))

    assert fuzz_exit_code(reports) == 0 and reports[0].calls == 10
    assert any(name.startswith("app_tool/") for name in seen)
    assert any(name.startswith("fuzz/") for name in seen)
