"""A TCP proxy on 127.0.0.1 that can cut every connection through it: drops on demand.

Used by the Relink reconnection tests: the connector connects to the proxy,
the proxy to the listener, and :meth:`CuttingProxy.cut` closes both sides of
every live connection at once (the connector sees end of file or a reset,
reconnects, and the proxy carries the new connection). ``cut_after`` cuts
once a direction has carried that many more bytes, so a drop lands
mid-stream, mid-packet included.
"""

from __future__ import annotations

import trio


class CuttingProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.connections = 0
        self.cuts = 0
        self._scopes: set[trio.CancelScope] = set()
        self._budget: dict[str, int | None] = {"up": None, "down": None}
        self._next: tuple[str, int] | None = None

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._relay, listeners)
            task_status.started(self.port)

    def cut(self) -> None:
        """Close every live connection through the proxy."""
        self.cuts += 1
        for scope in list(self._scopes):
            scope.cancel()

    def cut_after(self, direction: str, size: int) -> None:
        """Cut once ``direction`` ("up": to the listener, "down": to the connector) carried ``size`` more bytes."""
        self._budget[direction] = size

    def cut_next_after(self, direction: str, size: int) -> None:
        """As ``cut_after``, for the next connection only (one open now carries nothing towards it)."""
        self._next = (direction, size)

    async def _relay(self, client: trio.SocketStream) -> None:
        self.connections += 1
        budget = self._budget
        if self._next is not None:
            direction, size = self._next
            self._next = None
            budget = {"up": None, "down": None, direction: size}
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        except OSError:
            await trio.aclose_forcefully(client)
            return
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server, "up", budget)
                    nursery.start_soon(self._pump, server, client, "down", budget)
            finally:
                self._scopes.discard(scope)
        await trio.aclose_forcefully(client)
        await trio.aclose_forcefully(server)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, direction: str, budgets: dict[str, int | None]
    ) -> None:
        try:
            while True:
                data = await source.receive_some(65536)
                if not data:
                    break
                budget = budgets[direction]
                if budget is not None and len(data) >= budget:
                    budgets[direction] = None
                    if budget:
                        await sink.send_all(data[:budget])
                    self.cut()
                    await trio.sleep_forever()
                if budget is not None:
                    budgets[direction] = budget - len(data)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self.cut()  # one side ended: end the pair

