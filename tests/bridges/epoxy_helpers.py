"""Helpers for the Epoxy tests: a client/server pair of machines, a frame reader, a raw peer."""

from __future__ import annotations

import trio

from bridges.epoxy import (
    Connection,
    EpoxyEvent,
    EpoxyHeaders,
    EpoxyLimits,
    Frame,
    FrameDecoder,
    FrameKind,
    FrameletType,
    ProtocolError,
    Role,
    bond,
    config_frame,
    message_frame,
)


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


class RawEpoxy:
    """An Epoxy peer driven frame by frame over a trio stream: what the held-out peer could do."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(limits=EpoxyLimits(max_framelet_size=2**30, max_frame_size=2**30 + 2**16))
        self.eof = False

    @classmethod
    async def connect(cls, port: int) -> RawEpoxy:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, *items: Frame | bytes) -> None:
        for item in items:
            await self.stream.send_all(item if isinstance(item, bytes) else item.encode())

    async def receive(self) -> Frame | None:
        """The next frame, or None at end of file."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            if self.eof:
                self.decoder.check_eof()
                return None
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                self.eof = True
            self.decoder.feed(data)

    async def receive_until_eof(self) -> list[Frame]:
        frames = []
        while (frame := await self.receive()) is not None:
            frames.append(frame)
        return frames

    async def protocol_error(self) -> ProtocolError:
        """Read up to the peer's Error frame; its ProtocolError."""
        while True:
            frame = await self.receive()
            assert frame is not None, "end of file before an Error frame"
            if frame.kind is FrameKind.ERROR:
                return bond.deserialize(ProtocolError, frame.framelets[0].content, bond.Protocol.FAST)

    async def handshake_as_client(self) -> None:
        await self.send(config_frame())
        frame = await self.receive()
        assert frame is not None and frame.kind is FrameKind.CONFIG, frame

    async def handshake_as_server(self) -> None:
        frame = await self.receive()
        assert frame is not None and frame.kind is FrameKind.CONFIG, frame
        await self.send(config_frame())

    async def aclose(self) -> None:
        await self.stream.aclose()


def headers(conversation_id: int, message_type: int, service: str = "", method: str = "") -> EpoxyHeaders:
    return EpoxyHeaders(
        conversation_id=conversation_id, message_type=message_type, service_name=service, method_name=method
    )


def message(
    conversation_id: int,
    message_type: int,
    payload: bytes | bond.Struct,
    service: str = "",
    method: str = "",
    *,
    is_error: bool = False,
) -> Frame:
    content = bond.marshal(payload) if isinstance(payload, bond.Struct) else payload
    return message_frame(headers(conversation_id, message_type, service, method), content, is_error=is_error)


def decode_message(frame: Frame) -> tuple[EpoxyHeaders, bytes, bool]:
    """A Message frame's headers, last framelet's content, and whether it is ErrorData."""
    assert frame.kind is FrameKind.MESSAGE, frame
    head = bond.deserialize(EpoxyHeaders, frame.framelets[0].content, bond.Protocol.FAST)
    last = frame.framelets[-1]
    return head, last.content, last.type == FrameletType.ERROR_DATA
