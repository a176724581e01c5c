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
from typing import Any

from aiohttp import web
from typing_extensions import Self

__all__ = ["EmulatorServer"]

_LOOPBACK = "127.0.0.1"


class EmulatorServer:
    """A provider's endpoint on loopback; subclasses add their routes in :meth:`routes`.

    Attributes:
        connections: Websocket connections opened, by path.
        requests: HTTP requests answered (websocket upgrades included), by path.
    """

    def __init__(self) -> None:
        self.connections: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
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

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests[request.path] += 1
        if request.headers.get("Upgrade", "").lower() == "websocket":
            self.connections[request.path] += 1
        response: web.StreamResponse = await handler(request)
        return response
