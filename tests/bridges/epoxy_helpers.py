"""Helpers for the Epoxy tests: a client/server pair and a frame reader."""

from __future__ import annotations

from bridges.epoxy import Connection, EpoxyEvent, EpoxyLimits, Frame, FrameDecoder, Role


class EpoxyPair:
    """A client and a server machine wired back to back; ``to_server``/``to_client`` move bytes one way."""

    def __init__(self, **options: object) -> None:
        self.client = Connection(Role.CLIENT, **options)  # type: ignore[arg-type]
        self.server = Connection(Role.SERVER, **options)  # type: ignore[arg-type]

    @staticmethod
    def deliver(source: Connection, target: Connection) -> list[EpoxyEvent]:
        target.receive_data(source.data_to_send())
        return target.events()

    def to_server(self) -> list[EpoxyEvent]:
        return self.deliver(self.client, self.server)

    def to_client(self) -> list[EpoxyEvent]:
        return self.deliver(self.server, self.client)

    def handshake(self) -> None:
        self.to_server()
        self.server.accept()
        self.to_client()


def frames_of(data: bytes) -> list[Frame]:
    """The frames in ``data`` (which must end on a frame boundary)."""
    decoder = FrameDecoder(limits=EpoxyLimits(max_framelet_size=2**30, max_frame_size=2**30 + 2**16))
    decoder.feed(data)
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    decoder.check_eof()
    return frames
