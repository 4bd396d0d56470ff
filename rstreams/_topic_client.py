"""Publishing into a peer's topic from a client session.

The client serves its values as a publisher on its own session and
subscribes the server's ``TOPIC/publish?source=NAME`` to it; the server
pulls only what the topic has room for (see :mod:`rstreams._topic`). With a
``producer`` id the elements carry sequence numbers, and the topic drops any
it already holds from that producer: a retried attempt publishes exactly
once.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterable, Iterable
from typing import Any

from ._codecs import CodecLike, resolve_codec
from ._publish import Sink
from ._session import Session
from ._topic_core import encode_sequenced

__all__ = ["PUBLISH_BATCH", "PUBLISH_SUFFIX", "publish_to_topic"]

#: publish_to_topic hands a synchronous iterable over in batches of this many.
PUBLISH_BATCH = 256
#: The suffix of the route that clients publish through.
PUBLISH_SUFFIX = "/publish"


async def publish_to_topic(
    session: Session,
    topic: str,
    values: Iterable[Any] | AsyncIterable[Any],
    *,
    codec: CodecLike = None,
    source: str | None = None,
    producer: str | None = None,
    batches: bool = False,
) -> int:
    """Publish ``values`` into the peer's topic ``topic``; return how many.

    The session must have been opened with an ``app`` (a :class:`Router`,
    possibly empty): a route named ``source`` (default: a fresh name) is
    added to it for the duration of the call, and the server subscribes back
    to it. The server asks only for what the topic has room for, so a full
    topic holds this call back instead of filling memory: a synchronous
    iterable is read at most PUBLISH_BATCH values ahead of demand, an async
    iterable one value (each is sent as soon as it comes and demand allows;
    values that come with no wait between them are written together).
    Returns once the server has accepted every element into the topic.

    With a ``producer`` id, elements are numbered from 0 and the topic
    keeps, per producer id, how far it got: publishing the same values again
    under the same id (a retried task) adds only what it does not hold yet.
    The values must then be the same, in the same order, on every attempt.
    The return value counts the elements sent, duplicates included.

    With ``batches``, ``values`` is an async iterable of lists of values
    (a source that gets them in bursts: a network read, a poll), and each
    list goes as one batch as soon as it comes, instead of a value at a
    time.

    Raises:
        ValueError: the session has no app to serve the source from, or
            ``batches`` with a synchronous iterable.
        PublisherError: the topic refused (closed, or unknown).

    Cancellation cancels the source; elements already accepted stay published.
    """
    app = session.app
    if app is None:
        raise ValueError("publish_to_topic needs a session opened with app=rstreams.Router()")
    if batches and not isinstance(values, AsyncIterable):
        raise ValueError("batches=True needs an async iterable of lists of values")
    encoder = resolve_codec(codec)
    source = source or f"rstreams-topic-source-{next(_source_numbers)}"
    count = 0
    sequence = itertools.count()

    def element(value: Any) -> Any:
        data = encoder.encode(value) if encoder is not None else value
        if producer is None:
            return data
        if encoder is None and not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"publishing with a producer id needs bytes or a codec, got {type(data).__name__}")
        return encode_sequenced(next(sequence), bytes(data))

    async def publisher(sink: Sink) -> None:
        nonlocal count
        batch: list[Any] = []

        async def flush() -> None:
            nonlocal count, batch
            await sink.send_many(batch)
            count += len(batch)
            batch = []

        if isinstance(values, AsyncIterable):
            # A live source (a sensor): send each value (or list) as it
            # comes, so nothing waits in a batch for the next reading.
            if batches:
                async for values_now in values:
                    batch = [element(value) for value in values_now]
                    if batch:
                        await flush()
                return
            # A value at a time through Sink.send, whose runs let a source
            # that has values ready (an iterator over a buffer) have them
            # written together, while one that waits between values has
            # each sent at once (see "Runs of send" in rstreams._publish).
            async for value in values:
                await sink.send(element(value))
                count += 1
            return
        for value in values:
            batch.append(element(value))
            if len(batch) >= PUBLISH_BATCH:
                await flush()
        if batch:
            await flush()

    app.add(source, publisher)
    try:
        name = f"{topic}{PUBLISH_SUFFIX}?source={source}" + (f"&producer={producer}" if producer is not None else "")
        async with session.subscribe(name, prefetch=1) as done:
            async for _ in done:
                pass
    finally:
        # Router has no public removal; the route was ours for this call only.
        app._routes.pop(source, None)
    return count


_source_numbers = itertools.count()
