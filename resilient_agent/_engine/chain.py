"""The middleware chain: validation, order, and dispatch of the three hook kinds."""

from __future__ import annotations

import asyncio
import difflib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import cached_property
from inspect import CO_VARARGS, CO_VARKEYWORDS
from types import FunctionType, MappingProxyType
from typing import Any, Protocol

from .boundary import Budget, StrayCancellationError, budget_of, guarded_wrap
from .errors import MiddlewareError
from .hooks import (
    API_VERSION,
    HOOKS,
    LIFECYCLE,
    InferenceNext,
    Middleware,
    ToolCallNext,
    UserTurnNext,
)
from .log import get_logger
from .requests import InferenceRequest, ToolCall, UserTurn
from .state import MiddlewareContext, Named, name_of

__all__ = ["ChainDecisions", "MiddlewareChain", "validate_middleware"]

logger = get_logger("chain")

_POSITIONS: Mapping[str, int] = MappingProxyType({"first": 0, "normal": 1, "last": 2})
# what ``setting_up`` is while no middleware sets up (most of a call): one shared empty set
NOBODY_SETTING_UP: AbstractSet[int] = frozenset()
_PREFIXES = ("on_", "decide_", "wrap_")
_MIDDLEWARE_BASES = frozenset(Middleware.__mro__)

ErrorReporter = Callable[[Named | str, str, BaseException, str], None]
"""Told ``(middleware, hook, exception, action)`` when a middleware fails."""


# What each hook is passed, read once: a chain is validated at every agent and every session, and
# inspect.signature is most of what that costs
_HOOK_PARAMETERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {hook: tuple(inspect.signature(getattr(Middleware, hook)).parameters) for hook in HOOKS}
)


def _overridden(mw: Middleware, hook: str) -> bool:
    return getattr(type(mw), hook) is not getattr(Middleware, hook)


def validate_middleware(mw: object) -> Middleware:
    """Check one middleware's class, position, API version and hooks.

    Raises:
        MiddlewareError: Naming the middleware, the hook and the fix.
    """
    if not isinstance(mw, Middleware):
        raise MiddlewareError(
            repr(mw),
            "is not a Middleware",
            fix="pass an instance of a resilient_agent.Middleware subclass or a MiddlewareSpec",
        )
    name = mw.display_name
    if type(mw).position not in _POSITIONS:
        raise MiddlewareError(
            name,
            f"position={type(mw).position!r} is not one of {sorted(_POSITIONS)}",
            fix='set position to "first", "normal" or "last"',
            hook="position",
        )
    if type(mw).api_version != API_VERSION:
        raise MiddlewareError(
            name,
            f"written for middleware API {type(mw).api_version}, this is API {API_VERSION}",
            fix="upgrade the middleware (or resilient-agent) so both speak the same API version",
            hook="api_version",
        )
    # the names dir() would list that look like hooks, in its order: read off the namespaces of
    # the classes above Middleware (dir() lists every attribute of every base, and Middleware's
    # own hook-like names are its hooks)
    named = {
        a
        for klass in type(mw).__mro__
        if klass not in _MIDDLEWARE_BASES
        for a in vars(klass)
        if a.startswith(_PREFIXES)
    }
    for attr in sorted(named):
        if attr in HOOKS:
            continue
        if not callable(getattr(type(mw), attr, None)):
            continue
        close = difflib.get_close_matches(attr, HOOKS, n=1)
        hint = (
            f"rename it to {close[0]!r}"
            if close
            else "rename it so it does not start with on_, decide_ or wrap_"
        )
        raise MiddlewareError(name, f"unknown hook {attr!r}", fix=hint, hook=attr)
    for hook, spec in HOOKS.items():
        # a hook no class above Middleware names is Middleware's own
        if hook in named and _overridden(mw, hook):
            _check_signature(mw, hook, spec.kind)
    budget = getattr(mw, "hook_budget_s", None)
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 600
    ):
        raise MiddlewareError(
            name,
            f"hook_budget_s={budget!r} is not a number of seconds from 0 to 600",
            fix="set hook_budget_s to a positive number of seconds, or None for the default",
            hook="hook_budget_s",
        )
    for hook in LIFECYCLE:
        method = getattr(type(mw), hook)
        if hook != "for_session" and not inspect.iscoroutinefunction(method):
            raise MiddlewareError(
                name, f"{hook} must be 'async def'", fix=f"write 'async def {hook}'", hook=hook
            )
    return mw


