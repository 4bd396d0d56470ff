"""``rstreams pub mm2://... NAME`` and ``pub epoxy://... NAME``: lines into a topic over a bridge.

Each test starts its own ``rstreams serve rstreams.demo:app --micromsg2
--epoxy --tcp`` (with a trustme certificate for ``mm2s://`` and
``epoxys://``), so the demo's ``chat`` topic holds only what the test
published, and reads it back over TCP with ``rstreams sub
'chat?history=N' --count N``: the topic's history hands over what is
already in it, and a line the server is still putting in arrives live, so
the read does not depend on timing.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import trio
import trustme

from ._support import COMMAND_TIMEOUT, ServeProcess, cut_upstream_after, free_port, rstreams, start, stop

LISTENERS = ["--micromsg2", "127.0.0.1:0", "--epoxy", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]
SECURE = {"mm2": "mm2s", "epoxy": "epoxys"}


BRIDGE_SERVING_LINE = re.compile(r"^rstreams: serving \S+ on (?P<url>[a-z0-9]+://\S+)$")


class BridgeServeProcess(ServeProcess):
    # ServeProcess reads the native schemes' serving lines only.
    def wait_serving(self, listeners: int = 1, timeout: float = COMMAND_TIMEOUT) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.urls) < listeners:
            try:
                line = self.output.readline(max(0.0, deadline - time.monotonic())).decode()
            except (EOFError, TimeoutError) as exc:
                raise AssertionError(f"no serving line ({exc}); stderr:\n{self.log()}") from None
            match = BRIDGE_SERVING_LINE.match(line)
            assert match, f"unexpected output line {line!r}"
            self.urls.append(match["url"])
        return self.urls


class Server:
    def __init__(self, process: ServeProcess, trust: list[str]) -> None:
        self.urls = {url.split("://")[0]: url for url in process.urls}
        self.trust = trust
        self.process = process
        self.native = self.urls.get("tcp") or self.urls["tls"]  # tls:// when served with a certificate

    def read_chat(self, count: int) -> list[bytes]:
        result = rstreams("sub", self.native, f"chat?history={count}", "--count", str(count), *self.trust)
        assert result.returncode == 0, result.stderr
        lines: list[bytes] = result.stdout.splitlines()
        return lines


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with BridgeServeProcess.start(["serve", "rstreams.demo:app", *LISTENERS], tmp_path / "serve.log", listeners=3) as process:
        yield Server(process, [])


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[Server]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    tls = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    with BridgeServeProcess.start(["serve", "rstreams.demo:app", *LISTENERS, *tls], tmp_path / "serve.log", listeners=3) as process:
        yield Server(process, ["--ca", str(tmp_path / "ca.pem")])


def _messages(scheme: str, count: int) -> list[dict[str, str]]:
    return [{"from": scheme, "text": f"hello {i} över {scheme}"} for i in range(count)]


def _jsonl(messages: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(message, ensure_ascii=False) + "\n" for message in messages).encode()


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_jsonl_lines_go_into_the_chat_topic(server: Server, scheme: str) -> None:
    messages = _messages(scheme, 5)
    result = rstreams("pub", server.urls[scheme], "chat", "--format", "jsonl", input=_jsonl(messages))
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert result.stderr == b"rstreams: published 5 lines into chat\n"
    assert [json.loads(line) for line in server.read_chat(5)] == messages


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_over_tls_with_ca(tls_server: Server, scheme: str) -> None:
    secure = SECURE[scheme]
    assert tls_server.urls[secure].startswith(f"{secure}://")
    messages = _messages(secure, 3)
    result = rstreams("pub", tls_server.urls[secure], "chat", "--format", "jsonl", *tls_server.trust, input=_jsonl(messages))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b"rstreams: published 3 lines into chat\n"
    assert [json.loads(line) for line in tls_server.read_chat(3)] == messages


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_more_lines_than_the_window_from_a_file_as_msgpack(server: Server, scheme: str, tmp_path: Path) -> None:
    # 200 elements: past MicroMsg2's default ack window (64), so the acks
    # pace the SENDs; blank lines are skipped by the JSON formats.
    messages = _messages(scheme, 200)
    path = tmp_path / "lines.jsonl"
    path.write_bytes(_jsonl(messages).replace(b"\n", b"\n\n", 3))
    result = rstreams("pub", server.urls[scheme], "chat", "--file", str(path), "--format", "msgpack")
    assert result.returncode == 0, result.stderr
    assert result.stderr == b"rstreams: published 200 lines into chat\n"
    read_back = rstreams("sub", server.native, "chat?history=200", "--count", "200", "--format", "hex")
    assert read_back.returncode == 0, read_back.stderr
    assert [msgpack.unpackb(bytes.fromhex(line.decode())) for line in read_back.stdout.splitlines()] == messages


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_a_line_that_is_not_json_ends_the_input_there(server: Server, scheme: str) -> None:
    messages = _messages(scheme, 2)
    result = rstreams("pub", server.urls[scheme], "chat", "--format", "jsonl", input=_jsonl(messages) + b"not json\n{}\n")
    assert result.returncode == 5
    assert b"line 3: not JSON" in result.stderr
    assert b"the 2 lines before it were published" in result.stderr
    assert [json.loads(line) for line in server.read_chat(2)] == messages


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
@pytest.mark.parametrize("name", ["no-such-topic", "range"])
def test_a_name_that_is_not_a_topic_is_a_publisher_error_and_nothing_is_published(server: Server, scheme: str, name: str) -> None:
    # It said "published 1 lines into no-such-topic" (exit 0): the server
    # had dropped them, MicroMsg2 after acking the SEND, Epoxy's event with
    # no response to say it in. Over tcp:// this is exit 1.
    result = rstreams("pub", server.urls[scheme], name, input=b"x\n")
    assert result.returncode == 1, result.stderr
    assert b"published" not in result.stderr
    expected = {"mm2": b"the broker dropped what was sent to '%s': no such publisher" % name.encode(),
                "epoxy": b"publisher error: no such topic: %s" % name.encode()}[scheme]
    assert result.stderr.startswith(b"rstreams: " + expected), result.stderr
    assert result.stderr.count(b"\n") == 1


def test_one_line_is_one_line(server: Server) -> None:
    result = rstreams("pub", server.urls["mm2"], "chat", input=b"x\n")
    assert (result.returncode, result.stderr) == (0, b"rstreams: published 1 line into chat\n")


@pytest.mark.parametrize("scheme", ["emp", "emps", "relink"])
def test_a_bridge_that_cannot_publish_is_a_usage_error(scheme: str) -> None:
    result = rstreams("pub", f"{scheme}://127.0.0.1:{free_port()}", "chat", input=b"x\n")
    assert result.returncode == 2
    assert f"pub cannot publish over {scheme}://".encode() in result.stderr
    assert b"mm2://" in result.stderr and b"epoxy://" in result.stderr and b"tcp://" in result.stderr


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_a_name_with_parameters_is_a_usage_error(scheme: str) -> None:
    result = rstreams("pub", f"{scheme}://127.0.0.1:{free_port()}", "echo?source=", input=b"x\n")
    assert result.returncode == 2
    assert b"NAME is a topic, without parameters" in result.stderr


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_a_refused_connection(scheme: str) -> None:
    result = rstreams("pub", f"{scheme}://127.0.0.1:{free_port()}", "chat", input=b"x\n")
    assert result.returncode == 4
    assert result.stderr.startswith(b"rstreams: cannot connect")


def test_a_lost_connection_says_how_many_lines_left(server: Server) -> None:
    # As over tcp:// (test_pub_client): a MicroMsg2 connection cut once
    # 100 KB went up, and pub says how many lines it sent before.
    host, port = server.urls["mm2"].removeprefix("mm2://").rsplit(":", 1)
    lines = _jsonl(_messages("mm2", 20_000))
    with cut_upstream_after(host, int(port), 100_000) as front:
        result = rstreams("pub", f"mm2://127.0.0.1:{front}", "chat", "--format", "jsonl", input=lines)
    # (MicroMsg2 has no goodbye: a close after the handshake is its normal
    # end, 3; a reset, 4. Either way the stream did not finish.)
    assert result.returncode in (3, 4), result.stderr
    found = re.fullmatch(
        rb"rstreams: .*\((\d+) lines? sent to chat before it, (none|all|the first (\d+)) of them confirmed\)\n", result.stderr
    )
    assert found is not None, result.stderr
    sent = int(found.group(1))
    assert 0 < sent < 20_000
    # Acked SENDs are in the topic: the count is what the broker confirmed.
    confirmed = {b"none": 0, b"all": sent}.get(found.group(2), int(found.group(3) or 0))
    assert confirmed <= sent


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_stopped_by_a_signal_it_says_how_many_lines_left(server: Server, scheme: str) -> None:
    # As over tcp:// (test_client_signals): exit 130 and where to start again.
    publisher = start("pub", server.urls[scheme], "chat", stdin=subprocess.PIPE)
    try:
        assert publisher.stdin is not None and publisher.stderr is not None
        publisher.stdin.write(b"one\ntwo\n")
        publisher.stdin.flush()
        assert server.read_chat(2) == [b"one", b"two"]  # (in the topic: pub waits for a third line)
        assert stop(publisher, signal.SIGINT) == 130
        said = publisher.stderr.read()
        if scheme == "epoxy":
            # (Epoxy's events have no answer: nothing confirms them.)
            assert said == b"rstreams: stopped by SIGINT: 2 lines sent to chat before it, none of them confirmed\n"
        else:
            # (Both are in the topic; their acks may or may not be back yet.)
            assert re.fullmatch(
                rb"rstreams: stopped by SIGINT: 2 lines sent to chat before it, (none|the first 1|all) of them confirmed\n", said
            ), said
    finally:
        stop(publisher)
        for stream in (publisher.stdin, publisher.stdout, publisher.stderr):
            if stream is not None:
                stream.close()


class _ReadySource:
    # What pub hands a bridge's publish (rstreams.support.ReadyElements and
    # ConfirmedElements): all its values ready at once, the asks recorded.
    def __init__(self, values: list[bytes]) -> None:
        self.values = list(values)
        self.asked: list[tuple[int, int]] = []  # (max_count, given)
        self.confirmed: list[int] = []

    def __aiter__(self) -> _ReadySource:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if not self.values:
            raise StopAsyncIteration
        return self.values.pop(0)

    def take_ready(self, max_count: int) -> list[bytes]:
        given, self.values = self.values[:max_count], self.values[max_count:]
        self.asked.append((max_count, len(given)))
        return given

    def confirm(self, count: int) -> None:
        self.confirmed.append(count)


@pytest.mark.parametrize("scheme", ["mm2", "epoxy"])
def test_a_bridge_publishes_the_elements_ready_together_and_mm2_confirms_them(server: Server, scheme: str) -> None:
    # The bridges' publish takes, after each element it awaited, those the
    # source has ready (take_ready) to send them in one write; MicroMsg2's
    # acks then confirm them (report_confirmed). Every element still goes
    # into the topic, once and in order.
    from rstreams.support import find_scheme

    bridge, _ = find_scheme(server.urls[scheme], scheme)  # (as pub finds it)
    publish = bridge.publish
    assert publish is not None
    values = [b"ready %d" % n for n in range(100)]
    source = _ReadySource(values)

    async def main() -> int:
        with trio.fail_after(COMMAND_TIMEOUT):
            return await publish(server.urls[scheme], "chat", source)

    assert trio.run(main) == 100
    assert source.asked and max(given for _, given in source.asked) > 1, source.asked
    assert sum(given for _, given in source.asked) >= 99 - len(source.asked)  # (all but those awaited one by one)
    assert server.read_chat(100) == values
    if scheme == "mm2":
        assert source.confirmed and source.confirmed[-1] == 100
    else:
        assert source.confirmed == []  # (Epoxy's events have no answer)
