"""``rstreams serve --micromsg2``, ``rstreams sub mm2://`` and ``rstreams mm2 sub|send``, end to end, as a user runs them."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from bridges.micromsg2 import Connection, ExtensionSpec, Role

from ._support import OutputLines, free_port, rstreams, start, stop

URL = re.compile(r"^rstreams: serving (?P<label>\S+) on (?P<scheme>mm2s?|tcp|tls)://(?P<host>.+):(?P<port>\d+)/?$")
RANGE_3_HEX = [f"{n:016x}".encode() for n in range(3)]


class Mm2Serve:
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
        return self.urls.get("mm2") or self.urls["mm2s"]


def serve(*args: str, listeners: int = 1, log: Path) -> Iterator[Mm2Serve]:
    with open(log, "wb") as stderr:
        process = start("serve", "examples.demo:app", *args, stderr=stderr)
    try:
        yield Mm2Serve(process, listeners)
    finally:
        if process.poll() is None:
            stop(process)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mm2Serve]:
    """``rstreams serve examples.demo:app --micromsg2 127.0.0.1:0 --tcp 127.0.0.1:0``."""
    log = tmp_path_factory.mktemp("mm2") / "stderr.log"
    yield from serve("--micromsg2", "127.0.0.1:0", "--tcp", "127.0.0.1:0", listeners=2, log=log)


# ---- rstreams sub mm2:// -----------------------------------------------------------------


def test_sub_reads_a_publisher_over_mm2(broker: Mm2Serve) -> None:
    result = rstreams("sub", f"mm2://{broker.address}", "range?count=3", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == RANGE_3_HEX


def test_sub_stops_after_count_over_mm2(broker: Mm2Serve) -> None:
    result = rstreams("sub", f"mm2://{broker.address}", "range?count=1000", "--count", "2", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == RANGE_3_HEX[:2]


def test_sub_reports_an_unknown_publisher_over_mm2(broker: Mm2Serve) -> None:
    result = rstreams("sub", f"mm2://{broker.address}", "nothing-here")
    assert result.returncode == 1
    assert b"no such publisher" in result.stderr


def test_sub_mm2_cannot_connect() -> None:
    result = rstreams("sub", f"mm2://127.0.0.1:{free_port()}", "range")
    assert result.returncode == 4
    assert b"cannot connect" in result.stderr


def _handshake_of(*command: str) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    """Run ``rstreams COMMAND`` (with ``{address}`` for the broker's) against a
    broker of our own (a sans-I/O machine on a socket in a thread) that
    answers one subscription with b"only"; the result and what the client sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    hellos: list[bytes] = []

    def broker() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(20)
            machine = Connection(Role.SERVER, optional=[ExtensionSpec.batch_ack(64), ExtensionSpec(name="pubsub")])
            while not machine.subscriptions:
                data = connection.recv(65536)
                if not data:
                    return
                hellos.append(data)
                machine.receive_data(data)
                machine.events()
                connection.sendall(machine.data_to_send())
            [destination] = machine.subscriptions
            machine.send_message(destination, b"only")
            machine.complete(destination)
            connection.sendall(machine.data_to_send())
            while connection.recv(65536):
                pass

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    try:
        result = rstreams(*(part.format(address=f"127.0.0.1:{port}") for part in command))
    finally:
        thread.join(20)
        listener.close()
    return result, b"".join(hellos)


def test_sub_suggests_a_window_of_prefetch() -> None:
    # batch-ack's count in the client's handshake is --prefetch.
    result, sent = _handshake_of("sub", "mm2://{address}", "things", "--prefetch", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"only\n"
    assert b"batch-ack:max-count=5" in sent


def test_mm2_sub_suggests_the_largest_window_by_default() -> None:
    # With no --window, rstreams mm2 sub suggests what the client may hold
    # (max_pending_messages, 1024), as rstreams sub mm2:// does for an
    # adaptive subscriber; its acks follow what it prints.
    result, sent = _handshake_of("mm2", "sub", "{address}", "things")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"only\n"
    assert b"batch-ack:max-count=1024" in sent


# ---- rstreams mm2 sub | send ---------------------------------------------------------------


def test_mm2_sub_prints_payloads_as_rstreams_sub_does(broker: Mm2Serve) -> None:
    result = rstreams("mm2", "sub", broker.address, "range?count=3", "--format", "hex")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == RANGE_3_HEX


def test_mm2_send_then_sub_with_a_filter_and_properties(broker: Mm2Serve) -> None:
    sent = rstreams("mm2", "send", broker.address, "chat", "hello", "there", "--property", "room:Tlobby", "--property", "n:N3")
    assert sent.returncode == 0, sent.stderr
    other = rstreams("mm2", "send", broker.address, "chat", "elsewhere", "--property", "room:Tattic")
    assert other.returncode == 0, other.stderr
    result = rstreams(
        "mm2", "sub", broker.address, "chat?history=256", "--filter", "room=Tlobby;n>=N3", "--properties", "--count", "2"
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [
        {"properties": {"room": "lobby", "n": 3}, "payload": "hello"},
        {"properties": {"room": "lobby", "n": 3}, "payload": "there"},
    ]


def test_a_send_without_properties_reaches_a_tcp_subscriber_as_sent(broker: Mm2Serve) -> None:
    sent = rstreams("mm2", "send", broker.address, "sensors", "plain bytes")
    assert sent.returncode == 0, sent.stderr
    result = rstreams("sub", f"tcp://{broker.urls['tcp']}", "sensors?history=1", "--count", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"plain bytes\n"


@pytest.mark.parametrize("window", [[], ["--window", "1"]])
def test_mm2_send_to_something_that_is_not_a_topic_exits_1(broker: Mm2Serve, window: list[str]) -> None:
    # (It exited 0: the broker acked the SENDs and dropped them.)
    result = rstreams("mm2", "send", broker.address, "nothing-here", "x", "y", *window)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(b"rstreams: the broker dropped what was sent to 'nothing-here': no such publisher"), result.stderr


def test_mm2_sub_reports_a_failing_stream(broker: Mm2Serve) -> None:
    result = rstreams("mm2", "sub", broker.address, "fail?after=1", "--format", "hex")
    assert result.returncode == 1
    assert result.stdout.splitlines() == RANGE_3_HEX[:1]
    assert b"failing after 1" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("sub", "chat", "--filter", "room=lobby"),  # a text value needs its T
        ("sub", "chat", "--filter", "n~N3"),  # ~ is for text only
        ("send", "chat", "x", "--property", "room:lobby"),
        ("send", "chat", "x", "--property", "Room:Tx"),
        ("sub", "chat", "--window", "0"),
    ],
)
def test_bad_arguments_exit_2(broker: Mm2Serve, args: tuple[str, ...]) -> None:
    command, destination, *rest = args
    result = rstreams("mm2", command, broker.address, destination, *rest)
    assert result.returncode == 2, result.stderr
    assert b"rstreams" in result.stderr


def test_mm2_cannot_connect() -> None:
    for command in (("sub", "chat"), ("send", "chat", "x")):
        result = rstreams("mm2", command[0], f"127.0.0.1:{free_port()}", *command[1:])
        assert result.returncode == 4, result.stderr
        assert b"cannot connect" in result.stderr


def test_mm2_help_has_examples_and_exit_statuses() -> None:
    result = rstreams("mm2", "--help")
    assert result.returncode == 0
    assert result.stdout.count(b"rstreams mm2 ") >= 3
    assert b"exit status:" in result.stdout


def test_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    for server in serve("--micromsg2", "127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem"), log=tmp_path / "log"):
        assert "mm2s" in server.urls
        result = rstreams("mm2", "sub", server.address, "range?count=3", "--tls", "--ca", str(tmp_path / "ca.pem"), "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == RANGE_3_HEX
        result = rstreams("sub", f"mm2s://{server.address}", "range?count=3", "--ca", str(tmp_path / "ca.pem"), "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == RANGE_3_HEX


def test_mm2_sub_prints_what_decodes_before_a_message_that_does_not_and_stops_at_count(broker: Mm2Serve) -> None:
    # The four messages arrive together and are taken as one batch: the two
    # that decode as msgpack are printed, then the third fails with exit 5.
    # --count stops at exactly its count, even inside a batch.
    sent = rstreams("mm2", "send", broker.address, "chat", "1", "2", "hello", "3", "--property", "case:Tdecode")
    assert sent.returncode == 0, sent.stderr
    result = rstreams("mm2", "sub", broker.address, "chat?history=256", "--filter", "case=Tdecode", "--format", "msgpack")
    assert result.returncode == 5, result.stderr
    assert result.stdout.splitlines() == [b"49", b"50"]
    assert b"message 2 is" in result.stderr
    counted = rstreams("mm2", "sub", broker.address, "range?count=1000", "--count", "5", "--format", "hex")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.splitlines() == [f"{n:016x}".encode() for n in range(5)]


def test_a_broker_that_closes_before_its_handshake_is_a_failed_connect() -> None:
    # MicroMsg2 has no goodbye, so a close once connected is its normal end
    # (exit 3); one before the handshake finished is a failed connect, exit 4
    # as for every other scheme (it was 3). (A cut at 2 bytes, found by
    # bench/chaos.py.)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def close_at_once() -> None:
            connection, _ = listener.accept()
            connection.close()

        closer = threading.Thread(target=close_at_once, daemon=True)
        closer.start()
        result = rstreams("sub", f"mm2://127.0.0.1:{port}", "things")
        closer.join(10)
    assert result.returncode == 4, result.stderr
    assert result.stderr == b"rstreams: the peer closed the connection during the handshake\n"
