"""Serving an :class:`rstreams.Router` through a bridge.

Each bridge connection gets its own in-process session to the app
(:func:`rstreams.open_local_session`), so subscribing through a bridge goes
through the same router, demand and codecs as a TCP subscriber's. Protocols
whose answer is one message (EMP's response, Epoxy's) collect a whole stream
with :func:`collect_elements`, bounded in bytes.
"""

from __future__ import annotations

from rstreams import Peer, SubscriptionError, UnknownPublisher
from rstreams.protocol import DEFAULT_LIMITS, EMPTY_ELEMENT_BYTES

from ._budget import MemoryBudget

__all__ = [
    "collect_elements",
    "ResponseTooLarge",
    "COLLECT_PREFETCH",
    "check_name_fits",
    "COLLECT_MOST_ASKED",
    "COLLECT_COPIES",
]

#: The first ask of a response being collected, before the size of its
#: elements is known (its later asks are sized by the room left).
COLLECT_PREFETCH = 64

#: The most elements a response being collected keeps asked for at once.
COLLECT_MOST_ASKED = 65_536


#: What a response being collected within a budget counts, per byte of its
#: limit: its elements, and as much again for their copies on the way
#: through the app session (encoded by the publisher's side, decoded by
#: ours) while they are in flight.
COLLECT_COPIES = 2
def check_name_fits(name: str, *, room: int = 0) -> None:
    """Refuse a publisher name longer than wire v0 carries, before any session sees it.

    The in-process session to the app speaks wire v0: a longer name (a
    peer's 600 KB request) closed that session ("exceeds max_str_len"),
    failing every later request of the connection and logging a traceback
    each time. One check here serves every bridge that collects or
    subscribes through the kit.

    Args:
        room: bytes of the limit to keep free (a bridge whose own answer
            quotes the name within the same limit).

    Raises:
        UnknownPublisher: ``no such publisher: a name of N bytes`` (what the
            bridges answer for any name the app does not have).
    """
    limit = DEFAULT_LIMITS.max_string_size - room
    if len(name) > limit // 4:  # (at most 4 bytes a character: shorter ones always fit)
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise UnknownPublisher(name[:64], f"no such publisher: a name of {size} bytes")


class ResponseTooLarge(SubscriptionError):
    """A stream's elements passed the byte limit of one response (the stream was cancelled).

    Attributes:
        limit: the limit, in bytes.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"the stream exceeds {limit} bytes")
        self.limit = limit


async def collect_elements(
    peer: Peer,
    name: str,
    *,
    max_bytes: int,
    prefetch: int | None = None,
    budget: MemoryBudget | None = None,
) -> list[bytes]:
    """Subscribe to ``name`` and return all its elements once it completes.

    Args:
        max_bytes: the most element bytes of the response, an empty
            element counting ``rstreams.protocol.EMPTY_ELEMENT_BYTES`` as it
            does in a publication's queue (so at most ``max_bytes``
            elements, empty ones included: without it a stream of empty
            elements, which a peer can ask for, ``blob?size=0``, grew the
            response without bound; 2 million of them held 19 MB).
        prefetch: None (the default): ask for :data:`COLLECT_PREFETCH`
            elements, then keep asked for as many as the room left in
            ``max_bytes`` holds at the largest element seen so far (at least
            one, at most :data:`COLLECT_MOST_ASKED`), topped up each time
            half has come. So a stream of small elements is collected in
            few asks, and what is asked for and not yet come never holds
            more than the response may. An int: a fixed window of that many
            elements, as ``Peer.subscribe``'s.
        budget: the connection's memory budget: ``COLLECT_COPIES *
            max_bytes`` (``max_bytes`` is first cut to what the budget can
            hold) is taken from it before subscribing, waiting for room, so
            that the responses a connection builds never hold more than its
            budget; once the elements are complete, all but their own size
            is given back. The caller owns the rest,
            ``sum(map(len, elements))`` bytes, and gives them back once the
            response is queued (where the queued bytes take over).

    Raises:
        ResponseTooLarge: the elements passed ``max_bytes`` (the stream is cancelled).
        UnknownPublisher: ``name`` is longer than wire v0 carries
            (:func:`check_name_fits`): no session sees it.
        SubscriptionError: the publisher refused or failed (UnknownPublisher,
            PublisherError).
        The connection's end: the budget was closed while waiting for room.

    Cancellation: the stream is cancelled and nothing stays taken from ``budget``.
    """
    check_name_fits(name)
    reserved = 0
    if budget is not None:
        max_bytes = min(max_bytes, budget.limit // COLLECT_COPIES)
        # Whole, up front: responses that each took part of the room and
        # waited for more could wait for one another forever.
        reserved = COLLECT_COPIES * max_bytes
        await budget.take(reserved)
    elements: list[bytes] = []
    size = 0  # the elements' bytes
    counted = 0  # what they count against max_bytes: an empty one EMPTY_ELEMENT_BYTES
    try:
        async with peer.subscribe(name, prefetch=0 if prefetch is None else prefetch) as subscription:
            asked = outstanding = COLLECT_PREFETCH
            largest = 0
            if prefetch is None:
                subscription.request(asked)
            async for batch in subscription.batches():
                taken = list(map(bytes, batch))  # (a packed batch is sliced once)
                sizes = list(map(len, taken))
                nbytes = sum(sizes)
                size += nbytes
                counted += nbytes + EMPTY_ELEMENT_BYTES * sizes.count(0)
                if counted > max_bytes:
                    raise ResponseTooLarge(max_bytes)
                elements += taken
                if prefetch is None:
                    outstanding -= len(taken)
                    largest = max(largest, max(sizes, default=0))
                    if 2 * outstanding <= asked:
                        # What is asked for and still to come fits in the
                        # room left, by the largest element seen.
                        room = (max_bytes - counted) // max(largest, EMPTY_ELEMENT_BYTES)
                        more = min(room, COLLECT_MOST_ASKED) - outstanding
                        if more > 0 or not outstanding:
                            asked = max(more, 1)
                            outstanding += asked
                            subscription.request(asked)
    except BaseException:
        if budget is not None:
            budget.give_back(reserved)
        raise
    if budget is not None:
        budget.give_back(reserved - size)
    return elements
