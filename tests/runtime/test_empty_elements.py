"""Empty elements count in the queue's bytes, so a peer that never reads cannot grow the server.

A publication's queue is bounded by ``max_queued_bytes`` and the
connection's outbound half, both in bytes. An empty element used to count
nothing there: the demo's ``blob?size=0`` with a large demand, never read,
grew the server by 65 MB a second. Each empty element now counts
``EMPTY_ELEMENT_BYTES`` (one), so the queue holds at most
``max_queued_bytes`` of them, as it could hold 1-byte elements, and the
publisher waits for the writer. Over a real socket, with a raw peer.
"""

from __future__ import annotations

import msgpack
import trio

import rstreams
import rstreams.demo
from rstreams.protocol import EMPTY_ELEMENT_BYTES, MessageType

from ._support import RawPeer, new_session
from .test_memory_budget import wait_until_stuck

KiB = 1024
MAX_QUEUED = 16 * KiB
CONFIG = rstreams.SessionConfig(max_queued_bytes=MAX_QUEUED)
COUNT = 100_000


async def test_a_peer_that_never_reads_empty_elements_holds_the_publisher_and_loses_nothing() -> None:
    server = rstreams.Server(rstreams.demo.app, config=CONFIG)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", rstreams.listener_port(listeners[0])))
            await peer.handshake()
            session = await new_session(server)
            # Subscribe with demand for all of them, and read nothing.
            await peer.stream.send_all(msgpack.packb([1, f"blob?count={COUNT}&size=0", 1, COUNT]))
            highest = 0

            def queued() -> int:
                nonlocal highest
                handle = session._publications.get(1)
                held = handle.sink.statistics().queued_bytes if handle is not None and handle.sink is not None else 0
                highest = max(highest, held)
                return held

            await wait_until_stuck(queued)
            # The publisher waits with most of its elements unsent: its queue
            # holds about max_queued_bytes of empty elements (one of its runs
            # past it at most), not all of them.
            handle = session._publications[1]
            assert handle.sink is not None
            sent = handle.sink.statistics().elements_sent
            assert sent < COUNT, sent
            assert 0 < highest <= MAX_QUEUED + rstreams.demo.BLOB_BATCH_ELEMENTS * EMPTY_ELEMENT_BYTES, highest
            # Now read: every element arrives, each empty, then onComplete.
            received = 0
            unpacker = msgpack.Unpacker(raw=False)
            completed = False
            while not completed:
                data = await peer.stream.receive_some(1 << 20)
                assert data
                unpacker.feed(data)
                for message in unpacker:
                    assert message[0] not in (MessageType.ON_ERROR, MessageType.GOODBYE), message
                    if message[0] == MessageType.ON_NEXT and message[1] == 1:
                        assert message[2] == b""
                        received += 1
                    elif message[0] == MessageType.ON_COMPLETE and message[1] == 1:
                        completed = True
            assert received == COUNT
            nursery.cancel_scope.cancel()
