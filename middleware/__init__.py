"""First-party middleware, imported as ``resilient_agent.middleware``.

Every first-party middleware class is importable from here
(``from resilient_agent.middleware import ToolGuard, WaitForCaller``), as from its own module
(``resilient_agent.middleware.tool_guard``); each module is imported on first use, so importing
the package stays cheap.

This folder is installed as ``resilient_agent.middleware`` (``resilient_agent/middleware`` is a
link to it; see pyproject.toml); never import it as a bare top-level ``middleware`` package (that
name is taken on PyPI and by many apps).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from resilient_agent import Middleware, MiddlewareSpec

    from .context_integrity import ContextIntegrity
    from .hangup import ConditionalHangup
    from .llm_fallback import LlmFallback
    from .realtime_input import RealtimeInputHold
    from .realtime_reply import RealtimeReplyWatch
    from .silent_reply import SilentReply
    from .silent_turn import SilentTurnGuard
    from .stt_recovery import SttRecovery
    from .tool_guard import ToolGuard, ToolPolicy
    from .turn_keeper import TurnKeeper
    from .wait_for_caller import WaitForCaller
    from .wait_options import WaitOptions
    from .watchdog import Watchdog

# name -> the submodule defining it, imported when the name is first asked for
_EXPORTS: Mapping[str, str] = MappingProxyType(
    {
        "ConditionalHangup": "hangup",
        "ContextIntegrity": "context_integrity",
        "LlmFallback": "llm_fallback",
        "RealtimeInputHold": "realtime_input",
        "RealtimeReplyWatch": "realtime_reply",
        "SilentReply": "silent_reply",
        "SilentTurnGuard": "silent_turn",
        "SttRecovery": "stt_recovery",
        "ToolGuard": "tool_guard",
        "ToolPolicy": "tool_guard",
        "TurnKeeper": "turn_keeper",
        "WaitForCaller": "wait_for_caller",
        "WaitOptions": "wait_options",
        "Watchdog": "watchdog",
    }
)

__all__ = [
    "ConditionalHangup",
    "ContextIntegrity",
    "LlmFallback",
    "RealtimeInputHold",
    "RealtimeReplyWatch",
    "SilentReply",
    "SilentTurnGuard",
    "SttRecovery",
    "ToolGuard",
    "ToolPolicy",
    "TurnKeeper",
    "WaitForCaller",
    "WaitOptions",
    "Watchdog",
    "default_middleware",
    "default_middleware_specs",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def default_middleware() -> list[Middleware]:
    """New instances of the middleware ``ResilientAgent`` runs by default, in order.

    To compose a chain: ``[MyGuard(), *default_middleware()]``. Each instance is the live one in
    every session of the agent it is given to (see ``resilient_agent._engine.live``).
    """
    return [spec.build() for spec in default_middleware_specs()]


def default_middleware_specs() -> list[MiddlewareSpec]:
    """The default middleware as specs: every session gets its own instances."""
    from resilient_agent import MiddlewareSpec

    from .context_integrity import ContextIntegrity
    from .hangup import ConditionalHangup
    from .llm_fallback import LlmFallback
    from .realtime_input import RealtimeInputHold
    from .realtime_reply import RealtimeReplyWatch
    from .silent_reply import SilentReply
    from .silent_turn import SilentTurnGuard
    from .stt_recovery import SttRecovery
    from .tool_guard import ToolGuard
    from .turn_keeper import TurnKeeper
    from .wait_for_caller import WaitForCaller
    from .watchdog import Watchdog

    return [
        MiddlewareSpec(ToolGuard),
        MiddlewareSpec(TurnKeeper),
        MiddlewareSpec(WaitForCaller),
        # on a realtime model only (it leaves the chain at setup on a pipeline)
        MiddlewareSpec(RealtimeInputHold),
        MiddlewareSpec(RealtimeReplyWatch),
        MiddlewareSpec(SilentTurnGuard),
        MiddlewareSpec(ConditionalHangup),
        MiddlewareSpec(SttRecovery),
        MiddlewareSpec(LlmFallback),
        MiddlewareSpec(SilentReply),
        MiddlewareSpec(Watchdog),
        # innermost wrap_llm_request (position "last", after the Watchdog): it checks the
        # context as the LLM gets it, after the TurnKeeper's merged words
        MiddlewareSpec(ContextIntegrity),
    ]
