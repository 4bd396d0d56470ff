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
from collections.abc import AsyncIterable, Callable, Iterable
from typing import Any

import trio

from ._codecs import CodecLike, resolve_codec
from ._groups import caller_sees_its_own_exception
from ._publish import Sink
from ._session import Session
from ._subscribe import Subscription
from ._topic_core import encode_sequenced

__all__ = [
    "CONFIRM_INTERVAL",
    "CONFIRM_PARAMETER",
    "PUBLISH_BATCH",
    "PUBLISH_SUFFIX",
    "confirmation_count",
    "publish_to_topic",
    "read_confirmations",
]

#: publish_to_topic hands a synchronous iterable over in batches of this many.
PUBLISH_BATCH = 256
#: The suffix of the route that clients publish through.
PUBLISH_SUFFIX = "/publish"
#: The parameter of ``TOPIC/publish`` that asks for confirmations: with
#: ``confirm=1`` the stream back to the publishing client carries, whenever
#: it has demand, the count of the source's elements the topic holds so far
#: (taken in, or already held from the same producer id), as ASCII decimal
#: digits. Counts only grow; one that finds no demand is left out, and the
#: next one says more. Without it the stream carries no elements.
CONFIRM_PARAMETER = "confirm"
#: How often a publishing client asks for a confirmation, in seconds: each
#: costs both sides a message and the client a wake-up, and a count a
#: fraction of a second old says where to start again as well as a fresh
#: one (one per batch cost ``rstreams pub tcp://`` 5-8% of its lines a
#: second).
CONFIRM_INTERVAL = 0.05
# The longest count a confirmation may carry (any count of elements fits).
_MAX_CONFIRMATION_DIGITS = 20


async def publish_to_topic(
    session: Session,
    topic: str,
    values: Iterable[Any] | AsyncIterable[Any],
    *,
    codec: CodecLike = None,
    source: str | None = None,
    producer: str | None = None,
    batches: bool = False,
    on_confirmed: Callable[[int], object] | None = None,
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

    With ``on_confirmed``, the topic confirms as it goes: the callback gets
    how many of the values the topic holds so far (the first N, counts only
    growing), about every :data:`CONFIRM_INTERVAL` seconds while values go
    in. So a caller whose connection is lost midway knows that the first N
    are in, and where to start again (a retry from there may add some that
    were in already; a ``producer`` id drops those). A server without
    confirmations never calls it.

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
        if on_confirmed is None:
            async with session.subscribe(name, prefetch=1) as done:
                async for _ in done:
                    pass
        else:
            async with session.subscribe(f"{name}&{CONFIRM_PARAMETER}=1", prefetch=0) as confirmations:
                await read_confirmations(confirmations, on_confirmed)
    finally:
        app.remove(source)  # (the route was ours for this call only)
    return count


_source_numbers = itertools.count()


async def read_confirmations(confirmations: Subscription, on_confirmed: Callable[[int], object]) -> None:
    """Read a ``TOPIC/publish?...&confirm=1`` stream (entered with
    ``prefetch=0``) until it ends, passing each count to ``on_confirmed``.

    One confirmation is asked for at a time, at most every
    :data:`CONFIRM_INTERVAL` seconds: the topic sends one when it took
    values and the ask is there, so a stream of values costs a few
    confirmations a second, not one per batch. Returns when the topic
    completes the stream (it then holds every value); raises what ends it
    otherwise, as iterating it would.
    """
    asked = True
    confirmations.request(1)
    with caller_sees_its_own_exception():  # (the stream's end, as without the nursery)
        async with trio.open_nursery() as nursery:

            async def ask_again() -> None:
                nonlocal asked
                while True:
                    await trio.sleep(CONFIRM_INTERVAL)
                    if not asked:
                        asked = True
                        confirmations.request(1)

            nursery.start_soon(ask_again)
            async for element in confirmations:
                count = confirmation_count(element)
                if count is not None:
                    on_confirmed(count)
                asked = False
            nursery.cancel_scope.cancel()


def confirmation_count(element: bytes) -> int | None:
    """The count a confirmation carries: ASCII digits, below 10**20. None
    for anything else (a server's mistake, or a digit string too long to
    parse in bounded time), which is passed over, never raised."""
    if len(element) <= _MAX_CONFIRMATION_DIGITS and element.isdigit():
        return int(element)
    return None
