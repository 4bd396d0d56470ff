"""A bridge command whose peer never answers ends at its ``--timeout``, exit status 4 and one line, no traceback;
a ``--timeout`` that is not a finite number of seconds above 0 is a usage error (exit status 2), as it is for ``sub``.

The peer is a listening socket that never accepts: the connection is made
(the kernel's backlog) and nothing is ever read or written. Every bridge's
client command turns its timeout into the same status through
``run_command(..., error_status=..., too_slow=...)``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ._support import rstreams

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def silent_peer() -> Iterator[str]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize(
    "command, message",
    [
        (["emp", "ping", "{peer}"], b"rstreams: no answer within 0.5 s\n"),
        (["epoxy", "call", "{peer}", "svc", "Method", "--payload-hex", "00"], b"rstreams: no answer within 0.5 s\n"),
        (["relink", "send", "{peer}", "rstreams", "range?count=1"], b"rstreams: no answer within 0.5 s\n"),
        (["mm2", "sub", "{peer}", "things"], b"rstreams: no handshake within 0.5 s\n"),
    ],
    ids=["emp", "epoxy", "relink", "mm2"],
)
def test_a_silent_peer_ends_the_command_at_its_timeout(silent_peer: str, command: list[str], message: bytes) -> None:
    result = rstreams(*(part.format(peer=silent_peer) for part in command), "--timeout", "0.5")
    assert result.returncode == 4, result.stderr
    assert result.stderr == message


@pytest.mark.parametrize(
    "command",
    [
        ["emp", "ping", "{peer}"],
        ["epoxy", "call", "{peer}", "svc", "Method"],
        ["relink", "send", "{peer}", "rstreams", "range?count=1"],
        ["mm2", "sub", "{peer}", "things"],
    ],
    ids=["emp", "epoxy", "relink", "mm2"],
)
def test_a_timeout_that_is_not_positive_finite_seconds_is_a_usage_error(silent_peer: str, command: list[str]) -> None:
    # (nan passed the commands' own "<= 0" check and failed later with a traceback.)
    for value in ("0", "-1", "nan", "inf", "soon"):
        result = rstreams(*(part.format(peer=silent_peer) for part in command), "--timeout", value)
        assert result.returncode == 2, (value, result.stderr)
        assert b"argument --timeout: expected seconds" in result.stderr, (value, result.stderr)
        assert b"Traceback" not in result.stderr


# ---- run_command's translation, in process ---------------------------------------------------


class PeerGone(Exception):
    pass


def _status(exc: BaseException) -> tuple[int, str] | None:
    return (3, "the peer went away") if isinstance(exc, PeerGone) else None


def test_run_command_reports_what_error_status_knows(capsys: pytest.CaptureFixture[str]) -> None:
    import trio

    from rstreams.cli import run_command

    async def gone() -> int:
        raise PeerGone

    async def gone_in_a_nursery() -> int:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gone)
        return 0

    async def slow() -> int:
        with trio.fail_after(0):
            await trio.sleep(1)
        return 0

    assert run_command(gone, error_status=_status) == 3
    assert run_command(gone_in_a_nursery, error_status=_status) == 3  # a group of one error
    assert run_command(slow, error_status=_status, too_slow="no answer within 0 s") == 4
    assert capsys.readouterr().err == "rstreams: the peer went away\n" * 2 + "rstreams: no answer within 0 s\n"


def test_run_command_lets_what_error_status_does_not_know_through() -> None:
    import trio

    from rstreams.cli import run_command

    async def broken() -> int:
        raise KeyError("a bug")

    async def slow() -> int:
        with trio.fail_after(0):
            await trio.sleep(1)
        return 0

    with pytest.raises(KeyError):
        run_command(broken, error_status=_status)
    with pytest.raises(trio.TooSlowError):
        run_command(slow, error_status=_status)  # no too_slow: not the command's timeout
