"""FeedPeer and StreamFeed: a peer that feeds subscriptions itself, as a bridge's client does.

``RecordingPeer`` records what the subscriptions ask of it; the tests play
the bridge by hand through the ``StreamFeed`` each subscription gets.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import rstreams
import rstreams.testing
from rstreams.support import FeedPeer, Peer, StreamFeed

UNBOUNDED = 2**63 - 1


class Broken(Exception):
    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class RecordingPeer(FeedPeer):
    """Records open/request/cancel; accepts each stream at once unless ``auto_subscribe`` is off."""

    def __init__(self, *, auto_subscribe: bool = True) -> None:
        super().__init__()
        self.auto_subscribe = auto_subscribe
        self.calls: list[tuple[object, ...]] = []
        self.opened: list[StreamFeed] = []

    def open_stream(self, feed: StreamFeed) -> None:
        self.calls.append(("open", feed.name, feed.demand))
        self.opened.append(feed)
        if self.auto_subscribe:
            feed.subscribed()

    def stream_requested(self, feed: StreamFeed, n: int) -> None:
        self.calls.append(("requested", feed.id, n, feed.demand))

    def stream_cancelled(self, feed: StreamFeed) -> None:
        self.calls.append(("cancelled", feed.id))

    async def aclose(self) -> None:
        self.end_streams(rstreams.SessionClosed("closed", by_peer=False))
        await trio.lowlevel.checkpoint()


async def test_subscribe_opens_a_feed_with_the_initial_demand() -> None:
    peer = RecordingPeer()
    with trio.fail_after(5):
        async with peer.subscribe("ticks?rate=5", prefetch=4) as subscription:
            [feed] = peer.opened
            assert peer.calls == [("open", "ticks?rate=5", 4)]
            assert (feed.name, feed.demand, feed.ended, feed.cancelled) == ("ticks?rate=5", 4, False, False)
            assert subscription.subscriber == feed.id
            assert peer.feeds == [feed]
            assert subscription.statistics().state == "open"
            assert subscription.statistics().outstanding_demand == 4
        assert feed.cancelled and feed.ended
        assert peer.calls[-1] == ("cancelled", feed.id)
        assert peer.feeds == []
        async with peer.subscribe("other", prefetch=1):
            assert peer.opened[1].id != feed.id


async def test_delivering_more_than_demand_is_a_local_protocol_error() -> None:
    peer = RecordingPeer()
    with trio.fail_after(5):
        async with peer.subscribe("x", prefetch=2) as subscription:
            [feed] = peer.opened
            with pytest.raises(rstreams.LocalProtocolError, match="3 elements delivered with a demand of 2"):
                feed.deliver([b"a", b"b", b"c"])
            assert feed.demand == 2 and subscription.statistics().received == 0  # nothing delivered
            feed.deliver([b"a", b"b"])
            assert feed.demand == 0
            with pytest.raises(rstreams.LocalProtocolError):
                feed.deliver([b"c"])
            feed.deliver([])  # nothing is always fine
            assert subscription.statistics().received == 2


async def test_demand_adds_up_and_saturates() -> None:
    peer = RecordingPeer()
    with trio.fail_after(5):
        async with peer.subscribe("x", prefetch=0) as subscription:
            [feed] = peer.opened
            assert feed.demand == 0
            subscription.request(3)
            subscription.request(4)
            assert feed.demand == 7
            assert subscription.statistics().outstanding_demand == 7
            feed.deliver([b"1", b"2"])
            assert feed.demand == 5
            assert subscription.statistics().outstanding_demand == 5
            subscription.request(UNBOUNDED)
            assert feed.demand == UNBOUNDED
            subscription.request(10)
            assert feed.demand == UNBOUNDED
            assert subscription.statistics().outstanding_demand == UNBOUNDED
            assert [call for call in peer.calls if call[0] == "requested"] == [
                ("requested", feed.id, 3, 3),
                ("requested", feed.id, 4, 7),
                ("requested", feed.id, UNBOUNDED, UNBOUNDED),
                ("requested", feed.id, 10, UNBOUNDED),
            ]
        assert subscription.statistics().outstanding_demand == 0  # the feed is gone


async def test_automatic_demand_is_topped_up_as_elements_are_consumed() -> None:
    peer = RecordingPeer()
    with trio.fail_after(5):
        async with peer.subscribe("x", prefetch=4) as subscription:
            [feed] = peer.opened
            feed.deliver([b"0", b"1", b"2", b"3"])
            assert subscription.statistics().outstanding_demand == 0
            assert await subscription.__anext__() == b"0"
            assert await subscription.__anext__() == b"1"  # half the window consumed
            assert feed.demand == 2
            assert subscription.statistics().outstanding_demand == 2
            assert peer.calls[-1] == ("requested", feed.id, 2, 2)


async def test_deliver_complete_and_fail_as_the_subscriber_sees_them() -> None:
    peer = RecordingPeer()
    with trio.fail_after(5):
        async with peer.subscribe("done", prefetch=8) as subscription:
            [feed] = peer.opened
            feed.deliver([b"a", b"b"])
            feed.deliver([b"c"])
            feed.complete()
            assert feed.ended and not feed.cancelled
            assert [raw async for raw in subscription] == [b"a", b"b", b"c"]
            with pytest.raises(StopAsyncIteration):
                await subscription.__anext__()
            assert subscription.statistics().state == "completed"
            feed.deliver([b"late"])  # ignored once ended
            feed.fail(Broken("late", code=1))
            assert subscription.statistics().received == 3
        async with peer.subscribe("failing", prefetch=8) as subscription:
            feed = peer.opened[-1]
            feed.deliver([b"x"])
            feed.fail(Broken("it broke", code=7))
            assert await subscription.__anext__() == b"x"
            with pytest.raises(Broken, match="it broke") as info:
                await subscription.__anext__()
            assert info.value.code == 7
            assert subscription.statistics().state == "failed"
        assert not any(call[0] == "cancelled" for call in peer.calls)  # ended before leaving


async def test_subscribed_later_and_failure_before_it() -> None:
    peer = RecordingPeer(auto_subscribe=False)
    with trio.fail_after(5):
        entered = trio.Event()

        async def subscriber() -> None:
            async with peer.subscribe("slow", prefetch=1) as subscription:
                entered.set()
                assert [raw async for raw in subscription] == [b"only"]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(subscriber)
            await trio.testing.wait_all_tasks_blocked()
            assert not entered.is_set()  # waiting to be accepted
            feed = peer.opened[0]
            feed.subscribed(element_size=4)
            await entered.wait()
            feed.deliver([b"only"])
            feed.complete()
        # Failing before it was accepted: entering raises.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fail_soon, peer)
            with pytest.raises(Broken, match="refused"):
                async with peer.subscribe("refused"):
                    pytest.fail("the stream was refused")  # pragma: no cover
        assert peer.feeds == []


async def _fail_soon(peer: RecordingPeer) -> None:
    await trio.testing.wait_all_tasks_blocked()
    peer.opened[-1].fail(Broken("refused", code=2))


async def test_deliver_before_subscribed_accepts_the_stream() -> None:
    peer = RecordingPeer(auto_subscribe=False)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def accept() -> None:
                await trio.testing.wait_all_tasks_blocked()
                peer.opened[0].deliver([b"first"])

            nursery.start_soon(accept)
            async with peer.subscribe("x", prefetch=1) as subscription:
                assert await subscription.__anext__() == b"first"
                assert subscription.element_size == 0


async def test_end_streams_fails_every_open_stream_and_later_subscribes() -> None:
    peer = RecordingPeer()
    error = Broken("connection lost", code=9)
    raised: list[BaseException] = []
    with trio.fail_after(5):
        async with peer.subscribe("a", prefetch=2) as first, peer.subscribe("b", prefetch=2) as second:
            peer.opened[0].deliver([b"a0"])
            peer.end_streams(error)
            assert all(feed.ended for feed in peer.opened)
            assert peer.feeds == []
            assert await first.__anext__() == b"a0"
            for subscription in (first, second):
                with pytest.raises(Broken, match="connection lost") as info:
                    await subscription.__anext__()
                raised.append(info.value)
        for attempt in range(2):
            with pytest.raises(Broken, match="connection lost") as info:
                async with peer.subscribe("c"):
                    pytest.fail("the peer has ended")  # pragma: no cover
            raised.append(info.value)
        # The first reason wins.
        peer.end_streams(Broken("second reason", code=10))
        with pytest.raises(Broken, match="connection lost"):
            async with peer.subscribe("d"):
                pytest.fail("the peer has ended")  # pragma: no cover
    assert len(peer.opened) == 2  # refused before open_stream
    # Each raise is its own copy of the error, with its attributes.
    assert len({id(e) for e in [*raised, error]}) == len(raised) + 1
    assert all(type(e) is Broken and e.code == 9 and e.args == error.args for e in raised)


async def test_wait_demand_returns_when_demand_arrives_or_the_stream_ends() -> None:
    peer = RecordingPeer()
    returned: list[str] = []

    async def wait(feed: StreamFeed, label: str) -> None:
        await feed.wait_demand()
        returned.append(label)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            async with peer.subscribe("demand", prefetch=0) as on_demand:
                feed = peer.opened[-1]
                nursery.start_soon(wait, feed, "demand")
                await trio.testing.wait_all_tasks_blocked()
                assert returned == []
                on_demand.request(1)
                await trio.testing.wait_all_tasks_blocked()
                assert returned == ["demand"]
                await wait(feed, "already")  # demand is there: returns at once
                assert returned == ["demand", "already"]

            for ending in ("complete", "fail", "cancel"):
                async with peer.subscribe(ending, prefetch=0):
                    feed = peer.opened[-1]
                    nursery.start_soon(wait, feed, ending)
                    await trio.testing.wait_all_tasks_blocked()
                    assert returned[-1] != ending
                    if ending == "complete":
                        feed.complete()
                    elif ending == "fail":
                        feed.fail(Broken("x", code=0))
                    if ending != "cancel":
                        await trio.testing.wait_all_tasks_blocked()
                        assert returned[-1] == ending
                # Leaving the block cancels the stream.
                await trio.testing.wait_all_tasks_blocked()
                assert returned[-1] == ending
            assert feed.cancelled
        with trio.CancelScope() as scope:
            scope.cancel()
            await feed.wait_demand()  # checkpoints even when it need not wait
        assert scope.cancelled_caught


async def test_statistics_follow_the_feeds_demand() -> None:
    peer = RecordingPeer()
    with trio.fail_after(5):
        async with peer.subscribe("x", prefetch=6) as subscription:
            [feed] = peer.opened
            for deliver in (1, 2, 3):
                feed.deliver([b"e"] * deliver)
                stats = subscription.statistics()
                assert stats.outstanding_demand == feed.demand
            assert stats.outstanding_demand == 0 and stats.buffered == 6 and stats.received == 6


async def test_a_session_is_a_peer() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair() as (client, server):
            assert isinstance(client, Peer) and isinstance(server, Peer)
            assert isinstance(client, rstreams.Peer)
    assert not isinstance(client, FeedPeer)
    assert issubclass(RecordingPeer, rstreams.Peer)
