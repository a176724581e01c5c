"""Option validators: a bad option is refused at construction, naming the option and the fix.

Every first-party middleware checks its constructor's options with :class:`OptionChecker`, and
third-party middleware can do the same::

    from resilient_agent._engine.options import OptionChecker

    class Guard(Middleware):
        def __init__(self, *, wait_s: float = 2.0, tools: Sequence[str] = ()) -> None:
            check = OptionChecker("Guard")
            self.wait_s = check.number("wait_s", wait_s, ge=0, le=30)
            self.tools = check.sequence("tools", tools, check.text)

Each check returns the value, normalised (an ``int`` given for a number comes back a ``float``),
or raises :class:`OptionError` (a :class:`~resilient_agent.MiddlewareError`) whose message names
the middleware, the option, the value given and the fix. Bools are not numbers, counts are ints
(``2.0`` is refused), a string is not a sequence, and format strings are rendered once with
sample values, so a template that would raise on every call is refused before the call starts.

Checks of nested values (:meth:`OptionChecker.mapping`, :meth:`~OptionChecker.sequence`,
:meth:`~OptionChecker.fields`) take an item check called as ``check(option_path, value)``: any
bound method of the checker fits, with :func:`functools.partial` for its keyword arguments.
"""

from __future__ import annotations

import difflib
import math
import numbers
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from .errors import MiddlewareError

__all__ = ["ItemCheck", "OptionChecker", "OptionError", "close_match"]

T = TypeVar("T")
ItemCheck = Callable[[str, Any], T]
"""Checks one nested value: called with its option path (``"tools['x'].wait_s"``) and value."""

_SHOWN_CHARS = 60


class OptionError(MiddlewareError, ValueError):
    """An option's value is refused; raised by the constructor that got it.

    The message reads ``"ToolGuard: timeouts['x']=0 is out of range. Fix: use a value above 0
    and at most 3600"``.

    Attributes:
        option: The option's path, e.g. ``"timeouts['transfer_call']"`` (also ``hook``).
        value: The value given.
    """

    def __init__(
        self,
        middleware: str,
        option: str,
        value: Any,
        problem: str,
        *,
        fix: str,
        said: str | None = None,
    ):
        said = f"{option}={shown(value)} {problem}" if said is None else said
        super().__init__(middleware, said, fix=fix, hook=option)
        # "ToolGuard: timeouts['x']=0 is out of range": the option path already names the option
        self.args = (f"{middleware}: {said}. Fix: {fix}",)
        self.option = option
        self.value = value


def shown(value: Any) -> str:
    """``repr(value)``, shortened so a big value does not bury the message."""
    text = repr(value)
    if text.startswith("<") and " object at 0x" in text:
        # the default repr: its module path and address say less than the class name
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."


