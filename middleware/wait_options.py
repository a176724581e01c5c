"""WaitForCaller's options: how long a protected speech waits for a speaking caller.

Checked at construction (see :mod:`resilient_agent._engine.options`): each value in range, and every
``max_wait_s`` at least the ``wait_s`` it applies with, whether both are the constructor's, both
a tool's, or one of each.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal, TypedDict, cast

from resilient_agent._engine.options import ItemCheck, OptionChecker

__all__ = ["DEFAULT_MAX_WAIT_S", "PastBound", "WaitOptions", "checked_options", "checked_tools"]

PastBound = Literal["speak", "skip"]
_PAST_BOUND: tuple[PastBound, ...] = ("speak", "skip")
_MAX_WAIT_S = 30.0
DEFAULT_MAX_WAIT_S = 15.0
"""How long a protected speech waits at most for a caller still saying words (unless ``wait_s``
is longer)."""


class WaitOptions(TypedDict, total=False):
    """How long a tool's protected speeches wait for a speaking caller, and what happens then.

    Attributes:
        wait_s: Seconds to wait; 0 lets the speech start over the caller, as livekit does.
        past_bound: ``"speak"`` or ``"skip"`` when the caller is still speaking after ``wait_s``
            (after ``max_wait_s`` when they are still saying words).
        max_wait_s: Seconds to wait at most for a caller still saying words when ``wait_s``
            runs out; at least ``wait_s`` (equal: the wait never extends).
    """

    wait_s: float
    past_bound: PastBound
    max_wait_s: float


def checked_options(
    check: OptionChecker, *, wait_s: Any, past_bound: Any, max_wait_s: Any
) -> WaitOptions:
    """The constructor's options in full (``max_wait_s=None``: the default cap)."""
    wait = check.number("wait_s", wait_s, ge=0.0, le=_MAX_WAIT_S)
    if max_wait_s is None:
        cap = _default_cap(wait)
    else:
        cap = check.number("max_wait_s", max_wait_s, ge=0.0, le=_MAX_WAIT_S)
        _check_cap(check, "max_wait_s", cap, "wait_s", wait)
    return WaitOptions(
        wait_s=wait,
        past_bound=check.choice("past_bound", past_bound, _PAST_BOUND, what="a policy"),
        max_wait_s=cap,
    )


def checked_tools(
    check: OptionChecker, tools: Mapping[str, Any], default: WaitOptions, *, cap_given: bool
) -> tuple[dict[str, WaitOptions], dict[str, WaitOptions]]:
    """Per tool, the options given (checked) and the options in full.

    A tool's own ``max_wait_s`` comes first, then the constructor's when it was given; a tool
    that only sets ``wait_s`` otherwise gets the default cap for it.
    """
    given: dict[str, WaitOptions] = check.per_tool(
        "tools", tools, partial(_checked, check), example="{'end_call': {'wait_s': 5.0}}"
    )
    return given, {
        tool: _resolved(check, tool, default, options, cap_given=cap_given)
        for tool, options in given.items()
    }


def _checked(check: OptionChecker, option: str, options: Any) -> WaitOptions:
    """``options`` as :class:`WaitOptions`: known keys only, each in range."""
    fields: dict[str, ItemCheck[Any]] = {
        "wait_s": partial(check.number, ge=0.0, le=_MAX_WAIT_S),
        "past_bound": partial(check.choice, choices=_PAST_BOUND, what="a policy"),
        "max_wait_s": partial(check.number, ge=0.0, le=_MAX_WAIT_S),
    }
    return cast(WaitOptions, check.fields(option, options, fields))


def _default_cap(wait_s: float) -> float:
    return max(DEFAULT_MAX_WAIT_S, wait_s)


def _check_cap(
    check: OptionChecker, cap_name: str, max_wait_s: float, wait_name: str, wait_s: float
) -> None:
    """Refuse a ``max_wait_s`` below the ``wait_s`` it applies with, naming both."""
    if max_wait_s < wait_s:
        check.fail(
            cap_name,
            max_wait_s,
            f"is below {wait_name}={wait_s:g}",
            fix=f"set {cap_name} to at least {wait_s:g}, or lower {wait_name}",
        )


def _resolved(
    check: OptionChecker, tool: str, default: WaitOptions, given: WaitOptions, *, cap_given: bool
) -> WaitOptions:
    """A tool's options in full: its own, then the constructor's (checked together)."""
    options = WaitOptions(**default)
    options.update(given)
    prefix = f"tools[{tool!r}]."
    wait_name = prefix + "wait_s" if "wait_s" in given else "wait_s"
    if "max_wait_s" in given:
        cap_name = prefix + "max_wait_s"
        _check_cap(check, cap_name, options["max_wait_s"], wait_name, options["wait_s"])
    elif "wait_s" in given:
        if cap_given:
            _check_cap(check, "max_wait_s", options["max_wait_s"], wait_name, options["wait_s"])
        else:
            options["max_wait_s"] = _default_cap(options["wait_s"])
    return options
