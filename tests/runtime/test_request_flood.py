"""A flood of requests is taken in bounded steps, so other connections keep their turns.

A request answers nothing, so the reader's rule of letting the writer go
every 32 events that left answers never fired for them: a read of 256 KiB of
3-byte requests was dispatched in one step of the run loop (87,000 of them),
and an adversarial run's flood of requests for one stream made another
client's round trip take a second. The reader now also yields every
``_EVENTS_PER_STEP`` events.
"""

from __future__ import annotations

import msgpack
import trio

import rstreams
from rstreams._session import _EVENTS_PER_STEP

from ._support import RawPeer, fetch_range, new_session, standard_app, wait_for

_pack = msgpack.Packer(use_bin_type=True).pack


async def idle(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    """Takes demand and never sends, like a ticker between two ticks."""
    await trio.sleep_forever()


async def test_a_flood_of_requests_is_dispatched_a_bounded_number_per_step() -> None:
    requests = 20_000
    most = 0
    last = 0
    session: rstreams.Session | None = None

    def demand() -> int:
        conn = session._conn if session is not None else None
        return conn.publication_demand(1) if conn is not None and conn.is_publishing(1) else 0

    class Steps(trio.abc.Instrument):
        # How much of the stream's demand arrived in each task step.
        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal most, last
            now = demand()
            most = max(most, now - last)
            last = now

    server = rstreams.Server(standard_app(idle=idle))
    steps = Steps()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            port = rstreams.listener_port(listeners[0])
            peer = RawPeer(await trio.open_tcp_stream("127.0.0.1", port))
            await peer.handshake()
            session = await new_session(server)
            await peer.send_raw(_pack([1, "idle", 1, 0]))
            await wait_for(lambda: session is not None and session._conn.is_publishing(1))
            trio.lowlevel.add_instrument(steps)
            try:
                await peer.send_raw(_pack([2, 1, 1]) * requests)  # one write, read in few reads
                await wait_for(lambda: demand() == requests)
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert 0 < most <= _EVENTS_PER_STEP <= 4096, most  # (a read brought 16,384 in one step)
            # And the session serves on.
            async with rstreams.open_session(f"tcp://127.0.0.1:{port}") as bystander:
                await fetch_range(bystander, 10)
            nursery.cancel_scope.cancel()
