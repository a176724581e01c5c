"""First-party middleware, imported as ``resilient_agent.middleware``.

This folder is mapped onto ``resilient_agent.middleware`` by the packaging; never import it as a
bare top-level ``middleware`` package (that name is taken on PyPI and by many apps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resilient_agent import Middleware, MiddlewareSpec

__all__ = ["default_middleware"]


def default_middleware() -> list[Middleware | MiddlewareSpec]:
    """The middleware ``ResilientAgent`` runs by default, in order."""
    from .hangup import ConditionalHangup
    from .llm_fallback import LlmFallback
    from .stt_recovery import SttRecovery
    from .tool_guard import ToolGuard
    from .turn_keeper import TurnKeeper
    from .wait_for_caller import WaitForCaller
    from .watchdog import Watchdog

    return [
        ToolGuard(),
        TurnKeeper(),
        WaitForCaller(),
        ConditionalHangup(),
        SttRecovery(),
        LlmFallback(),
        Watchdog(),
    ]