def _check_signature(mw: Middleware, hook: str, kind: str) -> None:
    name = mw.display_name
    method = getattr(type(mw), hook)
    is_async = inspect.iscoroutinefunction(method)
    if kind == "decide" and is_async:
        raise MiddlewareError(
            name,
            "decide hooks run synchronously inside livekit's own call and must not be async",
            fix=f"write 'def {hook}(...)' and start a task for any async work",
            hook=hook,
        )
    if kind != "decide" and not is_async:
        raise MiddlewareError(
            name,
            f"{kind} hooks must be 'async def'",
            fix=f"write 'async def {hook}(...)'",
            hook=hook,
        )
    expected = _HOOK_PARAMETERS[hook]
    if _parameter_count(method) != len(expected):
        actual = list(inspect.signature(method).parameters)
        raise MiddlewareError(
            name,
            f"takes ({', '.join(actual)}), the hook passes ({', '.join(expected)})",
            fix=f"declare it as {hook}({', '.join(expected)})",
            hook=hook,
        )


def _parameter_count(method: Callable[..., Any]) -> int:
    """How many parameters ``inspect.signature(method)`` lists, read off a plain function's code.

    Anything else (a function with ``__wrapped__`` or ``__signature__``, a callable object) is
    asked of ``inspect.signature`` itself.
    """
    if (
        type(method) is FunctionType
        and not hasattr(method, "__wrapped__")
        and not hasattr(method, "__signature__")
    ):
        code = method.__code__
        flags = code.co_flags
        return (
            code.co_argcount
            + code.co_kwonlyargcount
            + bool(flags & CO_VARARGS)
            + bool(flags & CO_VARKEYWORDS)
        )
    return len(inspect.signature(method).parameters)


