"""``rstreams serve --relink``, ``rstreams relink send|echo`` and ``rstreams sub relink://``, as a user runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from ._support import OutputLines, free_port, rstreams, start, stop

URL = re.compile(r"^rstreams: serving (?P<label>.+) on (?P<scheme>relinks?|tcp)://(?P<host>.+):(?P<port>\d+)(?P<path>/\S*)?$")


class Serving:
    def __init__(self, process: subprocess.Popen[bytes], listeners: int) -> None:
        self.process = process
        self.output = OutputLines(process.stdout)  # type: ignore[arg-type]
        self.urls: dict[str, str] = {}
        self.paths: dict[str, str] = {}
        for _ in range(listeners):
            line = self.output.readline().decode()
            match = URL.match(line)
            assert match, line
            self.urls[match["scheme"]] = f"{match['host']}:{match['port']}"
            self.paths[match["scheme"]] = match["path"] or ""

    @property
    def relink(self) -> str:
        return self.urls.get("relink") or self.urls["relinks"]


def running(*args: str, listeners: int = 1, log: Path) -> Iterator[Serving]:
    with open(log, "wb") as stderr:
        process = start(*args, stderr=stderr)
    try:
        yield Serving(process, listeners)
    finally:
        if process.poll() is None:
            stop(process)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(scope="module")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    """``rstreams serve examples.demo:app --relink 127.0.0.1:0 --relink-window 8``."""
    log = tmp_path_factory.mktemp("relink") / "stderr.log"
    yield from running("serve", "examples.demo:app", "--relink", "127.0.0.1:0", "--relink-window", "8", log=log)


def hex_element(n: int) -> str:
    return "\u0000" * 7 + chr(n) if n < 128 else {"hex": "%016x" % n}  # type: ignore[return-value]


def test_serve_announces_the_endpoint(app_server: Serving) -> None:
    assert app_server.paths["relink"] == "/rstreams"


def test_send_subscribes_and_prints_one_json_line_per_reply(app_server: Serving) -> None:
    result = rstreams("relink", "send", app_server.relink, "rstreams", "range?count=3", "--replies", "3")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == [[hex_element(n)] for n in range(3)]


def test_parts_that_are_not_utf8_are_printed_as_hex(app_server: Serving) -> None:
    # Element 128 ends with byte 0x80: not UTF-8. 200 elements, a window of 8.
    result = rstreams(
        "relink", "send", app_server.relink, "rstreams", "range?count=200", "--replies", "200",
        "--channel-id-size", "2", "--channel", "513",
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [[hex_element(n)] for n in range(200)]
    assert lines[128] == [{"hex": "0000000000000080"}]


def test_a_publisher_error_is_a_two_part_reply(app_server: Serving) -> None:
    result = rstreams("relink", "send", app_server.relink, "rstreams", "nothing-here")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["", "no such publisher: nothing-here"]
    # More replies asked for than come before the close: exit 3.
    short = rstreams("relink", "send", app_server.relink, "rstreams", "range?count=2", "--replies", "3")
    assert short.returncode == 3
    assert len(short.stdout.splitlines()) == 2
    assert b"rstreams: the listener closed the channel" in short.stderr


def test_send_exit_statuses(app_server: Serving) -> None:
    refused = rstreams("relink", "send", app_server.relink, "other-endpoint", "x")
    assert refused.returncode == 1
    assert b"refused the handshake" in refused.stderr
    unequal = rstreams("relink", "send", app_server.relink, "rstreams", "x", "--channel-id-size", "9")
    assert unequal.returncode == 2
    too_big = rstreams("relink", "send", app_server.relink, "rstreams", "x", "--channel", "1")
    assert too_big.returncode == 2 and b"does not fit" in too_big.stderr
    nobody = rstreams("relink", "send", f"127.0.0.1:{free_port()}", "rstreams", "x")
    assert nobody.returncode == 4
    assert b"rstreams: cannot connect" in nobody.stderr
    assert b"Traceback" not in refused.stderr + nobody.stderr


def test_sub_reads_an_app_over_relink(app_server: Serving) -> None:
    result = rstreams("sub", f"relink://{app_server.relink}/rstreams", "range?count=20", "--format", "hex", "--prefetch", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [b"%016x" % n for n in range(20)]
    default_endpoint = rstreams("sub", f"relink://{app_server.relink}", "range?count=2", "--format", "hex")
    assert default_endpoint.stdout.splitlines() == [b"%016x" % n for n in range(2)]


def test_sub_over_relink_has_sub_s_exit_statuses(app_server: Serving) -> None:
    unknown = rstreams("sub", f"relink://{app_server.relink}", "nothing-here")
    assert unknown.returncode == 1
    assert unknown.stderr == b"rstreams: publisher error: no such publisher: nothing-here\n"
    counted = rstreams("sub", f"relink://{app_server.relink}", "range?count=100000", "--format", "hex", "--count", "2")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.splitlines() == [b"0000000000000000", b"0000000000000001"]
    refused = rstreams("sub", f"relink://127.0.0.1:{free_port()}", "range")
    assert refused.returncode == 4
    bad = rstreams("sub", f"relink://{app_server.relink}?id_size=12", "range")
    assert bad.returncode == 2 and b"id_size" in bad.stderr


def test_echo_listener(tmp_path: Path) -> None:
    for echo in running("relink", "echo", "127.0.0.1:0", "--endpoint", "echo", log=tmp_path / "log"):
        assert echo.paths["relink"] == "/echo"
        result = rstreams("relink", "send", echo.relink, "echo", "hello", "", "wörld", "--channel-id-size", "1", "--channel", "7")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == ["hello", "", "wörld"]
        unnamed = rstreams("relink", "send", echo.relink, "echo", "x")
        assert unnamed.returncode == 0 and json.loads(unnamed.stdout) == ["x"]
        # A part is the argument's bytes as the shell passed them, UTF-8 or not
        # (it died encoding them, with a traceback).
        raw = rstreams("relink", "send", echo.relink, "echo", os.fsdecode(b"caf\xe9"))
        assert raw.returncode == 0, raw.stderr
        assert json.loads(raw.stdout) == [{"hex": "636166e9"}]
        assert stop(echo.process) == 130


def test_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    args = ("serve", "examples.demo:app", "--relink", "127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem"))
    for server in running(*args, log=tmp_path / "log"):
        assert "relinks" in server.urls
        result = rstreams(
            "relink", "send", server.relink, "rstreams", "range?count=1", "--tls", "--ca", str(tmp_path / "ca.pem")
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == [hex_element(0)]


def test_relink_help_has_examples_and_exit_statuses() -> None:
    result = rstreams("relink", "--help")
    assert result.returncode == 0
    assert result.stdout.count(b"rstreams relink ") >= 3
    assert b"exit status" in result.stdout


def test_a_bad_window_is_a_usage_error() -> None:
    result = rstreams("serve", "examples.demo:app", "--relink", "127.0.0.1:0", "--relink-window", "0")
    assert result.returncode == 2
    assert b"--relink-window" in result.stderr and b"Traceback" not in result.stderr


def test_serve_on_another_endpoint(tmp_path: Path) -> None:
    args = ("serve", "examples.demo:app", "--relink", "127.0.0.1:0", "--relink-endpoint", "events")
    for server in running(*args, log=tmp_path / "log"):
        assert server.paths["relink"] == "/events"
        result = rstreams("sub", f"relink://{server.relink}/events", "range?count=2", "--format", "hex")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [b"0000000000000000", b"0000000000000001"]
        assert rstreams("relink", "send", server.relink, "rstreams", "range").returncode == 1  # not that endpoint


def test_echo_cannot_listen_on_a_taken_port(tmp_path: Path) -> None:
    for echo in running("relink", "echo", "127.0.0.1:0", log=tmp_path / "log"):
        taken = rstreams("relink", "echo", echo.relink)
        assert taken.returncode == 4
        assert b"cannot listen" in taken.stderr


def test_an_endpoint_name_no_request_could_carry_is_a_usage_error() -> None:
    # (serve and echo served an endpoint nobody could reach; send failed with exit 1.)
    for name in (os.fsdecode(b"caf\xe9"), "e" * 256):
        for command in (
            ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--relink", "127.0.0.1:0", "--relink-endpoint", name],
            ["relink", "echo", "127.0.0.1:0", "--endpoint", name],
            ["relink", "send", "127.0.0.1:1", name, "x"],
        ):
            result = rstreams(*command)
            assert result.returncode == 2, (command[0], result.stderr)
            assert b"an endpoint name" in result.stderr
