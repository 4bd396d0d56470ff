"""Serving an :class:`rstreams.Router` through a bridge.

Each bridge connection gets its own in-process session to the app
(:func:`rstreams.open_local_session`), so subscribing through a bridge goes
through the same router, demand and codecs as a TCP subscriber's. Protocols
whose answer is one message (EMP's response, Epoxy's) collect a whole stream
with :func:`collect_elements`, bounded in bytes.
"""

from __future__ import annotations

from rstreams import Peer, SubscriptionError

__all__ = ["collect_elements", "ResponseTooLarge", "COLLECT_PREFETCH"]

#: Demand per subscription while collecting a response.
COLLECT_PREFETCH = 64


class ResponseTooLarge(SubscriptionError):
    """A stream's elements passed the byte limit of one response (the stream was cancelled).

    Attributes:
        limit: the limit, in bytes.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"the stream exceeds {limit} bytes")
        self.limit = limit


async def collect_elements(peer: Peer, name: str, *, max_bytes: int, prefetch: int = COLLECT_PREFETCH) -> list[bytes]:
    """Subscribe to ``name`` and return all its elements once it completes.

    Raises:
        ResponseTooLarge: the elements passed ``max_bytes`` (the stream is cancelled).
        SubscriptionError: the publisher refused or failed (UnknownPublisher,
            PublisherError).
    """
    elements: list[bytes] = []
    size = 0
    async with peer.subscribe(name, prefetch=prefetch) as subscription:
        async for element in subscription:
            size += len(element)
            if size > max_bytes:
                raise ResponseTooLarge(max_bytes)
            elements.append(bytes(element))
    return elements
