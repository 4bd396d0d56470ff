"""A client and a server MicroMsg2 machine wired back to back, for tests."""

from __future__ import annotations

from bridges.micromsg2 import Connection, Event, ExtensionSpec, Role


def ext(text: str) -> ExtensionSpec:
    """``batch-ack:max-count=3`` as an ExtensionSpec."""
    name, _, rest = text.partition(":")
    properties = tuple(tuple(item.split("=", 1)) for item in rest.split(",")) if rest else ()
    return ExtensionSpec(name=name, properties=properties)  # type: ignore[arg-type]


class Pair:
    """Moves bytes between the two machines until both are quiet."""

    def __init__(self, client: Connection, server: Connection) -> None:
        self.client = client
        self.server = server
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []

    def pump(self) -> None:
        for _ in range(100):
            moved = False
            data = self.client.data_to_send()
            if data:
                self.server.receive_data(data)
                moved = True
            self.server_events += self.server.events()
            data = self.server.data_to_send()
            if data:
                self.client.receive_data(data)
                moved = True
            self.client_events += self.client.events()
            if not moved:
                return
        raise AssertionError("the pair never went quiet")

    def take_client_events(self) -> list[Event]:
        self.pump()
        events, self.client_events = self.client_events, []
        return events

    def take_server_events(self) -> list[Event]:
        self.pump()
        events, self.server_events = self.server_events, []
        return events


def open_pair(client_required: str = "", client_optional: str = "", server_required: str = "",
              server_optional: str = "", **client_options: object) -> Pair:  # fmt: skip
    """A pair after the handshake; extension lists as ``a;b:k=v``."""

    def specs(text: str) -> list[ExtensionSpec]:
        return [ext(item) for item in text.split(";") if item]

    client = Connection(Role.CLIENT, identity="hulk", required=specs(client_required),
                        optional=specs(client_optional), **client_options)  # type: ignore[arg-type]  # fmt: skip
    server = Connection(Role.SERVER, required=specs(server_required), optional=specs(server_optional))
    pair = Pair(client, server)
    pair.pump()
    pair.client_events, pair.server_events = [], []  # HandshakeCompleted: tested on its own
    return pair
