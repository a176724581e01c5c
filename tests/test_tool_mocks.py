"""Tool mocks receive the tool's arguments by name, as the docs show them.

livekit's ``mock_tools`` passes a mock the tool's positional arguments: ``lambda order_id:`` on
``async def tool(self, ctx, order_id)`` received the ``RunContext`` as ``order_id`` and
``lambda **arguments:`` received nothing. The lab and ``Scenario(tool_mocks=...)`` call every
mock by name, with the ``RunContext`` only when the mock asks for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import Agent, RunContext, function_tool

from resilient_agent.lab.app_agent import catalog_base
from resilient_agent.lab.app_tools import MockFileError, app_tools, load_mocks
from resilient_agent.lab.catalog.own_tools import build_app_agent, probe_tool, question_scenario
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    run_scenario,
    runner,
)
from resilient_agent.testing.tool_mocks import mock_problem


class Orders(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="x")

    @function_tool
    async def check_order_status(
        self, context: RunContext, order_id: str, rush: bool = False
    ) -> str:
        """Look up an order.

        Args:
            order_id: The order number.
            rush: Whether it is urgent.
        """
        raise ConnectionError("orders.example.com is unreachable")


def _outputs(mock: Callable[..., Any]) -> list[tuple[str, bool]]:
    scenario = Scenario(
        name="mine/mocked",
        family="mine",
        description="A mocked order lookup.",
        agent=lambda base: Orders(),
        utterances=(Utterance(1.0, 2.4, "where is my order", reply_within=6.0),),
        llm=(
            LLMRule(
                when_user_says="order",
                tool_calls=(ToolCallScript("check_order_status", {"order_id": "A1234"}),),
            ),
            LLMRule(after_tool="check_order_status", text="It shipped."),
        ),
        tool_mocks={"check_order_status": mock},
    )
    world, _ = run_scenario(scenario, Orders)
    return [(output, error) for _, _, output, error in world.recorder.tool_outputs]


def _seen_context(ctx: RunContext, order_id: str) -> str:
    return f"{type(ctx).__name__} {order_id}"


async def _async_by_name(order_id: str) -> str:
    return f"async {order_id}"


@pytest.mark.parametrize(
    ("mock", "output"),
    [
        (lambda order_id: f"Order {order_id} shipped.", "Order A1234 shipped."),
        (
            lambda **arguments: f"{sorted(arguments.items())}",
            "[('order_id', 'A1234'), ('rush', False)]",
        ),
        (lambda ctx, order_id: f"{type(ctx).__name__} {order_id}", "RunContext A1234"),
        (
            lambda context, **rest: f"{type(context).__name__} {rest}",
            "RunContext {'order_id': 'A1234', 'rush': False}",
        ),
        (_seen_context, "RunContext A1234"),
        (_async_by_name, "async A1234"),
        (lambda: "no arguments", "no arguments"),
    ],
    ids=["by_name", "kwargs", "ctx_first", "context_and_kwargs", "annotated", "async", "none"],
)
def test_a_mock_receives_the_arguments_by_name_and_the_context_only_when_it_asks(
    mock: Callable[..., Any], output: str
) -> None:
    assert _outputs(mock) == [(output, False)]


def test_a_mock_asking_for_an_argument_the_tool_does_not_take_is_named() -> None:
    problem = mock_problem(lambda orderid: "x", frozenset({"order_id", "rush"}))
    assert problem is not None and "'orderid'" in problem and "order_id, rush" in problem
    assert mock_problem(lambda ctx, order_id: "x", frozenset({"order_id"})) is None
    assert mock_problem(lambda **arguments: "x", frozenset({"order_id"})) is None


SHOP = Path(__file__).resolve().parents[1] / "examples" / "own-tools"


def _shop_scenario() -> tuple[Scenario, type[Agent]]:
    sys.path.insert(0, str(SHOP))
    import shop

    cls = catalog_base(shop.Shop).cls
    mocks = load_mocks(SHOP / "mocks.py")
    (tool,) = [t for t in app_tools(build_app_agent(cls), mocks) if t.name == "check_order_status"]
    assert tool.mock_output == "Order A1234 shipped yesterday."
    window = probe_tool(cls, tool, mocks)
    scenario = question_scenario(
        window, mocks, name="app_tool/check_order_status/x", description="x", onset=6.0
    )
    return scenario, cls


def test_an_own_tool_call_answers_what_its_mock_returns() -> None:
    scenario, cls = _shop_scenario()
    assert scenario.tool_outputs == {"check_order_status": "Order A1234 shipped yesterday."}
    world, outcome = run_scenario(scenario, cls)
    assert outcome.passed, outcome.reasons
    assert [o for _, n, o, _ in world.recorder.tool_outputs if n == "check_order_status"] == [
        "Order A1234 shipped yesterday."
    ]


def test_the_contract_breaks_when_a_mock_is_handed_the_run_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # livekit's own binding, as the lab used it: the mock's order_id is the RunContext
    monkeypatch.setattr(runner, "by_name", lambda agent, mocks: dict(mocks))
    scenario, cls = _shop_scenario()
    _, outcome = run_scenario(scenario, cls)
    assert not outcome.passed
    (reason,) = [r for r in outcome.reasons if r.startswith("tool check_order_status")]
    assert "RunContext object" in reason and "expected 'Order A1234 shipped yesterday.'" in reason


def test_a_mock_file_whose_mock_asks_for_an_unknown_argument_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mocks.py"
    path.write_text("MOCKS = {'check_order_status': lambda order: 'x'}\n", encoding="utf-8")
    sys.path.insert(0, str(SHOP))
    import shop

    with pytest.raises(MockFileError, match=r"MOCKS\['check_order_status'\].*'order'.*order_id"):
        app_tools(build_app_agent(catalog_base(shop.Shop).cls), load_mocks(path))