class MiddlewareChain:
    """An ordered, validated, frozen list of middleware and the hooks each one overrides.

    Args:
        middleware: Instances, in the order given; ``position`` then sorts them stably.
        on_error: Told when a notify or decide hook raises.

    Raises:
        MiddlewareError: A middleware is invalid or two share a name.
    """

    def __init__(
        self, middleware: Sequence[Middleware], *, on_error: ErrorReporter | None = None
    ) -> None:
        checked = [validate_middleware(mw) for mw in middleware]
        seen: dict[str, Middleware] = {}
        for mw in checked:
            if mw.display_name in seen:
                raise MiddlewareError(
                    mw.display_name,
                    "appears twice in the chain",
                    fix="remove the duplicate, or give one of them another `name`",
                    hook="name",
                )
            seen[mw.display_name] = mw
        self.middleware: tuple[Middleware, ...] = tuple(
            sorted(checked, key=lambda mw: _POSITIONS[type(mw).position])
        )
        self._on_error = on_error
        self.setting_up: AbstractSet[int] = NOBODY_SETTING_UP
        """``id()`` s of middleware whose ``setup`` is still running: their hooks are skipped."""

    @cached_property
    def _handlers(self) -> dict[str, tuple[Middleware, ...]]:
        # built on first dispatch: an agent's prototype chain (kept only to name and validate
        # its middleware) never dispatches; a hook nobody overrides has no entry, and the
        # bound methods are made per call (a session holds these tables for its whole length)
        handlers: dict[str, tuple[Middleware, ...]] = {}
        # hooks with the same handlers share one tuple (by identity: a middleware may be unhashable)
        shared: dict[tuple[int, ...], tuple[Middleware, ...]] = {}
        for hook in HOOKS:
            found = tuple(mw for mw in self.middleware if _overridden(mw, hook))
            if found:
                handlers[hook] = shared.setdefault(tuple(map(id, found)), found)
        return handlers

    def without(self, removed: Sequence[Middleware]) -> MiddlewareChain:
        """The chain minus ``removed`` (those that raised ``MiddlewareNotUsed``)."""
        return MiddlewareChain(
            [mw for mw in self.middleware if mw not in removed], on_error=self._on_error
        )

    def handles(self, hook: str) -> bool:
        """Whether any middleware overrides ``hook``."""
        return hook in self._handlers

    def report_error(
        self, mw: Named | str, hook: str, exc: BaseException, action: str = "continued_without_it"
    ) -> None:
        """Report a failing middleware: one ``middleware_error`` event and log record."""
        if self._on_error is not None:
            self._on_error(mw, hook, exc, action)
            return
        logger.error(
            "middleware_error", middleware=name_of(mw), hook=hook, action=action, exc_info=exc
        )

    def listeners(self, hook: str) -> tuple[Middleware, ...]:
        """The middleware that override ``hook``, in dispatch order."""
        return self._handlers.get(hook, ())

    async def notify(self, hook: str, ctx: MiddlewareContext, *args: Any) -> None:
        """Run every ``hook`` handler, one after another; a failure or a hang is reported, skipped.

        Each runs as in a session, under its budget, but all in this task: a session runs each
        middleware's notify hooks in a task of its own (:class:`.dispatch.NotifyQueue`).
        """
        for mw in self._handlers.get(hook, ()):
            await Budget(budget_of(mw)).run_notify(mw, hook, ctx, args, self.report_error)

    def decide(self, hook: str, ctx: MiddlewareContext, *args: Any) -> Any:
        """The first answer that is not None, or None.

        A handler that raises, or answers with something that is not the hook's decision type,
        is reported and skipped.
        """
        expected = HOOKS[hook].answer
        for mw in self._handlers.get(hook, ()):
            if id(mw) in self.setting_up:
                continue
            try:
                answer = getattr(mw, hook)(ctx, *args)
            except asyncio.CancelledError:
                # a plain function cannot be cancelled: raised, it would end livekit's task
                stray = StrayCancellationError(f"{hook} raised CancelledError")
                self.report_error(mw, hook, stray)
                continue
            except Exception as exc:
                self.report_error(mw, hook, exc)
                continue
            if answer is None:
                continue
            if expected is not None and not isinstance(answer, expected):
                wrong = TypeError(
                    f"{hook} answered {type(answer).__name__}, not {expected.__name__} or None"
                )
                self.report_error(mw, hook, wrong)
                continue
            return answer
        return None

    async def wrap_tool_call(
        self, ctx: MiddlewareContext, call: ToolCall, innermost: ToolCallNext
    ) -> Any:
        """Run ``innermost`` inside every ``wrap_tool_call``, first middleware outermost."""
        return await self._onion("wrap_tool_call", ctx, innermost)(call)

    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, innermost: UserTurnNext
    ) -> None:
        """Run ``innermost`` inside every ``wrap_user_turn``, first middleware outermost."""
        await self._onion("wrap_user_turn", ctx, innermost)(turn)

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, innermost: InferenceNext
    ) -> Any:
        """Run ``innermost`` inside every ``wrap_llm_request``, first middleware outermost."""
        return await self._onion("wrap_llm_request", ctx, innermost)(request)

    def _onion(
        self, hook: str, ctx: MiddlewareContext, innermost: Callable[[Any], Awaitable[Any]]
    ) -> Callable[[Any], Awaitable[Any]]:
        handlers = self._handlers.get(hook, ())

        def layer(index: int) -> Callable[[Any], Awaitable[Any]]:
            if index == len(handlers):
                return innermost
            mw = handlers[index]
            handler = getattr(mw, hook)
            next_layer = layer(index + 1)

            async def call_layer(request: Any) -> Any:
                if id(mw) in self.setting_up:
                    return await next_layer(request)
                return await guarded_wrap(
                    mw, hook, handler, ctx, request, next_layer, self.report_error
                )

            return call_layer

        return layer(0)


class ChainDecisions(Protocol):
    """What a gate asks of the active chain (the session's ``ChainRun``)."""

    ctx: MiddlewareContext

    def handles(self, hook: str) -> bool:
        """Whether any middleware overrides ``hook``."""
        ...

    def decide(self, hook: str, request: Any) -> Any:
        """The first answer to ``hook`` that is not None, or None."""
        ...
