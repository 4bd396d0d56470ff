"""A peer that asks and never reads the answers is stopped, not buffered (issue 18, defect 3).

Hello, then thousands of subscribes to an unknown 60 KB name, never reading:
every one is answered with onError ``no such publisher: NAME``, about as
large. The reader used to read on while the writer was blocked, so the
answers piled up in the control buffer without bound. Now the reader stops
reading while more than ``max_unsent_control`` bytes of answers wait: the
peer's sends block, and the bytes the server has read stay bounded. The
server's other sessions go on as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import msgpack
import trio
import trio.testing

import rstreams

from ._support import fetch_range, new_session, standard_app

_pack = msgpack.Packer(use_bin_type=True).pack
MiB = 1024 * 1024
NAME = "n" * 60_000  # an unknown publisher, answered with onError naming it
SUBSCRIBES = 1000  # 60 MB in all: far more than any buffer on the way
LIMIT = 256 * 1024
CONFIG = rstreams.SessionConfig(max_unsent_control=LIMIT)


def burst(sink: rstreams.Sink) -> None:
    """Answers at once with 256 elements of 8 bytes: 2 KiB for a subscribe
    of about 20 bytes."""
    sink.send_packed_nowait(bytes(8 * 256))


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[rstreams.Server, int]]:
    server = rstreams.Server(standard_app(burst=rstreams.Route(burst, element_size=8)), config=CONFIG)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        yield server, rstreams.listener_port(listeners[0])
        nursery.cancel_scope.cancel()


async def wait_until_stuck(values: list[Callable[[], object]]) -> None:
    """Until the ``values`` stop changing with every task blocked: the
    flood's send is blocked and the server reads nothing more."""
    previous: object = None
    unchanged = 0
    while unchanged < 5:
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
        current = [value() for value in values]
        unchanged = unchanged + 1 if current == previous else 0
        previous = current


async def test_a_peer_that_never_reads_is_stopped_and_others_are_served() -> None:
    with trio.fail_after(30):
        async with serving() as (server, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            session = await new_session(server)
            sent = 0

            async def flood() -> None:
                nonlocal sent
                await stream.send_all(_pack([0, 0, []]))
                for subscriber in range(1, SUBSCRIBES + 1):
                    message = _pack([1, NAME, subscriber, 0])
                    await stream.send_all(message)
                    sent += len(message)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                await wait_until_stuck([lambda: sent, lambda: session.statistics().bytes_received])
                total = SUBSCRIBES * len(_pack([1, NAME, 1, 0]))
                received = session.statistics().bytes_received
                # The flood's sends block: the server stopped reading long
                # before the end, with its answers bounded.
                assert sent < total // 2, (sent, total)
                assert received < 16 * MiB, received
                assert session._conn.control_bytes <= LIMIT + CONFIG.read_size + 2 * len(NAME)
                assert not session.closed
                # Another client of the same server is served meanwhile.
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as other:
                    await fetch_range(other, 100)
                nursery.cancel_scope.cancel()
            await trio.aclose_forcefully(stream)
            await session.wait_closed()


async def test_a_peer_that_reads_again_gets_every_answer() -> None:
    # Stopping is a pause: once the peer reads, reading resumes and every
    # subscribe is answered, in order.
    n = 200
    with trio.fail_after(30):
        async with serving() as (server, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            session = await new_session(server)
            async with trio.open_nursery() as nursery:

                async def flood() -> None:
                    await stream.send_all(_pack([0, 0, []]))
                    for subscriber in range(1, n + 1):
                        await stream.send_all(_pack([1, NAME, subscriber, 0]))

                nursery.start_soon(flood)
                await wait_until_stuck([lambda: session.statistics().bytes_received])
                unpacker = msgpack.Unpacker(raw=False, max_buffer_size=64 * MiB)
                errors: list[int] = []
                while len(errors) < n:
                    data = await stream.receive_some(1 << 20)
                    assert data, "the server closed the connection"
                    unpacker.feed(data)
                    errors.extend(message[1] for message in unpacker if message[0] == 7)
                assert errors == list(range(1, n + 1))
            assert not session.closed
            await trio.aclose_forcefully(stream)


async def test_elements_answered_at_once_count_as_answers() -> None:
    # A publisher that answers at once queues its elements in the reader's
    # pass: a flood of small subscribes to it, never read, must stop too.
    subscribes = 40_000  # 80 MB of answers for under 1 MB of subscribes
    with trio.fail_after(30):
        async with serving() as (server, port):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            session = await new_session(server)
            sent = 0

            async def flood() -> None:
                nonlocal sent
                await stream.send_all(_pack([0, 0, []]))
                for subscriber in range(1, subscribes + 1):
                    message = _pack([1, "burst", subscriber, 256])
                    await stream.send_all(message)
                    sent += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                await wait_until_stuck([lambda: sent, lambda: session.statistics().bytes_received])
                queued = sum(session._conn.queued_bytes(subscriber) for subscriber in range(1, sent + 1))
                assert sent < subscribes // 2, sent
                # The bound, plus what one read's subscribes queue (a read
                # of up to read_size bytes, 2 KiB for each subscribe of
                # about 20 bytes).
                assert queued <= LIMIT + CONFIG.read_size // 20 * 2048, queued
                assert not session.closed
                async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as other:
                    await fetch_range(other, 100)
                nursery.cancel_scope.cancel()
            await trio.aclose_forcefully(stream)
            await session.wait_closed()
