"""A provider that refuses its first connection attempts: the value the lab's fakes share.

The wire emulators answer such attempts with the provider's documented status and error body
(:meth:`~resilient_agent.testing.emulators.EmulatorServer.refuse_first`); the scripted LLM
raises livekit's ``APIStatusError`` as a plugin does on that answer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConnectRefusals"]


@dataclass(frozen=True)
class ConnectRefusals:
    """A provider that refuses its first connection attempts (rate limited, or overloaded).

    The first ``first`` attempts on each of the emulator's refusable paths (a websocket
    upgrade or an HTTP request) are answered with ``status`` and the provider's documented
    error body, before any audio or token; later attempts are served.

    Attributes:
        status: The HTTP status: 429 (too many requests) or 503 (unavailable).
        first: How many attempts are refused, per path.
        retry_after_s: A ``Retry-After`` header, where the provider documents one.
    """

    status: int = 429
    first: int = 1
    retry_after_s: float | None = None
