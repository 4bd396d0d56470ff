"""A Relink connector and listener wired back to back, for the sans-I/O tests.

Not a test module: ``tests/bridges`` is not a package, so the Relink tests
import this by its bare name (pytest puts their directory on ``sys.path``).
A reconnection is a new :class:`Pair` built over the surviving link states
(the connector's ``LinkState`` and the listener's ``LinkRegistry``); bytes
still in flight on the old pair are simply never delivered.
"""

from __future__ import annotations

from bridges.relink import (
    Connection,
    Event,
    LinkConfig,
    LinkRegistry,
    LinkRequested,
    LinkState,
    RelinkLimits,
    Role,
)

EPOCH = 1_700_000_000_000_000  # microseconds since 1970: November 2023
NAME = "events"


class Pair:
    """Two machines; ``to_listener`` / ``to_connector`` move the queued bytes one way."""

    def __init__(
        self,
        config: LinkConfig = LinkConfig(connector_id_size=2, listener_id_size=2),
        *,
        registry: LinkRegistry | None = None,
        link: LinkState | None = None,
        require_old_link: bool = False,
        send_window: int = 65536,
        ack_window: int | None = None,
        limits: RelinkLimits | None = None,
    ) -> None:
        self.registry = registry if registry is not None else LinkRegistry(EPOCH)
        extra = {} if limits is None else {"limits": limits}  # else each side's default
        self.connector = Connection(
            Role.CONNECTOR,
            config=config,
            endpoint_name=NAME,
            link=link,
            require_old_link=require_old_link,
            send_window=send_window,
            ack_window=ack_window,
            **extra,  # type: ignore[arg-type]
        )
        self.listener = Connection(
            Role.LISTENER,
            endpoints={NAME: config},
            epoch=self.registry.epoch,
            send_window=send_window,
            ack_window=ack_window,
            **extra,  # type: ignore[arg-type]
        )
        self.connector_events: list[Event] = []
        self.listener_events: list[Event] = []

    @staticmethod
    def deliver(source: Connection, target: Connection, cut: int | None = None) -> list[Event]:
        data = source.data_to_send()
        if cut is not None:
            data = data[:cut]  # the rest is lost in flight
        if data:
            target.receive_data(data)
        return target.events()

    def to_listener(self, cut: int | None = None) -> list[Event]:
        events = self.deliver(self.connector, self.listener, cut)
        for event in list(events):
            if isinstance(event, LinkRequested):
                self.decide(event)
                events += self.listener.events()  # what the decision produced
        self.listener_events += events
        return events

    def to_connector(self, cut: int | None = None) -> list[Event]:
        events = self.deliver(self.listener, self.connector, cut)
        self.connector_events += events
        return events

    def decide(self, event: LinkRequested) -> LinkState | None:
        request = event.request
        known = self.registry.lookup(request.old_epoch, request.old_link_id)
        if known is not None:
            return self.listener.accept_link(known)
        link = self.listener.accept_link(new_link_id=self.registry.new_link_id())
        if link is not None:
            self.registry.add(link)
        return link

    def pump(self) -> tuple[list[Event], list[Event]]:
        """Exchange until neither side has bytes to send: (connector's, listener's) new events."""
        connector_events: list[Event] = []
        listener_events: list[Event] = []
        for _ in range(100):
            if not (self.connector.has_data_to_send or self.listener.has_data_to_send):
                break
            listener_events += self.to_listener()
            connector_events += self.to_connector()
        else:
            raise AssertionError("the pair never went quiet")
        return connector_events, listener_events

    def handshake(self) -> tuple[list[Event], list[Event]]:
        return self.pump()

    def reconnect(self, *, require_old_link: bool = False) -> Pair:
        """A new pair over this one's surviving state; bytes in flight are dropped."""
        self.connector.data_to_send()
        self.listener.data_to_send()
        request = self.connector.request
        assert request is not None
        return Pair(
            request.config,
            registry=self.registry,
            link=self.connector.link,
            require_old_link=require_old_link,
            send_window=self.connector.send_window,
            ack_window=self.connector.ack_window,
            limits=self.connector.limits,
        )
