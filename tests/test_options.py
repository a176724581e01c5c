"""Every option is checked at construction; tool-name typos are warned about at session start.

The tables run each bad input through the public constructor it belongs to and assert that it is
refused there with a message naming the option, the value given and the fix; the good inputs
(every value the docs and the template show) must all be accepted.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import RunContext, function_tool
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.hangup import ConditionalHangup
from resilient_agent.middleware.tool_guard import ToolGuard
from resilient_agent.middleware.turn_keeper import TurnKeeper
from resilient_agent.middleware.wait_for_caller import WaitForCaller
from resilient_agent.middleware.watchdog import Watchdog
from structlog.testing import capture_logs

from resilient_agent import (
    Middleware,
    MiddlewareError,
    MiddlewareSpec,
    OptionChecker,
    OptionError,
    ResilientAgent,
    UnknownToolEvent,
    end_call_tool,
)
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

# the example plugin is a distribution of its own (.ci/run installs it for the plugin tests); this
# test needs only its class, so a fresh `pip install -e '.[dev]'` finds it in the checkout
sys.path.append(str(Path(__file__).parents[1] / "examples/resilient-agent-example-plugin/src"))
from resilient_agent_example_plugin import SpeakingGuard

Build = Callable[[], object]


def _agent(**kwargs: Any) -> ResilientAgent:
    return ResilientAgent(instructions="x", **kwargs)


def _hang_up(**kwargs: Any) -> bool:
    return _agent(middleware=[]).hang_up_after_farewell(**kwargs)


# (build, option named in the message, value as the message shows it)
BAD: list[Any] = [
    # TurnKeeper
    pytest.param(lambda: TurnKeeper(merge=1), "merge", "1", id="tk-merge-int"),
    pytest.param(lambda: TurnKeeper(merge="yes"), "merge", "'yes'", id="tk-merge-str"),
    pytest.param(
        lambda: TurnKeeper(recover_withheld_audio=None),
        "recover_withheld_audio",
        "None",
        id="tk-rwa",
    ),
    pytest.param(
        lambda: TurnKeeper(keep_text_input="false"), "keep_text_input", "'false'", id="tk-kti-str"
    ),
    pytest.param(lambda: TurnKeeper(max_fragments=2.0), "max_fragments", "2.0", id="tk-mf-float"),
    pytest.param(lambda: TurnKeeper(max_fragments=True), "max_fragments", "True", id="tk-mf-bool"),
    pytest.param(lambda: TurnKeeper(max_fragments="8"), "max_fragments", "'8'", id="tk-mf-str"),
    pytest.param(lambda: TurnKeeper(max_fragments=0), "max_fragments", "0", id="tk-mf-range"),
    pytest.param(lambda: TurnKeeper(max_age_s=True), "max_age_s", "True", id="tk-age-bool"),
    pytest.param(lambda: TurnKeeper(max_age_s=math.nan), "max_age_s", "nan", id="tk-age-nan"),
    pytest.param(lambda: TurnKeeper(keep_audio_s=math.inf), "keep_audio_s", "inf", id="tk-ka-inf"),
    pytest.param(
        lambda: TurnKeeper(recovery_timeout_s="2"), "recovery_timeout_s", "'2'", id="tk-rt-str"
    ),
    pytest.param(
        lambda: TurnKeeper(merge_format="{fragments!z}"),
        "merge_format",
        "'{fragments!z}'",
        id="tk-format-conversion",
    ),
    pytest.param(
        lambda: TurnKeeper(merge_format="{turn}"), "merge_format", "'{turn}'", id="tk-format-req"
    ),
    pytest.param(
        lambda: TurnKeeper(merge_format="{fragments} {caller}"),
        "merge_format",
        "'{fragments} {caller}'",
        id="tk-format-field",
    ),
    pytest.param(
        lambda: TurnKeeper(merge_format="{fragments:>>>}"),
        "merge_format",
        "'{fragments:>>>}'",
        id="tk-format-spec",
    ),
    pytest.param(
        lambda: TurnKeeper(merge_format="{fragments.upper()}"),
        "merge_format",
        "'{fragments.upper()}'",
        id="tk-format-attribute",
    ),
    pytest.param(
        lambda: TurnKeeper(merge_format=None), "merge_format", "None", id="tk-format-none"
    ),
    # Watchdog
    pytest.param(lambda: Watchdog(quiet_s=True), "quiet_s", "True", id="wd-quiet-bool"),
    pytest.param(lambda: Watchdog(quiet_s="2"), "quiet_s", "'2'", id="wd-quiet-str"),
    pytest.param(lambda: Watchdog(quiet_s=None), "quiet_s", "None", id="wd-quiet-none"),
    pytest.param(lambda: Watchdog(quiet_s=0.1), "quiet_s", "0.1", id="wd-quiet-range"),
    pytest.param(lambda: Watchdog(speech_wait_s=[3]), "speech_wait_s", "[3]", id="wd-sw-list"),
    pytest.param(lambda: Watchdog(thinking_s=math.nan), "thinking_s", "nan", id="wd-think-nan"),
    pytest.param(
        lambda: Watchdog(interrupted_done_s=5.0), "interrupted_done_s", "5.0", id="wd-idone-range"
    ),
    pytest.param(
        lambda: Watchdog(escalate_after_s=-1), "escalate_after_s", "-1", id="wd-escalate-neg"
    ),
    pytest.param(
        lambda: Watchdog(max_recoveries=5.0), "max_recoveries", "5.0", id="wd-recoveries-float"
    ),
    pytest.param(
        lambda: Watchdog(max_recoveries=False), "max_recoveries", "False", id="wd-recoveries-bool"
    ),
    pytest.param(lambda: Watchdog(floor_rms="loud"), "floor_rms", "'loud'", id="wd-floor-str"),
    pytest.param(lambda: Watchdog(check_every_s=0), "check_every_s", "0", id="wd-check-zero"),
    pytest.param(
        lambda: Watchdog(quiet_s=1.0, check_every_s=1.0), "check_every_s", "1.0", id="wd-check-gap"
    ),
    # ToolGuard
    pytest.param(
        lambda: ToolGuard(policies=["transfer_call"]),
        "policies",
        "['transfer_call']",
        id="tg-policies-list",
    ),
    pytest.param(lambda: ToolGuard(policies="protect"), "policies", "'protect'", id="tg-pol-str"),
    pytest.param(
        lambda: ToolGuard(policies={"transfer_call": "block"}),
        "policies['transfer_call']",
        "'block'",
        id="tg-policy-unknown",
    ),
    pytest.param(
        lambda: ToolGuard(policies={"transfer_call": "yeild_to_user"}),
        "policies['transfer_call']",
        "'yeild_to_user'",
        id="tg-policy-typo",
    ),
    pytest.param(lambda: ToolGuard(policies={3: "protect"}), "policies", "{3: ", id="tg-key-int"),
    pytest.param(
        lambda: ToolGuard(policies={"transfer_call": None}),
        "policies['transfer_call']",
        "None",
        id="tg-policy-none",
    ),
    pytest.param(
        lambda: ToolGuard(timeouts={"lookup": "10"}), "timeouts['lookup']", "'10'", id="tg-to-str"
    ),
    pytest.param(
        lambda: ToolGuard(timeouts={"lookup": True}), "timeouts['lookup']", "True", id="tg-to-bool"
    ),
    pytest.param(
        lambda: ToolGuard(timeouts={"lookup": 0}), "timeouts['lookup']", "0", id="tg-to-zero"
    ),
    pytest.param(
        lambda: ToolGuard(timeouts={"lookup": math.inf}),
        "timeouts['lookup']",
        "inf",
        id="tg-to-inf",
    ),
    pytest.param(
        lambda: ToolGuard(timeouts=[("lookup", 10)]),
        "timeouts",
        "[('lookup', 10)]",
        id="tg-to-pairs",
    ),
    pytest.param(lambda: ToolGuard(timeouts=10), "timeouts", "10", id="tg-to-number"),
    # WaitForCaller
    pytest.param(lambda: WaitForCaller(wait_s=True), "wait_s", "True", id="wfc-wait-bool"),
    pytest.param(lambda: WaitForCaller(wait_s="3"), "wait_s", "'3'", id="wfc-wait-str"),
    pytest.param(lambda: WaitForCaller(wait_s=-1), "wait_s", "-1", id="wfc-wait-neg"),
    pytest.param(lambda: WaitForCaller(past_bound="wait"), "past_bound", "'wait'", id="wfc-pb"),
    pytest.param(lambda: WaitForCaller(past_bound=None), "past_bound", "None", id="wfc-pb-none"),
    pytest.param(lambda: WaitForCaller(tools=["end_call"]), "tools", "['end_call']", id="wfc-list"),
    pytest.param(
        lambda: WaitForCaller(tools={"end_call": {"wait": 2.0}}),
        "tools['end_call'].wait",
        "2.0",
        id="wfc-tool-key-typo",
    ),
    pytest.param(
        lambda: WaitForCaller(tools={"end_call": {"wait_s": "5"}}),
        "tools['end_call'].wait_s",
        "'5'",
        id="wfc-tool-wait-str",
    ),
    pytest.param(
        lambda: WaitForCaller(tools={"end_call": 5.0}),
        "tools['end_call']",
        "5.0",
        id="wfc-tool-num",
    ),
    pytest.param(
        lambda: WaitForCaller(tools={"end_call": {"past_bound": "skipp"}}),
        "tools['end_call'].past_bound",
        "'skipp'",
        id="wfc-tool-pb-typo",
    ),
    # ConditionalHangup
    pytest.param(lambda: ConditionalHangup(tail_pad_s=True), "tail_pad_s", "True", id="ch-bool"),
    pytest.param(lambda: ConditionalHangup(tail_pad_s="0.3"), "tail_pad_s", "'0.3'", id="ch-str"),
    pytest.param(lambda: ConditionalHangup(tail_pad_s=-1), "tail_pad_s", "-1", id="ch-neg"),
    # ResilientAgent(middleware=..., plugins=...)
    pytest.param(lambda: _agent(middleware="ToolGuard"), "middleware", "'ToolGuard'", id="ra-str"),
    pytest.param(lambda: _agent(middleware=ToolGuard()), "middleware", "ToolGuard", id="ra-one"),
    pytest.param(
        lambda: _agent(middleware=MiddlewareSpec(ToolGuard)),
        "middleware",
        "ToolGuard",
        id="ra-spec",
    ),
    pytest.param(lambda: _agent(middleware=ToolGuard), "middleware", "ToolGuard", id="ra-class"),
    pytest.param(
        lambda: _agent(middleware=[ToolGuard]), "middleware[0]", "ToolGuard", id="ra-class-in-list"
    ),
    pytest.param(
        lambda: _agent(middleware=["ToolGuard"]),
        "middleware[0]",
        "'ToolGuard'",
        id="ra-name-in-list",
    ),
    pytest.param(lambda: _agent(middleware=[None]), "middleware[0]", "None", id="ra-none-in-list"),
    pytest.param(
        lambda: _agent(middleware={"guard": ToolGuard()}), "middleware", "{'guard'", id="ra-dict"
    ),
    pytest.param(lambda: _agent(middleware=5), "middleware", "5", id="ra-number"),
    pytest.param(
        lambda: _agent(plugins="speaking_guard"), "plugins", "'speaking_guard'", id="ra-plugins-str"
    ),
    pytest.param(lambda: _agent(plugins=5), "plugins", "5", id="ra-plugins-number"),
    pytest.param(lambda: _agent(plugins=[ToolGuard()]), "plugins", "ToolGuard", id="ra-plugin-obj"),
    pytest.param(lambda: _agent(tool_error_message=3), "tool_error_message", "3", id="ra-tem-int"),
    pytest.param(
        lambda: _agent(tool_error_message="{tool} failed: {error}"),
        "tool_error_message",
        "'{tool} failed: {error}'",
        id="ra-tem-field",
    ),
    # MiddlewareSpec
    pytest.param(lambda: MiddlewareSpec("ToolGuard"), "cls", "'ToolGuard'", id="spec-name"),
    pytest.param(lambda: MiddlewareSpec(ToolGuard()), "cls", "ToolGuard", id="spec-instance"),
    pytest.param(
        lambda: MiddlewareSpec(ToolGuard, polices={}), "options", "'polices'", id="spec-option-typo"
    ),
    pytest.param(
        lambda: _agent(middleware=[MiddlewareSpec(ToolGuard, timeouts={"lookup": "5"})]),
        "timeouts['lookup']",
        "'5'",
        id="spec-value-type",
    ),
    pytest.param(
        lambda: _agent(middleware=[MiddlewareSpec(Watchdog, max_recoveries=2.5)]),
        "max_recoveries",
        "2.5",
        id="spec-count-float",
    ),
    # end_call_tool(...)
    pytest.param(lambda: end_call_tool(farewell=""), "farewell", "''", id="ect-farewell-empty"),
    pytest.param(lambda: end_call_tool(farewell=None), "farewell", "None", id="ect-farewell-none"),
    pytest.param(lambda: end_call_tool(delete_room="yes"), "delete_room", "'yes'", id="ect-dr"),
    pytest.param(
        lambda: end_call_tool(require_caller_request=1), "require_caller_request", "1", id="ect-rcr"
    ),
    pytest.param(lambda: end_call_tool(name=""), "name", "''", id="ect-name"),
    pytest.param(lambda: end_call_tool(name="end call"), "name", "'end call'", id="ect-name-space"),
    pytest.param(lambda: end_call_tool(description=None), "description", "None", id="ect-desc"),
    # hang_up_after_farewell(...)
    pytest.param(lambda: _hang_up(farewell=3), "farewell", "3", id="hup-farewell-int"),
    pytest.param(lambda: _hang_up(farewell="  "), "farewell", "'  '", id="hup-farewell-blank"),
    pytest.param(lambda: _hang_up(delete_room="no"), "delete_room", "'no'", id="hup-dr"),
    pytest.param(
        lambda: _hang_up(allow_interruptions=None), "allow_interruptions", "None", id="hup-ai"
    ),
]


@pytest.mark.parametrize(("build", "option", "shown"), BAD)
def test_a_bad_option_is_refused_at_construction_naming_it(
    build: Build, option: str, shown: str
) -> None:
    with pytest.raises(MiddlewareError) as err:
        build()
    message = str(err.value)
    assert option in message, message
    assert shown in message, message
    assert "Fix: " in message and not message.endswith("Fix: "), message


def test_the_bad_input_table_is_at_least_fifty_long() -> None:
    assert len(BAD) >= 50


def _all_documented_values() -> list[Build]:
    return [
        TurnKeeper,
        lambda: TurnKeeper(merge_format="(said while you were speaking: {fragments}) {turn}"),
        lambda: TurnKeeper(recover_withheld_audio=False),
        lambda: TurnKeeper(
            merge=True,
            recover_withheld_audio=True,
            max_fragments=8,
            max_age_s=60.0,
            keep_audio_s=20.0,
            recovery_timeout_s=2.0,
            keep_text_input=True,
            merge_format="{fragments} {turn}",
        ),
        lambda: TurnKeeper(keep_text_input=False),
        lambda: TurnKeeper(merge_format="{fragments}", max_fragments=100, max_age_s=1),
        lambda: TurnKeeper(merge_format="[{fragments!s:>3}] {turn}"),
        Watchdog,
        lambda: Watchdog(
            quiet_s=2.0,
            speech_wait_s=3.0,
            thinking_s=6.0,
            interrupted_done_s=1.0,
            escalate_after_s=1.0,
            max_recoveries=5,
            floor_rms=300.0,
            check_every_s=0.25,
        ),
        lambda: Watchdog(quiet_s=1, thinking_s=120, max_recoveries=100, floor_rms=1),
        ToolGuard,
        lambda: ToolGuard(
            policies={
                "transfer_call": "yield_to_user",
                "read_terms": "protect",
                "check_stock": "allow",
            },
            timeouts={"crm_lookup": 8.0},
        ),
        lambda: ToolGuard(policies={"lookup": "cancel", "book": "guard"}, timeouts={"x": 3600}),
        lambda: ToolGuard(policies={}, timeouts={}),
        WaitForCaller,
        lambda: WaitForCaller(
            wait_s=3.0,
            past_bound="speak",
            tools={
                "end_call": {"wait_s": 5.0},
                "read_terms": {"past_bound": "skip"},
                "alarm": {"wait_s": 0},
            },
        ),
        lambda: WaitForCaller(tools={"book_table": {"wait_s": 0}}),
        lambda: WaitForCaller(wait_s=30, past_bound="skip"),
        ConditionalHangup,
        lambda: ConditionalHangup(tail_pad_s=0),
        lambda: ConditionalHangup(tail_pad_s=10),
        lambda: _agent(),
        lambda: _agent(middleware=[]),
        lambda: _agent(middleware=()),
        lambda: _agent(middleware=default_middleware()),
        lambda: _agent(middleware=[MiddlewareSpec(Watchdog, quiet_s=3.0), ToolGuard()]),
        lambda: _agent(middleware=[], plugins=None),
        lambda: _agent(middleware=[], plugins=["speaking_guard"]),
        lambda: MiddlewareSpec(ToolGuard, policies={"transfer_call": "protect"}).build(),
        lambda: _agent(middleware=[], tool_error_message="{tool} did not work."),
        lambda: _agent(middleware=[], tool_error_message="Sorry, that did not work."),
        lambda: end_call_tool(),
        lambda: end_call_tool(farewell="Thanks for calling, goodbye!", delete_room=True),
        lambda: end_call_tool(require_caller_request=True, name="hang_up", description="Hang up."),
    ]


@pytest.mark.parametrize("build", _all_documented_values())
@pytest.mark.usefixtures("example_plugin")  # plugins=["speaking_guard"] is among the values
def test_every_documented_value_is_accepted(build: Build) -> None:
    build()


# -- the validators themselves ----------------------------------------------------------------
def test_numbers_come_back_as_floats_and_counts_as_ints() -> None:
    check = OptionChecker("Mine")
    assert check.number("x", 2, ge=0) == 2.0 and isinstance(check.number("x", 2), float)
    assert check.count("n", 3, ge=1, le=5) == 3
    assert check.number("x", math.inf) == math.inf  # no bound: no finiteness required
    assert check.choice("p", "b", ("a", "b")) == "b"
    assert check.sequence("t", ("a", "b"), check.text) == ["a", "b"]
    assert check.sequence("t", {"b", "a"}, check.text, unordered=True) == ["a", "b"]
    with pytest.raises(OptionError, match=r"t=\{'a'\} is a set, not a list"):
        check.sequence("t", {"a"})


def test_a_bool_is_never_taken_for_a_number_nor_a_number_for_a_bool() -> None:
    check = OptionChecker("Mine")
    with pytest.raises(OptionError, match=r"p=1 is not an allowed value"):
        check.choice("p", 1, (True, False))
    with pytest.raises(OptionError, match=r"p=True is not an allowed value"):
        check.choice("p", True, (1, 2))


def test_the_error_carries_the_option_and_the_value_and_is_a_value_error() -> None:
    with pytest.raises(ValueError) as err:
        OptionChecker("Mine").count("retries", 2.0, ge=0, le=9)
    error = err.value
    assert isinstance(error, OptionError) and isinstance(error, MiddlewareError)
    assert (error.middleware, error.option, error.value, error.hook) == (
        "Mine",
        "retries",
        2.0,
        "retries",
    )
    assert str(error) == (
        "Mine: retries=2.0 is a float, not a whole number. "
        "Fix: pass an int from 0 to 9; write retries=2"
    )


def test_unknown_keys_and_choices_get_the_closest_suggestion() -> None:
    check = OptionChecker("Mine")
    fields = {"wait_s": partial(check.number, ge=0), "mode": check.text}
    with pytest.raises(OptionError) as err:
        check.fields("per['x']", {"wiat_s": 1}, fields)
    assert str(err.value) == (
        "Mine: per['x'].wiat_s is not an option (given 1). "
        "Fix: did you mean 'wait_s'? Use only wait_s, mode"
    )
    with pytest.raises(OptionError, match=r"did you mean 'protect'\?"):
        check.choice("policy", "protcet", ("guard", "protect"))


def test_a_format_string_is_rendered_once_with_sample_values() -> None:
    check = OptionChecker("Mine")
    sample = {"tool": "book_table"}
    assert (
        check.format_string("msg", "{tool} failed", sample, required=("tool",)) == "{tool} failed"
    )
    for bad in ("{tool!z}", "{tool} {other}", "{}", "{tool", "{tool:d}"):
        with pytest.raises(OptionError, match="msg="):
            check.format_string("msg", bad, sample)
    with pytest.raises(OptionError, match=r"must use \{tool\}"):
        check.format_string("msg", "failed", sample, required=("tool",))


# -- tool names the agent does not have: warned about when the session starts -----------------
class _Booking(ResilientAgent):
    """The lab's booking agent (``book_table``) with an end-call tool."""

    def __init__(self, *, middleware: list[Middleware | MiddlewareSpec]) -> None:
        super().__init__(instructions="x", middleware=middleware, tools=[end_call_tool()])

    @function_tool
    async def book_table(self, ctx: RunContext[None], time: str) -> str:
        """Book a table.

        Args:
            time: When the table is wanted.
        """
        return f"Table booked for {time}."


