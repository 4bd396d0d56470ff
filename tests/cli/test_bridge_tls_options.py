"""Every bridge command checks its TLS options the same way (``rstreams.cli.client_ssl_context``).

``--ca`` without ``--tls`` is a usage error, and a CA file that cannot be
loaded says so; both exit 2 before any connection is tried (the port named
here has nothing listening).
"""

from __future__ import annotations

import pytest

from ._support import rstreams

COMMANDS = [
    ["emp", "ping", "127.0.0.1:1"],
    ["epoxy", "call", "127.0.0.1:1", "x", "y"],
    ["mm2", "send", "127.0.0.1:1", "chat", "x"],
    ["relink", "send", "127.0.0.1:1", "x", "part"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=[command[0] for command in COMMANDS])
def test_ca_without_tls_is_a_usage_error(command: list[str]) -> None:
    result = rstreams(*command, "--ca", "/nonexistent-ca.pem")
    assert result.returncode == 2
    assert b"--ca needs --tls" in result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=[command[0] for command in COMMANDS])
def test_a_ca_file_that_cannot_be_loaded_is_named(command: list[str]) -> None:
    result = rstreams(*command, "--tls", "--ca", "/nonexistent-ca.pem")
    assert result.returncode == 2
    assert b"cannot load the CA file '/nonexistent-ca.pem'" in result.stderr
