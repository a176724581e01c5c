"""The shared base of the wire emulators: an aiohttp server on loopback, in the call's loop.

Each emulator is an :class:`aiohttp.web.Application` bound to 127.0.0.1 on a port the kernel
picks. It runs in the event loop of the call it serves, so on the lab's virtual clock its
timers are the call's timers and a run replays exactly; the plugins reach it through real
sockets, with their real clients.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from typing_extensions import Self

from ..refusals import ConnectRefusals

__all__ = ["ConnectRefusals", "EmulatorServer", "SocketSpan"]

_LOOPBACK = "127.0.0.1"


class EmulatorServer:
    """A provider's endpoint on loopback; subclasses add their routes in :meth:`routes`.

    Attributes:
        connections: Websocket connections opened, by path.
        requests: HTTP requests answered (websocket upgrades included), by path.
        sockets: Each websocket connection's path and loop times: opened, and closed (None
            while open).
        refusals: The connection attempts refused (:meth:`refuse_first`), by path.
    """

    # the connection attempts a refusal applies to: (HTTP method, path prefix) each
    refusable: tuple[tuple[str, str], ...] = ()

    def __init__(self) -> None:
        self.connections: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        # path prefix to the refusals in force there
        self._refuse: dict[str, ConnectRefusals] = {}
        self.requests: Counter[str] = Counter()
        self.sockets: list[SocketSpan] = []
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._ids = itertools.count(1)
        # handlers parked on purpose (a hanging provider): released when the server closes
        self._parked: set[asyncio.Future[None]] = set()
        # set before start() by an emulator whose client insists on TLS (Gemini Live)
        self.ssl_context: ssl.SSLContext | None = None

    def routes(self) -> list[web.RouteDef]:
        """The emulator's routes."""
        raise NotImplementedError

    def refuse_first(
        self, refusals: ConnectRefusals | None, paths: tuple[str, ...] | None = None
    ) -> Self:
        """Refuse the first connection attempts on each of ``paths`` (None: serve them all).

        Args:
            refusals: What is refused, and how.
            paths: Path prefixes, each counted on its own; the emulator's ``refusable`` paths
                unless given (an emulator serving two parts refuses one part's paths).
        """
        for path in paths if paths is not None else [p for _, p in self.refusable]:
            if refusals is None:
                self._refuse.pop(path, None)
            else:
                self._refuse[path] = refusals
        return self

    def refusal_body(self, status: int) -> dict[str, Any]:
        """The provider's documented error body for ``status``."""
        return {"error": {"code": status, "message": "emulated refusal"}}

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https`` with TLS): the base the plugins are pointed at."""
        if self._runner is None:
            raise RuntimeError("the emulator is not started")
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://{_LOOPBACK}:{self._port}"

    def next_id(self, prefix: str) -> str:
        """A request id unique in this server, the same on every run."""
        return f"{prefix}-{next(self._ids):04d}"

    async def start(self) -> Self:
        """Bind to an ephemeral loopback port and serve in the running loop."""
        app = web.Application(middlewares=[self._count])
        app.add_routes(self.routes())
        # a client that goes away (livekit cancelling a request) cancels its handler
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=0.0
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, _LOOPBACK, 0, ssl_context=self.ssl_context).start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def aclose(self) -> None:
        """Stop serving; parked handlers end."""
        for parked in self._parked:
            if not parked.done():
                parked.set_result(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def park(self) -> None:
        """Wait until the server closes or the client goes away (a provider that hangs)."""
        parked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.add(parked)
        try:
            await parked
        finally:
            self._parked.discard(parked)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    def _refusal(self, request: web.Request) -> web.StreamResponse | None:
        path = request.path
        if not any(request.method == m and path.startswith(p) for m, p in self.refusable):
            return None
        refuse = next((r for p, r in self._refuse.items() if path.startswith(p)), None)
        if refuse is None or self.refusals[path] >= refuse.first:
            return None
        self.refusals[path] += 1
        headers = {}
        if refuse.retry_after_s is not None:
            headers["Retry-After"] = f"{refuse.retry_after_s:g}"
        return web.json_response(
            self.refusal_body(refuse.status), status=refuse.status, headers=headers
        )

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests[request.path] += 1
        refused = self._refusal(request)
        if refused is not None:
            return refused
        if request.headers.get("Upgrade", "").lower() != "websocket":
            response: web.StreamResponse = await handler(request)
            return response
        self.connections[request.path] += 1
        loop = asyncio.get_running_loop()
        span = SocketSpan(request.path, loop.time())
        self.sockets.append(span)
        try:
            response = await handler(request)
        finally:
            span.closed_at = loop.time()
        return response

    def most_open_at_once(self, path: str) -> int:
        """The most websocket connections on ``path`` open at the same time."""
        edges = sorted(
            edge
            for span in self.sockets
            if span.path == path
            for edge in ((span.opened_at, 1), (span.closed_at or float("inf"), -1))
        )
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return most


@dataclass
class SocketSpan:
    """One websocket connection's life on an emulator, in loop seconds.

    Attributes:
        path: The path it connected to.
        opened_at: When the server accepted the upgrade.
        closed_at: When its handler ended (None while open).
    """

    path: str
    opened_at: float
    closed_at: float | None = None
