"""The hex dumps of ``docs/bridges/epoxy.md`` are what the code sends.

The spec's Calc example left its dumps as "TODO"; the doc gives them, and
those of a ``rstreams.Publishers.Subscribe``. Here a client and a server
machine play each example (the Calc request is the client's second request,
hence conversation 3; the Subscribe a client's first) and the frames they
queue must be exactly the documented bytes, dump and breakdown alike. The
Subscribe's response is also checked against the app server itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from bond_test_schema import Operation, Params, Result
from epoxy_helpers import EpoxyPair

from bridges.epoxy import PUBLISHERS_SERVICE, Elements, Request, SubscribeRequest

DOC = Path(__file__).resolve().parents[2] / "docs" / "bridges" / "epoxy.md"
_DUMP_LINE = re.compile(r"^[0-9a-f]{8}: ")


def hexl(data: bytes) -> list[str]:
    """Emacs hexl-mode lines: offset, 8 groups of 2 bytes, the ASCII."""
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        groups = " ".join(chunk[i : i + 2].hex() for i in range(0, len(chunk), 2))
        text = "".join(chr(byte) if 32 <= byte < 127 else "." for byte in chunk)
        lines.append(f"{offset:08x}: {groups:<39}  {text}")
    return lines


def documented() -> tuple[list[list[str]], list[bytes]]:
    """The doc's fenced blocks: the hexl dumps, and the bytes of each breakdown."""
    dumps: list[list[str]] = []
    breakdowns: list[bytes] = []
    for block in re.findall(r"```text\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        lines = block.rstrip("\n").split("\n")
        if all(_DUMP_LINE.match(line) for line in lines):
            dumps.append(lines)
        else:
            # A breakdown: hex byte pairs and quoted strings, then (after three
            # spaces or more) a comment.
            raw = b""
            for line in lines:
                code = re.split(r"\s{3,}", line.strip(), maxsplit=1)[0]
                for token in re.findall(r'"[^"]*"|\b[0-9a-f]{2}\b', code):
                    raw += token[1:-1].encode() if token.startswith('"') else bytes.fromhex(token)
            breakdowns.append(raw)
    return dumps, breakdowns


def calc_frames() -> tuple[bytes, bytes]:
    pair = EpoxyPair()
    pair.handshake()
    pair.client.send_request("examples.calc.Calc", "Warmup", Params())
    pair.to_server()
    conversation = pair.client.send_request("examples.calc.Calc", "Calculate", Params(x=67, operation=Operation.Mul, y=87))
    assert conversation == 3
    request_frame = pair.client.data_to_send()
    pair.server.receive_data(request_frame)
    [request] = pair.server.events()
    assert isinstance(request, Request) and request.decode(Params) == Params(x=67, y=87, operation=Operation.Mul)
    pair.server.send_response(request.conversation_id, Result(z=5829))
    return request_frame, pair.server.data_to_send()


RANGE_3 = [n.to_bytes(8, "big") for n in range(3)]


def subscribe_frames() -> tuple[bytes, bytes]:
    pair = EpoxyPair()
    pair.handshake()
    conversation = pair.client.send_request(PUBLISHERS_SERVICE, "Subscribe", SubscribeRequest(publisher="range?count=3"))
    assert conversation == 1
    request_frame = pair.client.data_to_send()
    pair.server.receive_data(request_frame)
    [request] = pair.server.events()
    assert isinstance(request, Request) and request.decode(SubscribeRequest).publisher == "range?count=3"
    pair.server.send_response(request.conversation_id, Elements(elements=RANGE_3))
    return request_frame, pair.server.data_to_send()


def test_the_documented_dumps_are_the_frames_sent() -> None:
    frames = [*calc_frames(), *subscribe_frames()]
    dumps, _ = documented()
    assert dumps == [hexl(frame) for frame in frames]
    assert [len(frame) for frame in frames] == [81, 41, 89, 71]


def test_the_documented_breakdowns_add_up_to_the_frames() -> None:
    _, breakdowns = documented()
    assert breakdowns == [*calc_frames(), *subscribe_frames()]


async def test_the_app_server_sends_the_documented_subscribe_response() -> None:
    # The same bytes from EpoxyAppServer over a memory stream, not just from the machine.
    import trio
    import trio.testing

    import examples.demo
    from bridges.epoxy import EpoxyAppServer, FrameKind, config_frame
    from epoxy_helpers import RawEpoxy

    request_frame, response_frame = subscribe_frames()
    ours, theirs = trio.testing.memory_stream_pair()
    raw = RawEpoxy(theirs)
    server = EpoxyAppServer(examples.demo.app)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve_stream, ours)
            await raw.send(config_frame())
            config = await raw.receive()
            assert config is not None and config.kind is FrameKind.CONFIG
            await raw.send(request_frame)
            response = await raw.receive()
            assert response is not None and response.encode() == response_frame
            await raw.aclose()


def test_hexl_format() -> None:
    assert hexl(b"\x02\x00HR") == ["00000000: 0200 4852" + " " * 30 + "  ..HR"]