def close_match(word: str, candidates: Collection[str]) -> str | None:
    """The candidate ``word`` was most likely a typo of, if one is close enough."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def _bound(number: float) -> str:
    return f"{number:g}"


def _range_text(ge: float | None, gt: float | None, le: float | None, lt: float | None) -> str:
    if ge is not None and le is not None:
        return f"from {_bound(ge)} to {_bound(le)}"
    parts = []
    if ge is not None:
        parts.append(f"of at least {_bound(ge)}")
    elif gt is not None:
        parts.append(f"above {_bound(gt)}")
    if le is not None:
        parts.append(f"at most {_bound(le)}")
    elif lt is not None:
        parts.append(f"below {_bound(lt)}")
    return " and ".join(parts)


class OptionChecker:
    """Checks one middleware's options; every failure raises :class:`OptionError`.

    Args:
        middleware: The middleware's name, as messages show it.
    """

    def __init__(self, middleware: str) -> None:
        self.middleware = middleware

    def fail(self, option: str, value: Any, problem: str, *, fix: str) -> NoReturn:
        """Refuse ``value``: for checks of your own (across options, say).

        Raises:
            OptionError: Always; the message reads ``option=value problem. Fix: fix``.
        """
        raise OptionError(self.middleware, option, value, problem, fix=fix)

    def number(
        self,
        option: str,
        value: Any,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        lt: float | None = None,
    ) -> float:
        """A real number (int or float, never a bool) within the bounds given.

        With any bound, NaN and infinities are refused.
        """
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            bounds = _range_text(ge, gt, le, lt)
            self.fail(
                option,
                value,
                f"is {_kind(value)}, not a number",
                fix=f"pass a number{' ' + bounds if bounds else ''}",
            )
        number = float(value)
        bounded = any(b is not None for b in (ge, gt, le, lt))
        if bounded and not math.isfinite(number):
            self.fail(
                option,
                value,
                "is not a finite number",
                fix=f"use a value {_range_text(ge, gt, le, lt)}",
            )
        if bounded and (
            (ge is not None and number < ge)
            or (gt is not None and number <= gt)
            or (le is not None and number > le)
            or (lt is not None and number >= lt)
        ):
            self.fail(
                option, value, "is out of range", fix=f"use a value {_range_text(ge, gt, le, lt)}"
            )
        return number

    def count(
        self, option: str, value: Any, *, ge: int | None = None, le: int | None = None
    ) -> int:
        """A whole number (an int; ``True`` and ``2.0`` are refused) within the bounds given."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            example = (
                f"; write {option}={int(value)}"
                if isinstance(value, float) and value.is_integer()
                else ""
            )
            bounds = _range_text(ge, None, le, None)
            self.fail(
                option,
                value,
                f"is {_kind(value)}, not a whole number",
                fix=f"pass an int{' ' + bounds if bounds else ''}{example}",
            )
        whole = int(value)
        if (ge is not None and whole < ge) or (le is not None and whole > le):
            self.fail(
                option,
                value,
                "is out of range",
                fix=f"use a value {_range_text(ge, None, le, None)}",
            )
        return whole

    def flag(self, option: str, value: Any) -> bool:
        """``True`` or ``False``; ``1``, ``"yes"`` and ``None`` are refused."""
        if not isinstance(value, bool):
            self.fail(option, value, f"is {_kind(value)}, not a bool", fix="pass True or False")
        return value

    def choice(
        self, option: str, value: Any, choices: Sequence[T], *, what: str = "an allowed value"
    ) -> T:
        """One of ``choices`` (an enum or a ``Literal``'s values); a typo gets a suggestion.

        Args:
            option: The option's name.
            value: The value given.
            choices: The values allowed.
            what: What a choice is, for the message: ``"... is not a policy"``.
        """
        for allowed in choices:
            # True == 1: a bool is never taken for a number, nor a number for a bool
            if isinstance(value, bool) is isinstance(allowed, bool) and value == allowed:
                return allowed
        listed = ", ".join(repr(c) for c in choices)
        close = close_match(value, [str(c) for c in choices]) if isinstance(value, str) else None
        hint = f"did you mean {close!r}? Use one of {listed}" if close else f"use one of {listed}"
        self.fail(option, value, f"is not {what}", fix=hint)

    def text(self, option: str, value: Any, *, allow_empty: bool = False) -> str:
        """A string; blank ones are refused unless ``allow_empty``."""
        if not isinstance(value, str):
            self.fail(option, value, f"is {_kind(value)}, not a string", fix="pass a string")
        if not allow_empty and not value.strip():
            self.fail(option, value, "must not be empty or blank", fix="pass a non-empty string")
        return value

    def callable(self, option: str, value: Any) -> Callable[..., Any]:
        """Something that can be called (a function, a method, an object with ``__call__``)."""
        if not callable(value):
            self.fail(
                option,
                value,
                f"is {_kind(value)}, which cannot be called",
                fix="pass a function (the function itself, not what calling it returns)",
            )
        return value  # type: ignore[no-any-return]

    def sequence(
        self,
        option: str,
        value: Any,
        item: ItemCheck[T] | None = None,
        *,
        allow_empty: bool = True,
        unordered: bool = False,
        fix: str = "pass a list",
    ) -> list[T]:
        """A list or tuple (not a string or a dict), each item checked by ``item``.

        Args:
            option: The option's name.
            value: The value given.
            item: Checks each item; its option path is ``option[index]``.
            allow_empty: Whether an empty list is accepted.
            unordered: Accept a set or frozenset too (when order does not matter); its items
                are checked in sorted order, so messages do not vary from run to run.
            fix: The fix shown when ``value`` is not a list at all.
        """
        if isinstance(value, (str, bytes)):
            self.fail(
                option, value, f"is {_kind(value)}, not a list", fix=f"write {option}=[{value!r}]"
            )
        if unordered and isinstance(value, (set, frozenset)):
            value = sorted(value, key=repr)
        if not isinstance(value, Sequence):
            self.fail(option, value, f"is {_kind(value)}, not a list", fix=fix)
        if not allow_empty and not value:
            self.fail(option, value, "is empty", fix="pass at least one item")
        if item is None:
            return list(value)
        return [item(f"{option}[{index}]", element) for index, element in enumerate(value)]

    def mapping(
        self,
        option: str,
        value: Any,
        item: ItemCheck[T],
        *,
        keys: str = "key",
        example: str = "{'name': ...}",
    ) -> dict[str, T]:
        """A dict with non-empty string keys, each value checked by ``item``.

        Args:
            option: The option's name.
            value: The value given.
            item: Checks each value; its option path is ``option[key]``.
            keys: What the keys are, for messages (``"tool name"``).
            example: A good value, shown in the fix when ``value`` is not a dict.
        """
        if not isinstance(value, Mapping):
            self.fail(
                option,
                value,
                f"is {_kind(value)}, not a dict",
                fix=f"pass a dict of {keys} to value, e.g. {option}={example}",
            )
        checked: dict[str, T] = {}
        for key, element in value.items():
            if not isinstance(key, str) or not key.strip():
                self.fail(
                    option,
                    value,
                    f"has the key {key!r}, and each key is a {keys}",
                    fix=f"use non-empty strings ({keys}s) as keys",
                )
            checked[key] = item(f"{option}[{key!r}]", element)
        return checked

    def per_tool(
        self, option: str, value: Any, item: ItemCheck[T], *, example: str = "{'name': ...}"
    ) -> dict[str, T]:
        """A dict of tool name to a value checked by ``item`` (see :meth:`mapping`).

        Tool names cannot be checked here (tools can be added after the agent is built):
        return them from ``Middleware.option_tool_names()`` and the agent warns, when the
        session starts, about the ones it does not have.
        """
        return self.mapping(option, value, item, keys="tool name", example=example)

    def fields(
        self, option: str, value: Any, fields: Mapping[str, ItemCheck[Any]]
    ) -> dict[str, Any]:
        """A dict shaped like a ``TypedDict`` with optional keys: each key one of ``fields``.

        An unknown key is refused, with the closest known one as a suggestion. Each value is
        checked by its field's check, with the option path ``option.key``.
        """
        if not isinstance(value, Mapping):
            self.fail(
                option,
                value,
                f"is {_kind(value)}, not a dict",
                fix=f"pass a dict with any of the keys {', '.join(fields)}",
            )
        checked: dict[str, Any] = {}
        for key, element in value.items():
            check = fields.get(key) if isinstance(key, str) else None
            if check is None:
                close = close_match(key, list(fields)) if isinstance(key, str) else None
                hint = f"did you mean {close!r}? " if close else ""
                raise OptionError(
                    self.middleware,
                    f"{option}.{key}",
                    element,
                    "is not an option",
                    fix=f"{hint}Use only {', '.join(fields)}",
                    said=f"{option}.{key} is not an option (given {shown(element)})",
                )
            checked[key] = check(f"{option}.{key}", element)
        return checked

    def format_string(
        self,
        option: str,
        value: Any,
        sample: Mapping[str, Any],
        *,
        required: Collection[str] = (),
        example: str | None = None,
    ) -> str:
        """A ``str.format`` template that renders with ``sample`` and uses every ``required``.

        The template is rendered once, here, with the sample values, so a bad field, conversion
        or format spec fails at construction and not each time the template is used.

        Args:
            option: The option's name.
            value: The template given.
            sample: One sample value per field the template may use.
            required: Fields the template must use.
            example: A good template, shown in the fix.
        """
        template = self.text(option, value, allow_empty=not required)
        allowed = ", ".join(f"{{{name}}}" for name in sample)
        fix = f'write it like "{example}"' if example else f"use only the fields {allowed}"
        try:
            used = {
                _field_root(name) for _, name, _, _ in string.Formatter().parse(template) if name
            }
            template.format(**sample)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            self.fail(
                option,
                value,
                f"does not render with the fields {allowed} ({type(exc).__name__}: {exc})",
                fix=fix,
            )
        missing = [name for name in required if name not in used]
        if missing:
            needed = ", ".join(f"{{{name}}}" for name in missing)
            self.fail(option, value, f"must use {needed} (it may use {allowed})", fix=fix)
        return template


def _field_root(field: str) -> str:
    for separator in (".", "["):
        field = field.split(separator, 1)[0]
    return field
