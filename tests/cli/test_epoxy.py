"""``rstreams serve --epoxy``, ``rstreams sub epoxy://`` and ``rstreams epoxy call|decode``, end to end, as a user runs them."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme

from bridges.epoxy import (
    Elements,
    EpoxyHeaders,
    EpoxyMessageType,
    Error,
    ErrorCode,
    FrameDecoder,
    FrameKind,
    ProtocolError,
    ProtocolErrorCode,
    PublishEvent,
    SubscribeRequest,
    bond,
    config_frame,
    error_frame,
    message_frame,
)

from ._support import ROOT, OutputLines, free_port, rstreams, start, stop

URL = re.compile(r"^rstreams: serving (?P<label>\S+) on (?P<scheme>epoxys?|tcp|tls)://(?P<host>.+):(?P<port>\d+)/?$")
COMPAT = ROOT / "tests" / "data" / "bond-compat"
RANGE_3 = [[0, 0, 0, 0, 0, 0, 0, n] for n in range(3)]


class EpoxyServe:
    def __init__(self, process: subprocess.Popen[bytes], listeners: int) -> None:
        self.process = process
        self.output = OutputLines(process.stdout)  # type: ignore[arg-type]
        self.urls: dict[str, str] = {}
        for _ in range(listeners):
            line = self.output.readline().decode()
            match = URL.match(line)
            assert match, line
            self.urls[match["scheme"]] = f"{match['host']}:{match['port']}"

    @property
    def address(self) -> str:
        return self.urls.get("epoxy") or self.urls["epoxys"]


def serve(*args: str, listeners: int = 1, log: Path) -> Iterator[EpoxyServe]:
    with open(log, "wb") as stderr:
        process = start("serve", "examples.demo:app", *args, stderr=stderr)
    try:
        yield EpoxyServe(process, listeners)
    finally:
        if process.poll() is None:
            stop(process)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(scope="module")
def epoxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EpoxyServe]:
    """``rstreams serve examples.demo:app --epoxy 127.0.0.1:0``."""
    yield from serve("--epoxy", "127.0.0.1:0", log=tmp_path_factory.mktemp("epoxy") / "stderr.log")


def payload_hex(value: bond.Struct) -> str:
    return bond.marshal(value).hex()


# ---- rstreams sub epoxy:// ---------------------------------------------------------------


def test_sub_reads_range_over_epoxy(epoxy_server: EpoxyServe) -> None:
    result = rstreams("sub", f"epoxy://{epoxy_server.address}", "range?count=3", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"0000000000000000\n0000000000000001\n0000000000000002\n"


def test_sub_over_epoxy_has_sub_s_exit_statuses(epoxy_server: EpoxyServe) -> None:
    unknown = rstreams("sub", f"epoxy://{epoxy_server.address}", "nothing-here")
    assert unknown.returncode == 1
    assert unknown.stderr == b"rstreams: publisher error: no such publisher: nothing-here\n"
    failing = rstreams("sub", f"epoxy://{epoxy_server.address}", "fail?after=1")
    assert failing.returncode == 1 and b"failing after 1 elements" in failing.stderr
    counted = rstreams("sub", f"epoxy://{epoxy_server.address}", "range?count=1000", "--format", "hex", "--count", "2")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.splitlines() == [b"0000000000000000", b"0000000000000001"]
    refused = rstreams("sub", f"epoxy://127.0.0.1:{free_port()}", "range")
    assert refused.returncode == 4
    bad = rstreams("sub", f"epoxy://{epoxy_server.address}?x=1", "range")
    assert bad.returncode == 2 and b"query" in bad.stderr


# ---- rstreams epoxy call ----------------------------------------------------------


def test_call_subscribe_prints_the_tree(epoxy_server: EpoxyServe) -> None:
    hex_payload = payload_hex(SubscribeRequest(publisher="range?count=3"))
    assert hex_payload == "43420100090d72616e67653f636f756e743d3300"
    result = rstreams("epoxy", "call", epoxy_server.address, "rstreams.Publishers", "Subscribe", "--payload-hex", hex_payload)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"0": RANGE_3}


@pytest.mark.parametrize(
    ("service", "method", "payload", "code"),
    [
        ("rstreams.Publishers", "Subscribe", SubscribeRequest(publisher="nope"), "METHOD_NOT_FOUND (0xa0bd0001): no such publisher: nope"),
        ("rstreams.Publishers", "Subscribe", SubscribeRequest(publisher="fail"), "INTERNAL_SERVER_ERROR (0xa0bd0000): fail:"),
        ("rstreams.Nope", "Subscribe", SubscribeRequest(), "METHOD_NOT_FOUND (0xa0bd0001): no such service"),
        ("rstreams.Publishers", "Nope", SubscribeRequest(), "METHOD_NOT_FOUND (0xa0bd0001): no such method"),
    ],
)
def test_call_error_responses_exit_1(epoxy_server: EpoxyServe, service: str, method: str, payload: bond.Struct, code: str) -> None:
    result = rstreams("epoxy", "call", epoxy_server.address, service, method, "--payload-hex", payload_hex(payload))
    assert result.returncode == 1
    assert result.stdout == b""
    assert result.stderr.startswith(b"rstreams: the peer answered with an error response " + code.encode())


def test_call_event_publishes_into_a_topic(epoxy_server: EpoxyServe) -> None:
    event = payload_hex(PublishEvent(topic="chat", value=b'{"from": "cli", "text": "hi"}'))
    result = rstreams("epoxy", "call", epoxy_server.address, "rstreams.Publishers", "Publish", "--event", "--payload-hex", event)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    read = rstreams("sub", f"epoxy://{epoxy_server.address}", "chat?history=1&until=now")
    assert read.returncode == 0, read.stderr
    assert read.stdout == b'{"from": "cli", "text": "hi"}\n'


def test_call_usage_errors_exit_2(epoxy_server: EpoxyServe) -> None:
    for args in (["--payload-hex", "zz"], ["--payload-hex", ""], ["--ca", "ca.pem"]):
        result = rstreams("epoxy", "call", epoxy_server.address, "rstreams.Publishers", "Subscribe", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(b"rstreams: ")
    # (--timeout is checked by the parser, as every command's: test_bridge_timeouts.py)
    result = rstreams("epoxy", "call", epoxy_server.address, "rstreams.Publishers", "Subscribe", "--timeout", "0")
    assert result.returncode == 2, result.stderr
    assert b"argument --timeout" in result.stderr


def test_call_connection_refused_exits_4() -> None:
    result = rstreams("epoxy", "call", f"127.0.0.1:{free_port()}", "a.B", "C")
    assert result.returncode == 4
    assert b"rstreams: cannot connect" in result.stderr


Reply = Callable[[socket.socket], None]


class RawServer:
    """A plain-socket Epoxy server in a thread, answering one connection at a time with ``reply``."""

    def __init__(self, replies: list[Reply]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._run, args=(replies,), daemon=True)
        self.thread.start()

    @staticmethod
    def read_frame(connection: socket.socket, decoder: FrameDecoder) -> None:
        while decoder.next_frame() is None:
            data = connection.recv(65536)
            assert data
            decoder.feed(data)

    def _run(self, replies: list[Reply]) -> None:
        for reply in replies:
            connection, _ = self.listener.accept()
            with connection:
                connection.settimeout(10)
                reply(connection)
                try:
                    while connection.recv(65536):  # until the client closes: no reset, nothing lost
                        pass
                except OSError:
                    pass
        self.listener.close()


def _reject(connection: socket.socket) -> None:
    RawServer.read_frame(connection, FrameDecoder())
    details = Error(error_code=ErrorCode.INTERNAL_SERVER_ERROR, message="not today")
    connection.sendall(error_frame(ProtocolError(error_code=ProtocolErrorCode.CONNECTION_REJECTED, details=bond.Bonded(details))).encode())


def _answer_with(payload: bytes) -> Reply:
    def reply(connection: socket.socket) -> None:
        decoder = FrameDecoder()
        RawServer.read_frame(connection, decoder)
        connection.sendall(config_frame().encode())
        RawServer.read_frame(connection, decoder)
        headers = EpoxyHeaders(conversation_id=1, message_type=EpoxyMessageType.RESPONSE)
        connection.sendall(message_frame(headers, payload).encode())

    return reply


def _close_after_config(connection: socket.socket) -> None:
    decoder = FrameDecoder()
    RawServer.read_frame(connection, decoder)
    connection.sendall(config_frame().encode())
    RawServer.read_frame(connection, decoder)
    connection.shutdown(socket.SHUT_WR)


def _violate(connection: socket.socket) -> None:
    decoder = FrameDecoder()
    RawServer.read_frame(connection, decoder)
    connection.sendall(config_frame().encode() + b"\x01\x00XX\x01\x00\x00\x00\x00")


def test_call_exits_non_zero_on_each_failure() -> None:
    server = RawServer([_reject, _answer_with(b"CB\x01\x00\xff"), _close_after_config, _violate])
    address = f"127.0.0.1:{server.port}"
    rejected = rstreams("epoxy", "call", address, "a.B", "C")
    assert rejected.returncode == 1
    assert rejected.stderr == b"rstreams: the peer sent ProtocolError CONNECTION_REJECTED: not today\n"
    undecodable = rstreams("epoxy", "call", address, "a.B", "C")
    assert undecodable.returncode == 5
    assert undecodable.stderr.startswith(b"rstreams: the response payload does not decode: ")
    closed = rstreams("epoxy", "call", address, "a.B", "C")
    assert closed.returncode == 3
    assert closed.stderr == b"rstreams: the peer closed the connection\n"
    violated = rstreams("epoxy", "call", address, "a.B", "C")
    assert violated.returncode == 1
    assert violated.stderr.startswith(b"rstreams: the peer broke the protocol: unknown framelet type 0x5858")
    server.thread.join(10)


# ---- rstreams epoxy decode ---------------------------------------------------------


@pytest.mark.parametrize(("name", "protocol"), [("compact", bond.Protocol.COMPACT_V1), ("compact2", bond.Protocol.COMPACT_V2), ("fast", bond.Protocol.FAST)])
def test_decode_the_compat_files(name: str, protocol: bond.Protocol) -> None:
    path = COMPAT / f"compat.{name}.dat"
    result = rstreams("epoxy", "decode", str(path), "--protocol", name)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == json.loads(json.dumps(bond.to_json(bond.read_tree(path.read_bytes(), protocol))))
    # The same object three ways: the same JSON, whichever protocol carried it.
    compact = json.loads(rstreams("epoxy", "decode", str(COMPAT / "compat.compact.dat"), "--protocol", "compact").stdout)
    assert printed == compact
    assert set(printed) >= {"base"} and printed["base"]


def test_decode_reads_the_json_shape() -> None:
    class Inner(bond.Struct):
        n: int = bond.field(0, bond.INT8)

    class Base(bond.Struct):
        b: str = bond.field(0, bond.STRING)

    class Shapes(Base):
        items: list[int] = bond.field(1, bond.list_of(bond.UINT16))
        tags: set[str] = bond.field(2, bond.set_of(bond.WSTRING))
        pairs: dict[int, str] = bond.field(3, bond.map_of(bond.INT32, bond.STRING))
        blob: bytes = bond.field(4, bond.BLOB)
        inner: Inner = bond.field(5, Inner)

    value = Shapes(b="base", items=[1, 2], tags={"é"}, pairs={7: "seven"}, blob=b"\x01\xff", inner=Inner(n=-1))
    result = rstreams("epoxy", "decode", "-", "--protocol", "compact", "--marshalled", input=bond.marshal(value))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "base": {"0": "base"},
        "1": [1, 2],
        "2": ["é"],
        "3": [[7, "seven"]],
        "4": [1, -1],
        "5": {"0": -1},
    }
    fast = rstreams("epoxy", "decode", "-", "--protocol", "fast", input=bond.serialize(value, bond.Protocol.FAST))
    assert json.loads(fast.stdout) == json.loads(result.stdout)


def test_decode_failures(tmp_path: Path) -> None:
    broken = tmp_path / "broken.dat"
    broken.write_bytes(b"\x09\x05ab")
    result = rstreams("epoxy", "decode", str(broken), "--protocol", "compact")
    assert result.returncode == 5 and result.stderr.startswith(f"rstreams: {broken} does not decode: ".encode())
    missing = rstreams("epoxy", "decode", str(tmp_path / "missing.dat"), "--protocol", "compact")
    assert missing.returncode == 2 and b"cannot read" in missing.stderr
    no_protocol = rstreams("epoxy", "decode", str(broken))
    assert no_protocol.returncode == 2 and b"--protocol is required" in no_protocol.stderr
    mismatch = rstreams("epoxy", "decode", "-", "--protocol", "fast", "--marshalled", input=bond.marshal(Elements()))
    assert mismatch.returncode == 5 and b"the marshalling header says compact, not fast" in mismatch.stderr
    no_header = rstreams("epoxy", "decode", "-", "--marshalled", input=b"\x00")
    assert no_header.returncode == 5


def test_epoxy_help_documents_the_exit_statuses() -> None:
    result = rstreams("epoxy", "--help")
    assert result.returncode == 0
    assert b"exit status:" in result.stdout and b"  5    the payload" in result.stdout
    assert result.stdout.count(b"rstreams epoxy ") >= 4
    for command in ("call", "decode"):
        help_text = rstreams("epoxy", command, "--help").stdout
        assert b"--tls" in help_text and b"--ca FILE" in help_text and b"exit status:" in help_text


# ---- serving ---------------------------------------------------------------------


def test_epoxy_next_to_tcp_and_graceful_shutdown(tmp_path: Path) -> None:
    for server in serve("--tcp", "127.0.0.1:0", "--epoxy", "127.0.0.1:0", listeners=2, log=tmp_path / "log"):
        assert set(server.urls) == {"epoxy", "tcp"}
        result = rstreams("sub", "tcp://" + server.urls["tcp"], "range?count=2", "--format", "hex")
        assert result.returncode == 0, result.stderr
        result = rstreams("sub", "epoxy://" + server.address, "range?count=2", "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert stop(server.process, signal.SIGINT) == 0
        assert server.output.rest() == [b"rstreams: shut down"]


def test_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca_file = str(tmp_path / "ca.pem")
    for server in serve("--epoxy", "127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem"), log=tmp_path / "log"):
        assert "epoxys" in server.urls
        result = rstreams("sub", f"epoxys://{server.address}", "range?count=3", "--format", "hex", "--ca", ca_file)
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"0000000000000000\n0000000000000001\n0000000000000002\n"
        hex_payload = payload_hex(SubscribeRequest(publisher="range?count=3"))
        args = ("rstreams.Publishers", "Subscribe", "--payload-hex", hex_payload)
        result = rstreams("epoxy", "call", server.address, *args, "--tls", "--ca", ca_file)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"0": RANGE_3}
        untrusted = rstreams("epoxy", "call", server.address, *args, "--tls")
        assert untrusted.returncode == 4 and b"certificate" in untrusted.stderr.lower()


def test_the_frames_on_the_wire_are_the_documented_ones(epoxy_server: EpoxyServe) -> None:
    # A raw Subscribe over a plain socket: the server's response is exactly
    # Elements, its headers the request's id with no names.
    host, port = epoxy_server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        decoder = FrameDecoder()
        connection.sendall(config_frame().encode())
        RawServer.read_frame(connection, decoder)
        request = EpoxyHeaders(
            conversation_id=1, message_type=EpoxyMessageType.REQUEST, service_name="rstreams.Publishers", method_name="Subscribe"
        )
        connection.sendall(message_frame(request, bond.marshal(SubscribeRequest(publisher="range?count=3"))).encode())
        frames = []
        while len(frames) < 1:
            data = connection.recv(65536)
            assert data
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
    [frame] = frames
    assert frame.kind is FrameKind.MESSAGE
    head = bond.deserialize(EpoxyHeaders, frame.framelets[0].content, bond.Protocol.FAST)
    assert head == EpoxyHeaders(conversation_id=1, message_type=EpoxyMessageType.RESPONSE)
    assert bond.unmarshal(Elements, frame.framelets[1].content).elements == [n.to_bytes(8, "big") for n in range(3)]