WARNED: list[Any] = [
    pytest.param(
        ToolGuard(policies={"bok_table": "protect"}), "policies", "bok_table", "book_table", id="tg"
    ),
    pytest.param(
        ToolGuard(timeouts={"crm_lookup": 8.0}), "timeouts", "crm_lookup", None, id="tg-timeouts"
    ),
    pytest.param(
        WaitForCaller(tools={"end_cal": {"wait_s": 5.0}}), "tools", "end_cal", "end_call", id="wfc"
    ),
    # a third-party middleware: the example plugin names its tools the same way
    pytest.param(
        SpeakingGuard(tools=["end_call", "bok_table"]),
        "tools",
        "bok_table",
        "book_table",
        id="plugin",
    ),
]


def _run_with(mw: Middleware) -> tuple[ResilientAgent, list[UnknownToolEvent], list[Any]]:
    seen: list[UnknownToolEvent] = []

    def build(base: type[Any]) -> Any:
        agent = _Booking(middleware=[mw])
        agent.events.on("unknown_tool", seen.append)
        return agent

    scenario = Scenario(
        name="t/unknown_tool",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.8, "please book a table for eight"),),
        llm=(
            LLMRule(
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
        ),
        duration=8.0,
    )
    with capture_logs() as logs:
        world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons  # a warning, not a failure: the call goes on
    assert isinstance(world.agent, ResilientAgent)
    return world.agent, seen, logs


