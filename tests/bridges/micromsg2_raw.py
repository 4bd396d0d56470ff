"""A MicroMsg2 peer driven frame by frame over a real socket, for the trio and broker tests.

A sans-I/O :class:`~bridges.micromsg2.Connection` over a trio stream, with
no adapter in between: each event is read only when the test asks for it,
each ack is sent only when the test says, so what the server does within
its window (and nothing more) is visible. The machine itself refuses a
server that sends beyond the window (``WindowExceededError``).
"""

from __future__ import annotations

from collections import deque

import trio

from bridges.micromsg2 import Connection, Event, ExtensionSpec, Role

PUBSUB = ExtensionSpec(name="pubsub")


class RawClient:
    def __init__(self, stream: trio.abc.Stream, machine: Connection) -> None:
        self.stream = stream
        self.machine = machine
        self.events: deque[Event] = deque()

    @classmethod
    async def connect(cls, port: int, *, window: int | None = 2, pubsub: bool = True, identity: str = "hulk") -> RawClient:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        optional = [ExtensionSpec.batch_ack(window)] if window is not None else []
        machine = Connection(Role.CLIENT, identity=identity, required=[PUBSUB] if pubsub else [], optional=optional)
        client = cls(stream, machine)
        await client.flush()
        return client

    async def flush(self) -> None:
        data = self.machine.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def next_event(self) -> Event:
        while not self.events:
            data = await self.stream.receive_some(65536)
            self.machine.receive_data(data)
            self.events.extend(self.machine.events())
            await self.flush()
        return self.events.popleft()

    async def subscribe(self, destination: str, filter: str | None = None) -> None:
        self.machine.subscribe(destination, filter)
        await self.flush()

    async def unsubscribe(self, destination: str) -> None:
        self.machine.unsubscribe(destination)
        await self.flush()

    async def ack(self, count: int = 1) -> None:
        self.machine.acknowledge(count)
        await self.flush()

    async def aclose(self) -> None:
        await self.stream.aclose()
