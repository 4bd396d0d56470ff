"""Authentication on the command line (issue 18, item 10): ``serve --token``,
``--token-file``, ``$RSTREAMS_SERVER_TOKEN``; ``--token`` / ``$RSTREAMS_TOKEN``
on the client commands; mutual TLS with ``--tls-client-ca`` and
``--cert`` / ``--key``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trustme

from ._support import COMMAND_TIMEOUT, RSTREAMS, ROOT, OutputLines, ServeProcess, rstreams, start, stop

TOKEN = "cli-s3cret"


def rstreams_env(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([RSTREAMS, *args], cwd=ROOT, capture_output=True, timeout=COMMAND_TIMEOUT, env={**os.environ, **env})


def test_serve_token_admits_only_clients_with_it(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--token", TOKEN]
    with ServeProcess.start(args, tmp_path / "log") as server:
        good = rstreams("sub", server.url, "range?count=2", "--format", "hex", "--token", TOKEN)
        assert good.returncode == 0, good.stderr
        assert good.stdout == b"0000000000000000\n0000000000000001\n"
        for extra in ([], ["--token", "wrong"]):
            refused = rstreams("sub", server.url, "range?count=2", *extra)
            assert refused.returncode == 3, refused.stderr
            assert b"rstreams: the server said goodbye: authentication failed" in refused.stderr
        from_environment = rstreams_env("sub", server.url, "range?count=1", "--format", "hex", env={"RSTREAMS_TOKEN": TOKEN})
        assert from_environment.returncode == 0, from_environment.stderr
        listed = rstreams("ls", server.url, "--token", TOKEN)
        assert listed.returncode == 0, listed.stderr
        assert b"range" in listed.stdout
        pinged = rstreams("ping", server.url, "--count", "1", "--token", TOKEN)
        assert pinged.returncode == 0, pinged.stderr
        not_pinged = rstreams("ping", server.url, "--count", "1")
        assert not_pinged.returncode != 0
    assert TOKEN.encode() not in (tmp_path / "log").read_bytes()


def test_serve_token_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--token-file", str(token_file)]
    with ServeProcess.start(args, tmp_path / "log") as server:
        assert rstreams("sub", server.url, "range?count=1", "--token", TOKEN).returncode == 0
        assert rstreams("sub", server.url, "range?count=1").returncode == 3
    monkeypatch.setenv("RSTREAMS_SERVER_TOKEN", TOKEN)  # (the commands started here inherit it)
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log2") as server:
        assert rstreams("sub", server.url, "range?count=1", "--token", TOKEN).returncode == 0
        assert rstreams("sub", server.url, "range?count=1").returncode == 3


def test_bad_token_options_are_usage_errors(tmp_path: Path) -> None:
    missing = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--token-file", str(tmp_path / "missing"))
    assert missing.returncode == 2
    assert b"cannot read the token file" in missing.stderr
    (tmp_path / "empty").write_text("\n")
    empty = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--token-file", str(tmp_path / "empty"))
    assert empty.returncode == 2
    assert b"is empty" in empty.stderr
    both = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--token", "a", "--token-file", "b")
    assert both.returncode == 2
    no_tls = rstreams("serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--tls-client-ca", "ca.pem")
    assert no_tls.returncode == 2
    assert b"--tls-client-ca needs --tls-cert" in no_tls.stderr


CLIENT_COMMANDS = [
    ["sub", "tcp://127.0.0.1:1", "range"],
    ["ls", "tcp://127.0.0.1:1"],
    ["ping", "tcp://127.0.0.1:1", "--count", "1"],
    ["stats", "tcp://127.0.0.1:1", "--count", "1"],
    ["pub", "tcp://127.0.0.1:1", "chat"],
]


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=[command[0] for command in CLIENT_COMMANDS])
def test_a_token_no_hello_can_carry_is_a_usage_error(command: list[str]) -> None:
    # Too long, or not UTF-8 (argv bytes that are not arrive as surrogates):
    # stats and pub died with a traceback, the others named no option.
    for token in ("x" * 8193, os.fsdecode(b"\xff")):
        result = subprocess.run(
            [RSTREAMS, *command, "--token", token], cwd=ROOT, capture_output=True, timeout=COMMAND_TIMEOUT, input=b""
        )
        assert result.returncode == 2, result.stderr
        assert b"argument --token:" in result.stderr
        assert b"Traceback" not in result.stderr
        from_environment = rstreams_env(*command, env={"RSTREAMS_TOKEN": "x" * 8193})
        assert from_environment.returncode == 2, from_environment.stderr
        assert from_environment.stderr.startswith(b"rstreams: $RSTREAMS_TOKEN: token longer than 8192 bytes")


def test_a_server_token_no_hello_can_carry_is_a_usage_error(tmp_path: Path) -> None:
    # (A token file that is not UTF-8 died with a traceback; the others served,
    # refusing every client.)
    (tmp_path / "latin-1").write_bytes(b"caf\xe9\n")
    serve = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0"]
    cases = [
        (rstreams(*serve, "--token-file", str(tmp_path / "latin-1")), b"is not UTF-8 text"),
        (rstreams(*serve, "--token", os.fsdecode(b"caf\xe9")), b"--token: token must be UTF-8 text"),
        (rstreams_env(*serve, env={"RSTREAMS_SERVER_TOKEN": "x" * 8193}), b"$RSTREAMS_SERVER_TOKEN: token longer than 8192 bytes"),
    ]
    for result, message in cases:
        assert result.returncode == 2, result.stderr
        assert message in result.stderr
        assert b"Traceback" not in result.stderr


def test_mutual_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    server_cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client_ca = trustme.CA()
    client_ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    client = client_ca.issue_cert("client@example.org")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "client-key.pem"))
    stranger = trustme.CA().issue_cert("stranger@example.org")
    stranger.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "stranger.pem"))
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem")]
    args += ["--tls-client-ca", str(tmp_path / "client-ca.pem")]
    with ServeProcess.start(args, tmp_path / "log") as server:
        assert server.url.startswith("tls://")
        ca_args = ["--ca", str(tmp_path / "ca.pem")]
        good = rstreams("sub", server.url, "range?count=2", "--format", "hex", *ca_args, "--cert", str(tmp_path / "client.pem"), "--key", str(tmp_path / "client-key.pem"))
        assert good.returncode == 0, good.stderr
        assert good.stdout == b"0000000000000000\n0000000000000001\n"
        without = rstreams("sub", server.url, "range?count=2", *ca_args)
        assert without.returncode != 0 and without.stdout == b""
        wrong = rstreams("sub", server.url, "range?count=2", *ca_args, "--cert", str(tmp_path / "stranger.pem"))
        assert wrong.returncode != 0 and wrong.stdout == b""


def test_client_certificate_options_need_tls(tmp_path: Path) -> None:
    result = rstreams("sub", "tcp://127.0.0.1:1", "range", "--cert", "client.pem")
    assert result.returncode == 2
    assert b"--cert is for tls://" in result.stderr
    result = rstreams("sub", "tls://127.0.0.1:1", "range", "--key", "key.pem")
    assert result.returncode == 2
    assert b"--key needs --cert" in result.stderr


def test_tls_failures_say_what_to_do(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--tls-cert", str(tmp_path / "server.pem")]
    with ServeProcess.start(args, tmp_path / "log") as server:
        untrusted = rstreams("sub", server.url, "range?count=1")
        assert untrusted.returncode == 4
        assert b"certificate not trusted: pass --ca FILE" in untrusted.stderr
        plain = rstreams("sub", server.url.replace("tls://", "tcp://"), "range?count=1")
        assert plain.returncode == 3
        assert b"rstreams: the server said goodbye: this port speaks TLS: use tls://" in plain.stderr
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0"]
    with ServeProcess.start(args, tmp_path / "log2") as server:
        secure = rstreams("sub", server.url.replace("tcp://", "tls://"), "range?count=1")
        assert secure.returncode == 4
        assert b"this port does not speak TLS: use tcp://" in secure.stderr


def test_serve_warns_that_the_token_does_not_cover_bridge_listeners(tmp_path: Path) -> None:
    args = ["serve", "examples.demo:app", "--tcp", "127.0.0.1:0", "--emp", "127.0.0.1:0", "--token", TOKEN]
    with open(tmp_path / "log", "wb") as log:
        process = start(*args, stderr=log)
    try:
        assert process.stdout is not None
        lines = OutputLines(process.stdout).readlines(2)  # serving on tcp://..., on emp://...
        assert all(line.startswith(b"rstreams: serving ") for line in lines), lines
    finally:
        stop(process)
        assert process.stdout is not None
        process.stdout.close()
    assert "--token does not cover the bridges' listeners (emp)" in (tmp_path / "log").read_text()