@pytest.mark.parametrize(("mw", "option", "tool", "close"), WARNED)
def test_a_tool_name_the_agent_lacks_is_warned_about_by_name_when_the_session_starts(
    mw: Middleware, option: str, tool: str, close: str | None
) -> None:
    agent, seen, logs = _run_with(mw)
    assert [(e.middleware, e.option, e.tool, e.did_you_mean) for e in seen] == [
        (mw.display_name, option, tool, close)
    ]
    (warning,) = [r for r in logs if r.get("event") == "unknown_tool"]
    assert warning["log_level"] == "warning" and warning["tool"] == tool
    assert (f"did you mean {close!r}?" in warning["fix"]) is (close is not None)
    assert agent.call_report is not None
    assert agent.call_report.unknown_tools == [f"{mw.display_name}.{option}[{tool!r}]"]


def test_tool_names_the_agent_has_are_not_warned_about() -> None:
    guard = ToolGuard(policies={"book_table": "protect", "end_call": "allow"})
    agent, seen, logs = _run_with(guard)
    assert seen == [] and not [r for r in logs if r.get("event") == "unknown_tool"]
    assert agent.call_report is not None and agent.call_report.unknown_tools == []


def test_a_failing_option_tool_names_costs_only_the_check() -> None:
    class Broken(Middleware):
        def option_tool_names(self) -> dict[str, list[str]]:
            raise RuntimeError("oops")

    agent, seen, _ = _run_with(Broken())
    assert seen == []
    assert agent.call_report is not None
    assert agent.call_report.middleware_errors == ["Broken.option_tool_names"]
