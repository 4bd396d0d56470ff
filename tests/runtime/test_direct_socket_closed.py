"""A closed socket ends every wait of ``DirectSocket`` with ClosedResourceError.

The session closes the socket when its writer fails (the peer reset the
connection) while the reader may be parked elsewhere, waiting for its
answers to be taken; the reader then calls ``receive_some`` on the closed
socket. Whichever way that read goes (it reads at once, it busy-polls, or it
waits for readability, also when another read holds the poll slot), and
whether the socket was closed before the call or during it, it must raise
what ``trio.SocketStream`` raises, ``trio.ClosedResourceError``: a closed
socket's descriptor is -1, and trio's ``wait_readable`` on it raises
``ValueError``, which escaped the session as an unexpected error.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from rstreams._direct_socket import DirectSocket, _this_runs_poll_slot

Pair = tuple[trio.SocketStream, trio.SocketStream]


async def _unix_pair() -> Pair:
    left, right = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return trio.SocketStream(left), trio.SocketStream(right)


async def _tcp_pair() -> Pair:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    return server, client


@pytest.fixture(params=["unix", "tcp"])
def make_pair(request: pytest.FixtureRequest) -> Callable[[], Awaitable[Pair]]:
    return _unix_pair if request.param == "unix" else _tcp_pair


@asynccontextmanager
async def _waiting_reader(make_pair: Callable[[], Awaitable[Pair]]) -> AsyncIterator[tuple[DirectSocket, Pair]]:
    # A DirectSocket whose last read was short: its next read does not try
    # the socket at once, it waits (or polls) first, as the session's reader
    # does between a peer's messages.
    ours, theirs = await make_pair()
    direct = DirectSocket(ours)
    await theirs.send_all(b"a")
    received = b""
    while not received:
        received = await direct.receive_some(100)
    assert received == b"a"
    try:
        yield direct, (ours, theirs)
    finally:
        await ours.aclose()
        await theirs.aclose()


async def _close_after_checkpoints(stream: trio.SocketStream, count: int = 3) -> None:
    # While a read busy-polls nothing blocks, so wait_all_tasks_blocked
    # would never return: let the polling read go round a few times first.
    for _ in range(count):
        await trio.lowlevel.checkpoint()
    await stream.aclose()


async def _close_when_blocked(stream: trio.SocketStream) -> None:
    await trio.testing.wait_all_tasks_blocked()
    await stream.aclose()


# ---- closed before the call ----------------------------------------------------


async def test_a_read_at_once_on_a_closed_socket_raises_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]],
) -> None:
    with trio.fail_after(10):
        ours, theirs = await make_pair()
        direct = DirectSocket(ours)  # (a new one reads at once)
        await ours.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await direct.receive_some(100)
        with pytest.raises(trio.ClosedResourceError):
            await direct.receive_into([bytearray(10)])
        await theirs.aclose()


@pytest.mark.parametrize("poll_for", [0.0, 5.0])
async def test_a_waiting_read_on_a_closed_socket_raises_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]], poll_for: float
) -> None:
    with trio.fail_after(10):
        async with _waiting_reader(make_pair) as (direct, (ours, _)):
            await ours.aclose()
            with pytest.raises(trio.ClosedResourceError):
                await direct.receive_some(100, poll_for=poll_for)
            with pytest.raises(trio.ClosedResourceError):
                await direct.receive_into([bytearray(10)])


async def test_a_read_that_finds_the_poll_slot_taken_on_a_closed_socket_raises_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]],
) -> None:
    # Another read keeps the run loop awake: this one goes straight to the
    # wait for readability, the path the session's reader took in the fault.
    with trio.fail_after(10):
        async with _waiting_reader(make_pair) as (direct, (ours, _)):
            slot = _this_runs_poll_slot()
            slot.taken = True
            try:
                await ours.aclose()
                with pytest.raises(trio.ClosedResourceError):
                    await direct.receive_some(100, poll_for=5.0)
            finally:
                slot.taken = False


# ---- closed during the call ----------------------------------------------------


async def test_a_socket_closed_while_a_read_waits_ends_it_with_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]],
) -> None:
    with trio.fail_after(10):
        async with _waiting_reader(make_pair) as (direct, (ours, _)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_close_when_blocked, ours)
                with pytest.raises(trio.ClosedResourceError):
                    await direct.receive_some(100)
            assert not direct.reader_idle


async def test_a_socket_closed_while_a_read_polls_ends_it_with_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]],
) -> None:
    with trio.fail_after(10):
        async with _waiting_reader(make_pair) as (direct, (ours, _)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_close_after_checkpoints, ours)
                with pytest.raises(trio.ClosedResourceError):
                    await direct.receive_some(100, poll_for=5.0)  # (ends long before 5 s)
            assert not direct.reader_idle
            assert not _this_runs_poll_slot().taken  # handed back


async def test_a_socket_closed_while_receive_into_waits_ends_it_with_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]],
) -> None:
    with trio.fail_after(10):
        async with _waiting_reader(make_pair) as (direct, (ours, _)), trio.open_nursery() as nursery:
            nursery.start_soon(_close_when_blocked, ours)
            with pytest.raises(trio.ClosedResourceError):
                await direct.receive_into([bytearray(10)])


async def test_a_socket_closed_while_a_write_waits_for_room_ends_it_with_closed_resource_error(
    make_pair: Callable[[], Awaitable[Pair]],
) -> None:
    with trio.fail_after(10):
        ours, theirs = await make_pair()
        ours.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        direct = DirectSocket(ours)
        # More than the buffers on both sides take (a few hundred KiB at
        # most), and the peer never reads: the write waits for room.
        data = bytearray(16 * 1024 * 1024)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_close_when_blocked, ours)
            with pytest.raises(trio.ClosedResourceError):
                await direct.send_buffers([data])
        with pytest.raises(trio.ClosedResourceError):
            await direct.send_buffers([bytearray(10)])  # and after it
        await theirs.aclose()
