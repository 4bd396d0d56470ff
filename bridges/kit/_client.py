"""A bridge's client as an rstreams :class:`~rstreams.Peer`.

What ``rstreams.connect("emp://...")`` returns: subscriptions opened on it
are fed by the bridge over its own connection, each stream by one task in
the peer's nursery (:meth:`BridgePeer.run_stream`). Returning from that task
completes the stream, raising fails it with what was raised, and the
subscriber leaving early cancels the task. When the connection ends, every
open stream ends with the error the bridge derives from why
(:meth:`BridgePeer.stream_error`), and no new one can open.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import trio
from trio.lowlevel import enable_ki_protection

from rstreams import SessionClosed
from rstreams.support import FeedPeer, StreamFeed, caller_sees_its_own_exception

from ._connection import BridgeConnection
from ._errors import copy_error

__all__ = ["BridgePeer", "open_bridge_peer"]

ConnectionT = TypeVar("ConnectionT", bound=BridgeConnection)  # type: ignore[type-arg]
PeerT = TypeVar("PeerT", bound="BridgePeer[Any]")


class BridgePeer(FeedPeer, Generic[ConnectionT]):
    """Subscriptions fed over one bridge connection, one task per stream.

    Open it with :func:`open_bridge_peer`, which runs the stream tasks and
    closes the connection at the end.
    """

    def __init__(self, connection: ConnectionT) -> None:
        super().__init__()
        self.connection = connection
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[int, trio.CancelScope] = {}

    @abc.abstractmethod
    async def run_stream(self, feed: StreamFeed) -> None:
        """Feed one stream until it is done (returning completes it)."""

    def stream_error(self, reason: BaseException) -> BaseException:
        """What open streams raise once the connection ended for ``reason``."""
        return copy_error(reason)

    def open_stream(self, feed: StreamFeed) -> None:
        if self._nursery is None:
            raise RuntimeError("open the peer with bridges.kit.open_bridge_peer before subscribing")
        scope = self._scopes[feed.id] = trio.CancelScope()
        self._nursery.start_soon(self._feed, feed, scope, name=f"stream {feed.name}")

    async def _feed(self, feed: StreamFeed, scope: trio.CancelScope) -> None:
        try:
            with scope:
                try:
                    await self.run_stream(feed)
                except Exception as exc:
                    feed.fail(exc)
                else:
                    feed.complete()
        finally:
            self._scopes.pop(feed.id, None)

    def stream_cancelled(self, feed: StreamFeed) -> None:
        scope = self._scopes.get(feed.id)
        if scope is not None:
            scope.cancel()

    @enable_ki_protection
    async def _watch(self) -> None:
        await self.connection.wait_ended()
        reason = self.connection.end_reason
        assert reason is not None
        self.end_streams(self.stream_error(reason))

    async def aclose(self) -> None:
        """End every stream, say the protocol's goodbye and close the connection."""
        self.end_streams(SessionClosed("closed by this side", by_peer=False))
        await self.connection.aclose()


@asynccontextmanager
async def open_bridge_peer(peer: PeerT) -> AsyncIterator[PeerT]:
    """Run ``peer``'s stream tasks for the duration of the block; close it at the end.

    The connection must already be open (handshake done); it is closed when
    the block ends (forcefully if the block is cancelled).
    """
    with caller_sees_its_own_exception():
        async with trio.open_nursery() as nursery:
            peer._nursery = nursery
            nursery.start_soon(peer._watch)
            try:
                yield peer
            finally:
                with trio.CancelScope(shield=True):
                    await peer.aclose()
                nursery.cancel_scope.cancel()
