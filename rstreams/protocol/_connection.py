"""The connection state machine: bytes in, events out; calls in, bytes out.

One :class:`Connection` plays publisher and subscriber at once, because the
protocol is symmetric: either side may subscribe to the other's publishers on
the same connection. It does no I/O. The trio layer feeds it received bytes
(:meth:`Connection.receive_data`), takes the events (:meth:`Connection.events`),
calls it to subscribe / request / cancel / publish, and writes whatever
:meth:`Connection.data_to_send` returns.

Whose fault
-----------
Local misuse (queueing beyond demand, using a finished Id, sending after
goodbye) raises ``LocalProtocolError`` at once and changes nothing. A peer's
violation queues a goodbye whose reason starts with ``protocol error:``,
moves the connection to ``ERROR``, and surfaces as ``RemoteProtocolError``
from :meth:`Connection.events`; events parsed before the bad message are
returned first, and the error is raised on the next call. Nothing is
swallowed here: what to do about an error is the session's decision.

The receive hot path
--------------------
Runs of onNext for one stream are checked and collected inline (a dict
lookup, a type check and a demand decrement per element) and handed over as
one :class:`~rstreams.protocol.Elements` event; no message object is built
per element. onNextPacked becomes one event whose batch slices lazily.

Runs of onNext
--------------
Whenever the Unpacker holds nothing and the next message is an onNext, the
run of onNext that repeat its header byte for byte (one stream, one element
size: :mod:`~rstreams.protocol._runs`) is taken from the received bytes in
a few C-level steps, without a tuple per message; ``_receive_runs`` applies
to the run the rules the Unpacker's path applies to each onNext (a known
stream that takes elements, not inside a split element, the element size,
demand), and leaves anything they refuse, with whatever else comes next, to
the Unpacker's path, which words the error. A read usually ends inside a
message: the Unpacker is then fed only the rest of that onNext
(``_rest_of_message``), so that the next read starts empty again. A run that
a control message interrupts in the middle of a read goes on through the
Unpacker up to the end of that read.

Large parts
-----------
The parts of a split element do not go through msgpack's Unpacker, which
would copy every payload byte twice (into its buffer, out as ``bytes``)
before the join copies it a third time. Received bytes wait in
``_waiting`` as views of what the I/O layer read, and the Unpacker is fed
from there. Whenever the Unpacker holds nothing unparsed, the next message
starts at the front of ``_waiting``, and if it is a part
(:func:`~rstreams.protocol._codec.read_part_header`), its header is read
here and its payload is handed to the stream's reassembler as views of the
received bytes, across as many reads as it spans. The reassembler copies
every piece into the element's buffer, or, joining pieces, every piece but
a whole read (a view would keep the rest of its read alive, beyond the
payload the memory budget counts: see ``_split``, "Beyond the guess"), and
a read larger than a part is never all one piece: two copies of the
payload instead of the Unpacker's three; on plain TCP, where the
connection offers the element's buffer for the read (``receive_buffers``),
none for a ``copy=False`` stream and one (the ``bytes`` handed out) for a
``copy=True`` one. When the Unpacker runs out of data in the middle of
a message that is a part (a read that ends inside one), the part is taken
back: a fresh Unpacker replaces the one holding its start, and the part is
read from the views. The Unpacker is still fed a whole read at a time (as
``receive_data`` cut it), so the parts that follow other messages inside one
read still go through it, all but one that the read ends inside: feeding it
less at a time, to find them, cost a tenth more on unsplit 64 KiB elements.

Both paths apply the same rules through the same code: ``_part_arrives``
when a part's header is known (the table's RECEIVE_ELEMENT transition, the
element and size checks, demand for a last part), ``_part_completes`` when
its payload is all there. A part's header in any form but the usual one is
left to the Unpacker, so malformed input fails exactly as it always did.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from operator import index
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, cast

from ._batch import ElementBatch, batch_of_known_size
from ._codec import (
    FIXARRAY_4,
    MAX_PART_HEADER_SIZE,
    DecodeError,
    PartHeader,
    encode,
    encode_request,
    encode_subscribe,
    message_from_wire,
    new_unpacker,
    LAST_PART_CODE,
    PART_CODE,
    part_header_ids,
    read_part_header,
    bin_header,
)
from ._demand import Demand
from ._errors import HandshakeError, LocalProtocolError, RemoteProtocolError
from ._limits import DEFAULT_CONNECTION_MEMORY, DEFAULT_LIMITS, MESSAGE_HEADER_BOUND, ProtocolLimits
from ._messages import (
    MAX_ID,
    PROTOCOL_VERSION,
    UNBOUNDED,
    Cancel,
    Elements,
    Event,
    Extension,
    Goodbye,
    Hello,
    InvalidRequest,
    Message,
    OnComplete,
    OnError,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Ping,
    Pong,
    Request,
    Subscribe,
    Subscribed,
    prechecked,
    text_within,
)
from ._outbound import EMPTY_ELEMENT_BYTES, Outbound, Publication, QueuedElement, SameSizeElements
from ._runs import FIXARRAY_3, MAX_ON_NEXT_HEADER_SIZE, ON_NEXT_CODE, RunReader, read_on_next_header
from ._split import Reassembler
from ._state import (
    CONNECTION_TRANSITIONS,
    PUBLICATION_TRANSITIONS,
    SUBSCRIPTION_TRANSITIONS,
    ConnectionEvent,
    ConnectionState,
    PublicationEvent,
    PublicationState,
    SubscriptionEvent,
    SubscriptionState,
    takes_elements,
)

__all__ = ["Connection", "DEFAULT_WRITE_SIZE"]

#: Default upper bound on what one data_to_send() call returns (it may exceed
#: it by at most one message).
DEFAULT_WRITE_SIZE = 256 * 1024

# Enum members read through their class take EnumType's slow attribute hook
# (it defines __getattr__), several times the cost of a plain attribute; the
# states and events used once or more per message are module constants.
_ACTIVE = SubscriptionState.ACTIVE
_OPEN = ConnectionState.OPEN
_HANDSHAKING = ConnectionState.HANDSHAKING
_SENDING_STATES = (_HANDSHAKING, _OPEN)
_SUBSCRIBING = SubscriptionState.SUBSCRIBING
_DONE = SubscriptionState.DONE
_SUBSCRIBE_CODE = 1
_SUBSCRIBED_CODE = 4
_MAX_WIRE_INT = 2**64 - 1  # the largest int msgpack carries
_ON_COMPLETE_CODE = 6
_new_subscribed = prechecked(Subscribed)
_new_subscribe = prechecked(Subscribe)
_new_on_complete = prechecked(OnComplete)
_CANCELLED = SubscriptionState.CANCELLED


def _queueing_state() -> PublicationState:
    # The state in which a publication may queue elements, read off the
    # table: the queries (publication_demand, is_publishing) compare by
    # identity. A table that queued in two states would need them rewritten,
    # and says so here at import rather than letting them drift apart.
    (state,) = {state for (state, event) in PUBLICATION_TRANSITIONS if event is PublicationEvent.SEND_ELEMENTS}
    return state


_PUBLISHING = _queueing_state()
_RECEIVE_SUBSCRIBED = SubscriptionEvent.RECEIVE_SUBSCRIBED
_RECEIVE_COMPLETE = SubscriptionEvent.RECEIVE_COMPLETE
_RECEIVE_ELEMENT = SubscriptionEvent.RECEIVE_ELEMENT
_SUBSCRIPTION_ENDED = SubscriptionEvent.CONNECTION_ENDED
_PUBLICATION_ENDED = PublicationEvent.CONNECTION_ENDED
_RECEIVE_INVALID_REQUEST = PublicationEvent.RECEIVE_INVALID_REQUEST
_REQUEST_CODE = 2
_CANCEL_CODE = 3
_RECEIVE_REQUEST = PublicationEvent.RECEIVE_REQUEST
_SEND_SUBSCRIBED = PublicationEvent.SEND_SUBSCRIBED
_SEND_ELEMENTS = PublicationEvent.SEND_ELEMENTS
_SEND_COMPLETE = PublicationEvent.SEND_COMPLETE
# Once the peer said goodbye (or the connection failed), nothing it sends matters.
_DEAF_STATES = (ConnectionState.GOODBYE_RECEIVED, ConnectionState.CLOSED, ConnectionState.ERROR)
# The peer said goodbye: stop parsing what it sent after that.
_PEER_DONE_STATES = (ConnectionState.GOODBYE_RECEIVED, ConnectionState.CLOSED)
_NO_EVENT_LIMIT = 2**62  # events(): parse everything received
_MAX_REASON = 1000  # characters of an error text repeated in a goodbye
# One Elements event per run of elements, at least one per subscribe: the
# dataclass __init__ costs more than the rest of a short run's handling.
_new_elements = prechecked(Elements)
# receive_buffers: at most this many predicted parts per read, and the size
# of the buffer for what follows them (a part's header and then some).
_MAX_PREDICTED_PARTS = 64
_AFTER_PARTS_SIZE = 64
_ONLY_BYTES = {bytes}
# What _receive_parts found at the front of _waiting.
_NEXT_FOR_UNPACKER = 0  # another message (or nothing): feed the Unpacker
_PARTS_WAIT = 1  # the rest of a part (or of its header) has not arrived
_PARTS_STOP = 2  # max_events reached


class _Subscription:
    """Inbound state of one stream we subscribed to."""

    __slots__ = ("subscriber", "publisher", "state", "takes_elements", "demand", "element_size", "reassembler", "copy")

    def __init__(self, subscriber: int, publisher: str, demand: int, copy: bool = True) -> None:
        self.subscriber = subscriber
        self.publisher = publisher
        self.state = _SUBSCRIBING
        # What the table says of an element in this state, kept beside the
        # state (see enter) so the per-element hot path needs no lookup.
        self.takes_elements = _TAKES_ELEMENTS[_SUBSCRIBING]
        self.demand = Demand(demand)
        self.element_size = 0
        self.reassembler: Reassembler | None = None
        # False: split elements are joined into one buffer and handed over
        # as read-only views of it (Connection.subscribe's copy).
        self.copy = copy

    def enter(self, state: SubscriptionState) -> None:
        # The one way a subscription changes state after it is created (the
        # one-step paths write the same two lines out).
        self.state = state
        self.takes_elements = _TAKES_ELEMENTS[state]


def element_flags() -> dict[SubscriptionState, bool]:
    """:func:`takes_elements` of every state, read off the table once, when
    the module is imported (a test that changes the table rebuilds it)."""
    return {state: takes_elements(state) for state in SubscriptionState}


_TAKES_ELEMENTS = element_flags()


def _remember(ids: OrderedDict[int, None], subscriber: int, limit: int) -> int | None:
    """Add an Id to a bounded, insertion-ordered memory; return an evicted Id.

    An OrderedDict, not a dict: a dict used as a queue (insert at the end,
    delete the oldest) keeps its deleted slots at the front until it is
    resized, so ``next(iter(ids))`` walks all of them, and once the memory
    was full (``max_remembered_ids`` streams on one connection) every
    stream that ended cost about 25 us here, a third of a busy server's
    time. ``popitem(last=False)`` is O(1).
    """
    ids.pop(subscriber, None)
    ids[subscriber] = None
    if len(ids) > limit:
        return ids.popitem(last=False)[0]
    return None


class Connection:
    """A sans-I/O rstreams connection, playing publisher and subscriber at once.

    Creating it queues our hello; send it (:meth:`data_to_send`) before or
    together with anything else. Optimistic sends right after the hello are
    allowed.

    Args:
        limits: what the peer may send and how we split what we send.
        extensions: extension ids to announce in our hello.
        token: a bearer token to carry in our hello (the bearer extension,
            PROTOCOL.md section 9); None: no bearer extension.
        max_connection_memory: the connection's memory budget, in bytes;
            this machine enforces its inbound half (PROTOCOL.md section 5):
            the unfinished split elements of all streams together may not
            go past it, and a split part or an unparsed message that would
            take them past it is the peer's ``RemoteProtocolError``
            (``memory budget exceeded: ...``). :attr:`inbound_bytes` says
            what it holds now.

    Raises:
        ValueError: ``limits.max_element_size`` or ``limits.max_message_size``
            does not fit in the inbound half.
    """

    def __init__(
        self,
        *,
        limits: ProtocolLimits = DEFAULT_LIMITS,
        extensions: Iterable[int] = (),
        token: str | None = None,
        max_connection_memory: int = DEFAULT_CONNECTION_MEMORY,
    ) -> None:
        if type(max_connection_memory) is not int or max_connection_memory <= 0:
            raise ValueError(f"max_connection_memory must be a positive int, got {max_connection_memory!r}")
        half = max_connection_memory // 2
        if limits.max_element_size > half or limits.max_message_size > half:
            raise ValueError(
                f"max_element_size ({limits.max_element_size}) and max_message_size ({limits.max_message_size})"
                f" must fit in the inbound half ({half} bytes) of max_connection_memory {max_connection_memory}"
            )
        self.limits = limits
        self.max_connection_memory = max_connection_memory
        # The largest elementSize a subscribed may announce (read per subscribe).
        self._max_announced_size = min(limits.max_message_size, MAX_ID)
        self._max_inbound = half
        # Bytes of split elements being joined, on all our subscriptions
        # together (each Reassembler's reserved, summed as parts come and go).
        self._unfinished = 0
        # Of which announced by the peer (parts' payload, arrived or not):
        # the budget's measure of what the peer sent. The rest is buffers
        # of copy=False streams sized beyond it (see _part_arrives).
        self._announced = 0
        self._state = ConnectionState.HANDSHAKING
        self.peer_hello: Hello | None = None
        self.goodbye_received: Goodbye | None = None
        self._goodbye_sent = False
        self._unpacker = new_unpacker(limits)
        self._waiting: deque[memoryview] = deque()
        self._fed = 0
        self._message_end = 0
        #: True when the last events() stopped at its max_events with
        #: messages left that it may not have turned into events: call again.
        self.parse_paused = False
        self._run_subscriber = 0
        # The byte count of the run's first _run_counted elements: what
        # _receive_runs took it counts (header size times elements), and what
        # the Unpacker's path added is measured once (_counted_run_bytes). The
        # run's batch then knows its byte count (a read that ends inside an
        # onNext sends that one message through the Unpacker, in most reads).
        self._run_counted = 0
        self._run_bytes = 0
        # A part whose payload is being taken from _waiting (see "Large
        # parts"): its stream (None: dropped), whether it is a last part,
        # and how many of its bytes are still to come.
        self._part_subscription: _Subscription | None = None
        self._part_last = False
        self._part_left = 0
        # That part's ids as encoded, its element Id, and its payload size
        # (copy=False streams only): the next part of a stream joined into
        # one buffer most likely has the same ids and size (see
        # receive_buffers).
        self._part_ids = b""
        self._part_element = 0
        self._part_size = 0
        # The buffers receive_buffers handed out, and the reads that landed
        # in a reassembler's buffer where the payload goes, with their
        # offsets there, oldest first (see buffers_received).
        self._offered: list[memoryview | bytearray] | None = None
        self._offered_to: Reassembler | None = None  # whose buffer they are
        # The part expected in each header slot offered, in order, and the
        # last one built (the next read's most likely expects the same).
        self._predicted: list[_PredictedPart] = []
        self._last_predicted: _PredictedPart | None = None
        self._placed: deque[tuple[memoryview, int]] = deque()
        # The header slots buffers_received found to hold the expected
        # header, oldest first: each waits in _waiting as a view of that
        # header's bytes (_PredictedPart's, which the slot was found to
        # equal), paired here with that header as read_part_header reads it.
        self._slot_headers: deque[tuple[memoryview, PartHeader]] = deque()
        self._last_fed: memoryview | None = None  # the Unpacker's last feed
        self._runs = RunReader()  # (see "Runs of onNext")
        self._deferred_error: RemoteProtocolError | None = None
        # A request or cancel held back to the next events() call, because the
        # subscribe it is about is in the batch being returned (see events).
        self._held: tuple[Any, ...] | None = None
        self._answer_pending: set[int] = set()
        self._subscriptions: dict[int, _Subscription] = {}
        self._next_id = 1
        self._cancelled: OrderedDict[int, None] = OrderedDict()
        self._forgotten_below = 0
        self._publications: dict[int, Publication] = {}
        self._finished_publications: OrderedDict[int, None] = OrderedDict()
        # A quarter of the budget: what our peer holds of our unfinished split
        # elements stays within its inbound half if its budget is half ours.
        self._outbound = Outbound(
            limits.split_threshold,
            max_splitting=max(max_connection_memory // 4, limits.split_threshold),
            part_size=min(limits.part_size, limits.max_message_size - MESSAGE_HEADER_BOUND),
        )
        # Plain ints (an Extension member is one, but Hello wants exact ints).
        # The bearer extension rides in our hello exactly when we have a token.
        self._extensions = tuple(index(extension) for extension in extensions if extension != Extension.BEARER)
        self._token = token
        if token is not None:
            self._extensions += (int(Extension.BEARER),)
        self._hello_taken = False  # has data_to_send handed out our hello yet?
        # The first bytes the peer sent: TLS where hello was expected is named
        # as such (see _tls_where_hello_was_expected).
        self._opening = bytearray()
        # The keepalive extension: agreed once both hellos list it; then at
        # most one ping of ours is in flight, with this nonce.
        self._keepalive = False
        self._next_ping = 1
        self._ping_in_flight: int | None = None
        self._outbound.control += encode(Hello(version=PROTOCOL_VERSION, extensions=self._extensions, token=self._token))

    # ---- state ---------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """Where the connection is in its handshake / goodbye life cycle."""
        return self._state

    def _transition(self, event: ConnectionEvent) -> None:
        try:
            self._state = CONNECTION_TRANSITIONS[self._state, event]
        except KeyError:
            raise LocalProtocolError(f"cannot {event.value} in state {self._state.name}") from None

    def _check_can_send(self) -> None:
        state = self._state
        if state is not _OPEN and state is not _HANDSHAKING:
            raise LocalProtocolError(f"cannot send in state {self._state.name}")

    # ---- receiving -----------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer; :meth:`events` parses them.

        Bytes received after the connection closed or failed are ignored.
        End of file is the I/O layer's business, not the machine's: a
        connection that ends before both goodbyes is a lost connection.
        """
        if self._state in _DEAF_STATES:
            return
        view = memoryview(data)
        if len(self._opening) < 6:
            self._opening += view[: 6 - len(self._opening)]
        limit = self.limits.max_message_size
        # Hand the Unpacker at most one message-size at a time, and only after
        # it has parsed what it holds (see events), so its buffer limit can
        # only trip on a message that really is too large.
        if len(view) <= limit:
            self._waiting.append(view)
        else:
            for start in range(0, len(view), limit):
                self._waiting.append(view[start : start + limit])

    def receive_buffers(self, max_bytes: int) -> list[memoryview | bytearray]:
        """Where the next bytes from the peer may be received directly: a
        list of buffers for one scattering read (``readv``), then
        :meth:`buffers_received`; or ``[]``: receive as usual
        (:meth:`receive_data`).

        Offered only in the middle of a split part of a stream that joins
        into a buffer (``copy=False``, and ``copy=True`` on a stream of
        large elements: see ``_split``), with nothing else waiting to be
        parsed: the first buffer is the rest of the part, in the stream's
        element buffer. The next parts
        of the element most likely follow at once, with headers of the same
        length and payloads of the same size, so the list goes on with a
        small buffer for each such header and the element buffer's place for
        its payload, up to about ``max_bytes``. It ends with the header of
        the part after those (an empty place for its payload), so that the
        next read starts at that payload; or, where the element's buffer or
        its last part ends it, with a small buffer for whatever follows.
        Nothing is assumed: :meth:`buffers_received`
        checks each header before it counts its payload as in place, and
        hands everything from the first that is not the expected part to the
        usual parser, as bytes; the rules are then applied by the one path
        every part takes. The element buffer is counted against the memory
        budget already, so reading into it costs nothing more.
        """
        subscription = self._part_subscription
        if (
            not self._part_left
            or subscription is None
            or subscription.reassembler is None
            or self._waiting
            or self._fed != self._message_end
            or self._held is not None
            or self._state is not _OPEN
        ):
            return []
        space = subscription.reassembler.free_space()
        if space is None:
            return []
        left = self._part_left
        buffers: list[memoryview | bytearray] = [space[:left]]
        predicted: list[_PredictedPart] = []
        if not self._part_last and self._part_size:
            position = left
            size = self._part_size
            ids = self._part_ids
            expected = self._last_predicted
            ends_at_header = False
            end = len(space)
            for _ in range(_MAX_PREDICTED_PARTS):
                if position >= end:
                    break
                payload = size if end - position >= size else end - position
                if expected is None or expected.size != payload or expected.ids != ids:
                    expected = self._last_predicted = _PredictedPart(ids, subscription.subscriber, self._part_element, payload)
                buffers.append(bytearray(len(expected.header)))
                predicted.append(expected)
                if position >= max_bytes:
                    # Enough for one read: it ends with this header, and
                    # the next one goes straight to its payload.
                    buffers.append(space[position:position])
                    ends_at_header = True
                    break
                buffers.append(space[position : position + payload])
                position += payload
            if not ends_at_header:
                buffers.append(bytearray(_AFTER_PARTS_SIZE))
        else:
            buffers.append(bytearray(_AFTER_PARTS_SIZE))
        self._offered = buffers
        self._offered_to = subscription.reassembler
        self._predicted = predicted
        return buffers

    def buffers_received(self, nbytes: int) -> None:
        """``nbytes`` were received into the buffers :meth:`receive_buffers`
        returned last, filling them in order; :meth:`events` parses them.

        The payload that landed where it belongs stays there (its reads
        wait as views of the element buffer, marked as in place); from the
        first header slot that does not hold the expected part's header,
        everything received is copied out, as if it had been received
        as bytes.
        """
        buffers, reassembler, predicted = self._offered, self._offered_to, self._predicted
        self._offered = self._offered_to = None
        self._predicted = []
        if self._state in _DEAF_STATES or not nbytes:
            return
        if buffers is None:
            raise LocalProtocolError("buffers_received without receive_buffers")
        subscription = self._part_subscription
        waiting = self._waiting
        placed = self._placed
        placed.clear()  # (anything left there was taken another way)
        slot_headers = self._slot_headers
        slot_headers.clear()
        if subscription is None or subscription.reassembler is not reassembler or reassembler is None:
            # The stream was cancelled (or ended) during the read: its part
            # is skipped as usual, so the bytes go to the parser as bytes.
            waiting.append(memoryview(b"".join(_filled_part(buffers, nbytes))))
            return
        offset = reassembler.filled
        first = buffers[0]
        assert isinstance(first, memoryview)
        taken = len(first) if nbytes >= len(first) else nbytes
        view = first[:taken]
        waiting.append(view)
        placed.append((view, offset))
        offset += taken
        nbytes -= taken
        index = 1
        for expected in predicted:
            if not nbytes:
                break
            slot = buffers[index]
            assert isinstance(slot, bytearray)  # (receive_buffers' header slot)
            if nbytes < len(slot):
                break
            # The next part of the element, as guessed (a check by comparing
            # bytes: the part's rules are applied when it is parsed).
            if slot == expected.header:
                header = expected.as_part
            elif slot == expected.last_header:
                header = expected.as_last_part
            else:
                break
            waiting.append(header[0])
            slot_headers.append(header)
            nbytes -= len(slot)
            region = buffers[index + 1]
            assert isinstance(region, memoryview)  # (receive_buffers' place for the payload)
            taken = len(region) if nbytes >= len(region) else nbytes
            if taken:
                view = region if taken == len(region) else region[:taken]
                waiting.append(view)
                placed.append((view, offset))
                offset += taken
                nbytes -= taken
            index += 2
            if header is expected.as_last_part:
                break  # (what follows is another element's, or another message)
        if nbytes:
            # Not the part expected (or what follows the last one): bytes,
            # as a plain read would have given them.
            waiting.append(memoryview(b"".join(_filled_part(buffers[index:], nbytes))))

    def events(self, max_events: int | None = None) -> list[Event]:
        """Parse what was received; return the events, in order.

        Args:
            max_events: stop parsing once at least this many events are
                collected (a run of onNext for one stream is one event, and
                the run ending at a control message is flushed with it, so
                one more may come), or this many messages were handled that
                may leave none (control messages; elements of a cancelled
                stream); the rest stays buffered for the next call. An I/O
                layer uses it to act on the first answers of a large read
                (write them) before it has parsed the whole read, and to
                take turns with other connections: a read of cancels naming
                finished streams gives no event, and parsed whole it was
                65,000 messages in one step. :attr:`parse_paused` is then
                True, and the events returned may be none: call again.

        A batch never holds a subscribe together with a later cancel or
        request(n <= 0) for the same Id: such a message ends the batch and is
        applied on the next call. Answer every :class:`Subscribe` of a batch
        (:meth:`accept` or :meth:`fail`) before calling again, and the
        publication is always there to answer, even when the peer has
        already ended it, or reused its Id, in the same read.

        Raises:
            RemoteProtocolError: the peer broke the protocol (raised after the
                events before the offending message have been returned).
                Goodbye is already queued and the state is ``ERROR``.
            HandshakeError: the peer's hello named a version we don't speak.
        """
        if self._deferred_error is not None:
            error, self._deferred_error = self._deferred_error, None
            try:
                raise error
            finally:
                # The error's traceback holds this frame: without the del,
                # frame and error hold each other (and the caller's frames,
                # and through them the session) until the cycle collector
                # runs.
                del error
        events: list[Event] = []
        self.parse_paused = False
        if self._answer_pending:
            self._answer_pending.clear()  # the last batch's subscribes are answered
        if self._state in _DEAF_STATES or (
            self._fed == self._message_end and not self._waiting and self._held is None
        ):
            # Deaf, or everything received so far has been parsed: the usual
            # answer to the I/O layer's last call per read, found without
            # touching the Unpacker.
            return events
        try:
            self._parse(events, max_events if max_events is not None else _NO_EVENT_LIMIT)
        except RemoteProtocolError as exc:
            tls = _tls_where_hello_was_expected(self._opening) if self.peer_hello is None else None
            if tls is None:
                self._fail(exc)
                if events:
                    self._deferred_error = exc
                    return events
                raise
            self._fail(tls)
            try:
                raise tls from exc
            finally:
                # As above: no local may hold the raised error (frame cycle).
                del tls
        return events

    def _fail(self, error: RemoteProtocolError) -> None:
        self._end_all_streams()
        # Drop queued control messages, but never our hello: a goodbye must
        # not be the first thing the peer reads from us (rule 1).
        hello_unsent = not self._hello_taken
        self._outbound.control.clear()
        if hello_unsent:
            self._outbound.control += encode(Hello(version=PROTOCOL_VERSION, extensions=self._extensions, token=self._token))
        self._waiting.clear()
        self._part_subscription = self._last_fed = None
        self._part_left = 0
        self._offered = self._offered_to = None
        self._placed.clear()
        self._slot_headers.clear()
        self._held = None
        if not self._goodbye_sent:
            self._goodbye_sent = True
            self._outbound.control += encode(Goodbye(reason=error.goodbye_reason[:_MAX_REASON]))
        self._state = CONNECTION_TRANSITIONS[self._state, ConnectionEvent.PROTOCOL_ERROR]

    def _end_all_streams(self) -> int:
        dropped = 0
        for publication in self._publications.values():
            dropped += self._outbound.drop(publication)
            publication.state = PUBLICATION_TRANSITIONS[publication.state, _PUBLICATION_ENDED]
        self._publications.clear()
        self._outbound.ready.clear()
        for sub in self._subscriptions.values():
            sub.enter(SUBSCRIPTION_TRANSITIONS[sub.state, _SUBSCRIPTION_ENDED])
        self._subscriptions.clear()
        self._unfinished = self._announced = 0
        return dropped

    def _parse(self, events: list[Event], max_events: int) -> None:
        # Elements collected before a bad message are valid and within
        # demand: they are handed over before the error is raised.
        run: list[bytes] = []
        self._run_counted = self._run_bytes = 0
        try:
            self._parse_into(events, run, max_events)
        except RemoteProtocolError:
            self._flush_run(events, run)
            raise
        self._flush_run(events, run)

    def _flush_run(self, events: list[Event], run: list[bytes]) -> None:
        if run:
            if self._run_counted:
                batch = batch_of_known_size(run[:], self._counted_run_bytes(run))
            else:
                batch = ElementBatch(run[:])  # (measured if asked)
            events.append(_new_elements(self._run_subscriber, batch))
            run.clear()
        self._run_counted = self._run_bytes = 0

    def _counted_run_bytes(self, run: list[bytes]) -> int:
        """The run's byte count: what runs took, counted as they took it,
        plus what the Unpacker's path appended after the last of them,
        measured here once (usually nothing)."""
        counted = self._run_counted
        if counted != len(run):
            self._run_bytes += sum(map(len, run[counted:]))
            self._run_counted = len(run)
        return self._run_bytes

    def _parse_into(self, events: list[Event], run: list[bytes], max_events: int) -> None:
        unpacker = self._unpacker
        tell = unpacker.tell
        subscriptions = self._subscriptions
        answer_pending = self._answer_pending
        limits = self.limits
        at_once_paths = self._AT_ONCE
        run_subscription: _Subscription | None = None
        # Messages handled that may leave no event (a control message, an
        # element for a cancelled stream): they count toward max_events too,
        # so that a read of 65,000 cancels of finished streams is not parsed
        # in one call (parse_paused says there is more).
        handled = 0
        # Where the last complete message ended: msgpack's own offset also
        # moves through an incomplete message, so it cannot bound one.
        message_end = self._message_end
        held = self._held
        if held is not None:
            self._held = None
            if self._take_control(held, events) or len(events) >= max_events:
                return
        while True:
            try:
                for message in unpacker:
                    message_end = tell()
                    # The message code, read once: None unless the message
                    # is a non-empty array starting with an int.
                    if type(message) is tuple and message:
                        code = message[0]
                        if type(code) is not int:
                            code = None
                    else:
                        code = None
                    if code == ON_NEXT_CODE and len(message) == 3:
                        # The hot path: one onNext, checked inline.
                        subscriber = message[1]
                        element = message[2]
                        if run_subscription is None or subscriber != run_subscription.subscriber:
                            if run:
                                self._flush_run(events, run)
                            run_subscription = subscriptions.get(subscriber) if type(subscriber) is int else None
                            if run_subscription is not None:
                                self._run_subscriber = run_subscription.subscriber
                        sub = run_subscription
                        if type(element) is not bytes:
                            raise RemoteProtocolError(f"onNext element must be bin, got {type(element).__name__}")
                        if sub is None or not sub.takes_elements:
                            run_subscription = None
                            self._orphan(subscriber, "onNext")
                            handled += 1
                            if handled >= max_events:
                                self.parse_paused = True
                                return
                            continue
                        if sub.reassembler is not None and sub.reassembler.in_progress:
                            raise RemoteProtocolError("onNext in the middle of a split element")
                        if sub.element_size and len(element) != sub.element_size:
                            raise RemoteProtocolError(
                                f"element of {len(element)} bytes on a stream with elementSize {sub.element_size}"
                            )
                        demand = sub.demand
                        if demand.outstanding < UNBOUNDED:
                            if not demand.outstanding:
                                raise RemoteProtocolError(f"onNext without demand on stream {subscriber}")
                            demand.outstanding -= 1
                        run.append(element)
                        continue
                    if run:
                        self._flush_run(events, run)
                    run_subscription = None
                    if (
                        answer_pending
                        and (code == _CANCEL_CODE or code == _REQUEST_CODE)
                        and self._ends_pending_stream(message)
                    ):
                        # A cancel, or a request that is not for more, about
                        # a subscribe in this very batch: the application
                        # answers that subscribe before this message ends its
                        # stream.
                        self._held = message
                        return
                    # (_take_control, written out: this runs for every control message)
                    at_once = at_once_paths.get(code) if code is not None else None
                    if at_once is None or not at_once(self, message, events):
                        self._dispatch(message_from_wire(message, limits), events)
                        if self._state in _PEER_DONE_STATES:
                            # Nothing the peer sends after its goodbye matters.
                            self._waiting.clear()
                            return
                    handled += 1
                    if len(events) >= max_events or handled >= max_events:
                        self.parse_paused = handled >= max_events
                        return  # the rest waits, in the Unpacker, for the next call
            except DecodeError as exc:
                raise RemoteProtocolError(f"undecodable bytes: {exc or type(exc).__name__}") from exc
            finally:
                self._message_end = message_end
            # The Unpacker ran out of complete messages.
            partial = self._fed - message_end
            if partial > self.limits.max_message_size:
                raise RemoteProtocolError(f"message larger than the limit of {self.limits.max_message_size} bytes")
            if partial > self._max_inbound + MESSAGE_HEADER_BOUND - self._unfinished:
                self._give_back_guesses()
                if partial > self._max_inbound + MESSAGE_HEADER_BOUND - self._announced:
                    raise self._over_budget(self._announced + partial, "of unfinished split elements and unparsed input")
            if self._fed == message_end:
                self._last_fed = None  # (parsed: no need to keep the read alive)
            elif self._take_back_part(message_end):
                unpacker = self._unpacker
                tell = unpacker.tell
                message_end = self._message_end
            waiting = self._waiting
            if self._fed == message_end:
                # The Unpacker holds nothing: the next message starts at
                # the front of _waiting, and may be a part or a run of
                # onNext to take here.
                found = self._receive_unparsed(events, run, max_events)
                if found != _NEXT_FOR_UNPACKER:
                    return
                run_subscription = subscriptions.get(self._run_subscriber) if run else None
                if not waiting:
                    break
                chunk = waiting.popleft()
            else:
                if not waiting:
                    break
                chunk = self._rest_of_message(message_end)
            try:
                unpacker.feed(chunk)
            except DecodeError as exc:  # pragma: no cover - feed only fails on BufferFull, prevented above
                raise RemoteProtocolError(f"undecodable bytes: {exc}") from exc
            self._fed += len(chunk)
            self._last_fed = chunk

    def _receive_unparsed(self, events: list[Event], run: list[bytes], max_events: int) -> int:
        """The Unpacker holds nothing: take the messages at the front of
        _waiting while they are parts or runs of onNext (see "Large parts"
        and "Runs of onNext"); say why it stopped."""
        waiting = self._waiting
        while True:
            if self._part_left or (_drop_empty_views(waiting) and _may_start_part(waiting[0])):
                found = self._receive_parts(events, run, max_events)
                if found != _NEXT_FOR_UNPACKER:
                    return found
            if not (_drop_empty_views(waiting) and _may_start_on_next(waiting[0])):
                return _NEXT_FOR_UNPACKER
            self._receive_runs(events, run)
            if not (_drop_empty_views(waiting) and _may_start_part(waiting[0])):
                return _NEXT_FOR_UNPACKER

    def _receive_runs(self, events: list[Event], run: list[bytes]) -> None:
        """Take the runs of onNext at the front of _waiting, up to the first
        message that is not one, is not whole in the front read, or that a
        rule refuses (left to the Unpacker's path, which says why)."""
        waiting = self._waiting
        max_message_size = self.limits.max_message_size
        while self._state is _OPEN and _drop_empty_views(waiting):
            front = waiting[0]
            header = read_on_next_header(front[:MAX_ON_NEXT_HEADER_SIZE], max_message_size)
            if header is None or not header.length:
                return
            length = header.length
            if front[length : length + len(header.header)] != header.header:
                # Not a run: the next message (if whole in this read) has
                # another header, or there is none. The Unpacker takes the
                # rest of the read for less than this path costs a message
                # (elements of many sizes, streams taking turns).
                return
            # The rules of the Unpacker's path for onNext, once per run.
            sub = self._subscriptions.get(header.subscriber)
            if (
                sub is None
                or not sub.takes_elements
                or (sub.reassembler is not None and sub.reassembler.in_progress)
                or (sub.element_size and header.size != sub.element_size)
            ):
                return
            demand = sub.demand
            if not demand.outstanding:
                return
            elements = self._runs.take(front, header, demand.outstanding)
            demand.take(len(elements))
            if run and self._run_subscriber != header.subscriber:
                self._flush_run(events, run)
            self._run_subscriber = header.subscriber
            # Counted, not measured (see _run_counted).
            self._run_bytes = self._counted_run_bytes(run) + len(elements) * header.size
            run += elements
            self._run_counted = len(run)
            taken = len(elements) * length
            if taken < len(front):
                waiting[0] = front[taken:]
            else:
                waiting.popleft()

    def _rest_of_message(self, message_end: int) -> memoryview:
        """What to feed the Unpacker, which holds the start of a message: if
        that is an onNext, whose header tells its length, only the rest of
        it, so that the Unpacker ends empty and a run that follows can be
        taken (a read usually ends inside a message); else the next read."""
        waiting = self._waiting
        last_fed = self._last_fed
        tail_size = self._fed - message_end
        if last_fed is not None and tail_size <= len(last_fed):
            tail: bytes | memoryview = last_fed[len(last_fed) - tail_size :]
            if _may_start_on_next(tail):
                if tail_size < MAX_ON_NEXT_HEADER_SIZE:
                    tail = bytes(tail) + _first_bytes(waiting, MAX_ON_NEXT_HEADER_SIZE - tail_size)
                header = read_on_next_header(tail, self.limits.max_message_size)
                front = waiting[0]
                if header is not None and 0 < header.length - tail_size < len(front):
                    rest = header.length - tail_size
                    waiting[0] = front[rest:]
                    return front[:rest]
        return waiting.popleft()

    def _take_back_part(self, message_end: int) -> bool:
        """The Unpacker ran out of data inside a message: if that message
        is a part (or may be one) and its bytes are all in the last feed,
        take it back, for _receive_parts to read from the views instead. A
        fresh Unpacker replaces the one holding its start."""
        last_fed = self._last_fed
        tail_size = self._fed - message_end
        if last_fed is None or tail_size > len(last_fed) or self._state is not _OPEN:
            return False
        tail = last_fed[len(last_fed) - tail_size :]
        if not _may_start_part(tail):
            return False
        # Its header as far as received: the tail and what waits after it
        # (a tail that is only a header's start may be decided by the next
        # read; taken back undecided, it would come straight back here).
        waiting = self._waiting
        waiting.appendleft(tail)
        header = read_part_header(_first_bytes(waiting, MAX_PART_HEADER_SIZE), self.limits.max_message_size)
        waiting.popleft()
        if header is None:
            return False
        self._unpacker = new_unpacker(self.limits)
        self._fed = self._message_end = 0
        self._last_fed = None
        self._waiting.appendleft(tail)
        return True

    def _receive_parts(self, events: list[Event], run: list[bytes], max_events: int) -> int:
        """Take the parts at the front of _waiting, and the rest of a part
        whose payload is still arriving, until another message is next
        (see "Large parts")."""
        waiting = self._waiting
        placed = self._placed
        slot_headers = self._slot_headers
        # The part being received: its stream (None: dropped, or no part),
        # whether it is a last part, and how many of its payload bytes are
        # still to come; in locals while parts follow each other in what
        # waits (a read holds several), stored back as this returns.
        subscription = self._part_subscription
        last = self._part_last
        left = self._part_left
        header: PartHeader | None = None  # the last one read here
        try:
            while True:
                if left:
                    reassembler = subscription.reassembler if subscription is not None else None
                    while left:
                        if not waiting:
                            return _PARTS_WAIT
                        front = waiting[0]
                        at = -1
                        if len(front) <= left:
                            waiting.popleft()
                            piece = front
                            if placed and placed[0][0] is front:
                                at = placed.popleft()[1]  # (received where it goes)
                        else:
                            waiting[0] = front[left:]
                            piece = front[:left]
                        left -= len(piece)
                        if reassembler is not None:
                            reassembler.add_piece(piece, at)
                if subscription is not None:
                    if last:
                        self._part_completes(subscription, events)
                    subscription = None
                    if len(events) >= max_events:
                        return _PARTS_STOP
                # The next message: a part, the start of one, or another.
                if not (waiting and waiting[0] or _drop_empty_views(waiting)) or self._state is not _OPEN:
                    return _NEXT_FOR_UNPACKER
                front = waiting[0]
                if not _may_start_part(front):
                    return _NEXT_FOR_UNPACKER
                first: bytes | memoryview | None = None
                if slot_headers and slot_headers[0][0] is front:
                    # A header slot of buffers_received, read there already
                    # (the next part of the same element: same ids).
                    header = slot_headers.popleft()[1]
                    waiting.popleft()
                elif len(front) > MAX_PART_HEADER_SIZE:
                    first = front[:MAX_PART_HEADER_SIZE]
                    header = read_part_header(first, self.limits.max_message_size)
                    if header is None:
                        return _NEXT_FOR_UNPACKER
                    waiting[0] = front[header.length :]
                else:
                    first = _first_bytes(waiting, MAX_PART_HEADER_SIZE)
                    header = read_part_header(first, self.limits.max_message_size)
                    if header is None:
                        return _NEXT_FOR_UNPACKER
                    if not header.length:
                        return _PARTS_WAIT  # (all that waits is the start of a part's header)
                    _drop_bytes(waiting, header.length)
                if run:
                    self._flush_run(events, run)
                subscription = self._part_arrives(header.subscriber, header.element, header.size, header.last)
                last = header.last
                left = header.size
                if first is not None and subscription is not None:
                    self._part_ids = part_header_ids(first)
        finally:
            self._part_subscription = subscription
            self._part_last = last
            self._part_left = left
            if left and header is not None and subscription is not None:
                # What receive_buffers predicts the next parts from.
                self._part_element = header.element
                self._part_size = header.size

    def _ends_pending_stream(self, message: Any) -> bool:
        """Whether ``message`` is a cancel or request(n <= 0), or one that may
        turn out to be an error, about a stream whose subscribe is in the
        batch being parsed (``_answer_pending``): one that would end the
        stream before the application has seen it, to find it gone when it
        answers (and, worse, a reused Id in its place)."""
        if type(message) is not tuple or len(message) < 2 or type(message[0]) is not int:
            return False
        code = message[0]
        if code == _CANCEL_CODE:
            pass
        elif code == _REQUEST_CODE:
            if len(message) == 3 and type(message[2]) is int and message[2] > 0:
                return False  # more demand: the stream goes on
        else:
            return False
        return type(message[1]) is int and message[1] in self._answer_pending

    def _take_control(self, message: Any, events: list[Event]) -> bool:
        """Apply one message other than a well-formed onNext: by its one-step
        path if it has one and the usual case holds, else the general way.
        True once the peer has said goodbye: parsing stops there."""
        at_once = self._AT_ONCE.get(message[0]) if type(message) is tuple and message and type(message[0]) is int else None
        if at_once is None or not at_once(self, message, events):
            self._dispatch(message_from_wire(message, self.limits), events)
            if self._state in _PEER_DONE_STATES:
                # Nothing the peer sends after its goodbye matters.
                self._waiting.clear()
                return True
        return False

    def _orphan(self, subscriber: object, what: str) -> None:
        """A message for one of our subscriptions that is not active: late, or an error."""
        if self._state is ConnectionState.HANDSHAKING:
            raise RemoteProtocolError(f"expected hello as the first message, got {what}")
        if self._state is not ConnectionState.OPEN:
            return  # we said goodbye: every stream has ended, late messages are dropped
        if type(subscriber) is not int:
            raise RemoteProtocolError(f"{what} subscriber must be an Id, got {type(subscriber).__name__}")
        if not 0 <= subscriber <= MAX_ID:
            raise RemoteProtocolError(f"{what} subscriber must be an Id in [0, 2**63), got {subscriber}")
        if subscriber in self._cancelled:
            return  # rule 6 / RS 2.8: in flight when we cancelled
        sub = self._subscriptions.get(subscriber)
        if sub is not None:
            raise RemoteProtocolError(f"{what} before subscribed on stream {subscriber}")
        if subscriber < self._forgotten_below:
            return  # cancelled so long ago that we no longer remember it
        raise RemoteProtocolError(f"{what} for unknown subscriber id {subscriber}")

    def _subscription_event(self, subscriber: int, event: SubscriptionEvent, what: str) -> _Subscription | None:
        """Apply an inbound event to one of our subscriptions; None means drop it."""
        sub = self._subscriptions.get(subscriber)
        if sub is None:
            self._orphan(subscriber, what)
            return None
        try:
            state = SUBSCRIPTION_TRANSITIONS[sub.state, event]
        except KeyError:
            raise RemoteProtocolError(f"{what} not allowed on stream {subscriber} in state {sub.state.name}") from None
        if state is not sub.state:  # (an element leaves an active stream as it is: one per part)
            sub.enter(state)
        return sub

    def _dispatch(self, message: Message, events: list[Event]) -> None:
        state = self._state
        if state is not _OPEN and not isinstance(message, (Hello, Goodbye)):
            if state is _HANDSHAKING:
                raise RemoteProtocolError(f"expected hello as the first message, got {type(message).__name__}")
            return  # after our goodbye, every stream has ended; drop the rest
        # One lookup by exact type instead of an isinstance chain: this runs
        # for every control message, a few per subscribe.
        self._HANDLERS[type(message)](self, message, events)

    def _receive_hello(self, hello: Hello, events: list[Event]) -> None:
        if self.peer_hello is not None:
            raise RemoteProtocolError("hello received twice")
        self.peer_hello = hello
        if hello.version != PROTOCOL_VERSION:
            reason = f"unsupported protocol version {hello.version}: this peer speaks version {PROTOCOL_VERSION}"
            raise HandshakeError(reason, peer_version=hello.version, goodbye_reason=reason)
        self._transition(ConnectionEvent.RECEIVE_HELLO)
        keepalive = Extension.KEEPALIVE
        self._keepalive = keepalive in self._extensions and keepalive in hello.extensions
        events.append(hello)

    # -- the keepalive extension (PROTOCOL.md section 8)

    def _check_keepalive(self, what: str) -> None:
        if not self._keepalive:
            raise RemoteProtocolError(f"{what} without the keepalive extension in both hellos")

    def _receive_ping(self, ping: Ping, events: list[Event]) -> None:
        self._check_keepalive("ping")
        # The answer the protocol dictates goes out at once, ahead of data
        # (control is written first), so a busy connection answers in time.
        self._outbound.control += encode(ping.response())
        events.append(ping)

    def _receive_pong(self, pong: Pong, events: list[Event]) -> None:
        self._check_keepalive("pong")
        if pong.nonce != self._ping_in_flight:
            raise RemoteProtocolError(f"pong {pong.nonce} answers no ping of ours")
        self._ping_in_flight = None
        events.append(pong)

    def _receive_goodbye(self, goodbye: Goodbye, events: list[Event]) -> None:
        self.goodbye_received = goodbye
        self._transition(ConnectionEvent.RECEIVE_GOODBYE)
        self._end_all_streams()
        events.append(goodbye)

    # -- messages about our publications (the peer subscribed to us)

    def _receive_subscribe(self, message: Subscribe, events: list[Event]) -> None:
        subscriber = message.subscriber
        if subscriber in self._publications:
            raise RemoteProtocolError(f"subscribe with subscriber id {subscriber}, which is still in use")
        self._finished_publications.pop(subscriber, None)
        if message.initial_demand < 0:
            # As request(n <= 0): this stream fails, the connection stays.
            self._remember_finished(subscriber)
            self._outbound.control += encode(
                OnError(subscriber=subscriber, error=f"initialDemand must not be negative (rule 3.9), got {message.initial_demand}")
            )
            return
        self._publications[subscriber] = Publication(subscriber, message.publisher, message.initial_demand)
        self._answer_pending.add(subscriber)
        events.append(message)

    def _subscribed_to_at_once(self, message: tuple[Any, ...], events: list[Event]) -> bool:
        """A subscribe in one step, in the usual case: well formed, an open
        connection, a free Id and demand >= 0 (see _answered_at_once)."""
        if not 3 <= len(message) <= 4 or self._state is not _OPEN:
            return False
        publisher, subscriber = message[1], message[2]
        initial = message[3] if len(message) == 4 else 0
        if type(publisher) is not str or type(subscriber) is not int or type(initial) is not int:
            return False
        if not 0 <= subscriber <= MAX_ID or not 0 <= initial <= _MAX_WIRE_INT or subscriber in self._publications:
            return False
        self._finished_publications.pop(subscriber, None)
        self._publications[subscriber] = Publication(subscriber, publisher, initial)
        self._answer_pending.add(subscriber)
        events.append(_new_subscribe(publisher, subscriber, initial))
        return True

    def _peer_publication(self, subscriber: int, what: str) -> Publication | None:
        """The publication a request or cancel is about; None means drop the message."""
        publication = self._publications.get(subscriber)
        if publication is None and subscriber not in self._finished_publications:
            raise RemoteProtocolError(f"{what} for unknown subscriber id {subscriber}")
        return publication  # None: it crossed our onComplete/onError, harmless

    def _receive_request(self, message: Request, events: list[Event]) -> None:
        subscriber = message.subscriber
        publication = self._peer_publication(subscriber, "request")
        if publication is None:
            return
        if message.demand <= 0:
            self._publication_transition(publication, _RECEIVE_INVALID_REQUEST)
            if publication.state is not PublicationState.DONE:
                return  # already ending; its terminal signal is queued
            self._forget_publication(publication)
            self._outbound.control += encode(
                OnError(subscriber=subscriber, error=f"request({message.demand}): demand must be positive (rule 3.9)")
            )
            events.append(InvalidRequest(subscriber=subscriber, demand=message.demand))
            return
        self._publication_transition(publication, _RECEIVE_REQUEST)
        publication.demand.add(message.demand)
        events.append(message)

    def _receive_cancel(self, message: Cancel, events: list[Event]) -> None:
        publication = self._peer_publication(message.subscriber, "cancel")
        if publication is None:
            return
        self._publication_transition(publication, PublicationEvent.RECEIVE_CANCEL)
        self._forget_publication(publication)
        events.append(message)

    # -- messages about our subscriptions (we subscribed to the peer)

    # The two control messages every stream we subscribe to receives, taken
    # in one step in the usual case, as the receive loop takes onNext: a
    # well-formed message, in an open connection, for a stream in the state
    # that expects it. Anything else returns False and goes the general way
    # (message_from_wire, then _dispatch), which decides every error.

    def _answered_at_once(self, message: tuple[Any, ...], events: list[Event]) -> bool:
        if len(message) != 3 or self._state is not _OPEN:
            return False
        subscriber, size = message[1], message[2]
        if type(subscriber) is not int or type(size) is not int:
            return False
        sub = self._subscriptions.get(subscriber)
        if sub is None or not 0 <= size <= self._max_announced_size:
            return False
        # The usual answer is the one the table gives a stream waiting for
        # it; any other move (or none) is the general path's to decide.
        state = SUBSCRIPTION_TRANSITIONS.get((sub.state, _RECEIVE_SUBSCRIBED))
        if state is not _ACTIVE:
            return False
        sub.state = state
        sub.takes_elements = _TAKES_ELEMENTS[state]
        sub.element_size = size
        events.append(_new_subscribed(subscriber, size))
        return True

    def _completed_at_once(self, message: tuple[Any, ...], events: list[Event]) -> bool:
        if len(message) != 2 or self._state is not _OPEN:
            return False
        subscriber = message[1]
        if type(subscriber) is not int:
            return False
        sub = self._subscriptions.get(subscriber)
        if sub is None or (sub.reassembler is not None and sub.reassembler.in_progress):
            return False
        state = SUBSCRIPTION_TRANSITIONS.get((sub.state, _RECEIVE_COMPLETE))
        if state is not _DONE:
            return False
        sub.state = state
        sub.takes_elements = _TAKES_ELEMENTS[state]
        self._forget_parts(sub)  # (a buffer kept for a next element)
        del self._subscriptions[subscriber]
        events.append(_new_on_complete(subscriber))
        return True

    def _receive_subscribed(self, message: Subscribed, events: list[Event]) -> None:
        sub = self._subscription_event(message.subscriber, _RECEIVE_SUBSCRIBED, "subscribed")
        if sub is not None and sub.state is _ACTIVE:
            sub.element_size = message.element_size
            events.append(message)

    def _receive_on_next_packed(self, message: OnNextPacked, events: list[Event]) -> None:
        sub = self._subscription_event(message.subscriber, _RECEIVE_ELEMENT, "onNextPacked")
        if sub is None or sub.state is not _ACTIVE:
            return
        size = sub.element_size
        if not size:
            raise RemoteProtocolError(f"onNextPacked on stream {sub.subscriber}, which has no elementSize")
        if len(message.messages) != message.count * size:
            raise RemoteProtocolError(
                f"onNextPacked carries {len(message.messages)} bytes, not count {message.count} x elementSize {size}"
            )
        self._check_not_splitting(sub, "onNextPacked")
        if not sub.demand.take(message.count):
            raise RemoteProtocolError(
                f"onNextPacked of {message.count} elements exceeds demand {sub.demand.outstanding} on stream {sub.subscriber}"
            )
        if message.count:
            batch = ElementBatch(packed=message.messages, element_size=size)
            events.append(Elements(subscriber=sub.subscriber, elements=batch))

    def _receive_part(self, message: OnNextPart | OnNextLastPart, events: list[Event]) -> None:
        last = isinstance(message, OnNextLastPart)
        sub = self._part_arrives(message.subscriber, message.element, len(message.data), last)
        if sub is None:
            return
        assert sub.reassembler is not None  # (set by _part_arrives)
        sub.reassembler.add_piece(message.data)
        if last:
            self._part_completes(sub, events)

    # A part's rules, in two steps shared by both paths: the parts the
    # receive loop reads itself (see "Large parts") are checked as soon as
    # their header is read, and completed once their payload is all there,
    # which may be a read or more later.

    def _part_arrives(self, subscriber: int, element: int, size: int, last: bool) -> _Subscription | None:
        """Apply a part's header: the stream whose reassembler takes its
        ``size`` bytes of payload, or None if the part is dropped."""
        what = "onNextLastPart" if last else "onNextPart"
        sub = self._subscription_event(subscriber, _RECEIVE_ELEMENT, what)
        if sub is None or sub.state is not _ACTIVE:
            return None
        reassembler = sub.reassembler
        if reassembler is None:
            reassembler = sub.reassembler = Reassembler(self.limits.max_element_size, copy=sub.copy)
        # The connection's budget (PROTOCOL.md section 5): what all streams'
        # unfinished elements hold, with the payload announced and still to
        # come, stays within the inbound half, a last part included (it is
        # held with the rest while joined). Judged on the header, so a part
        # is refused the same whether or not it came in one read.
        if self._announced + size > self._max_inbound:
            raise self._over_budget(self._announced + size, "of unfinished split elements")
        # Held: the payload announced (taken by its pieces as they come), or
        # for a copy=False stream the buffer it is joined into, sized beyond
        # it to what the stream's elements usually need only within the
        # room the budget has left. Such guesses are given back before they
        # could make a part that fits the budget not fit (the peer is
        # refused for what it sent, never for our guesses).
        room = self._max_inbound - self._unfinished - size
        if room < 0 and self._unfinished > self._announced:
            self._give_back_guesses()
            room = self._max_inbound - self._unfinished - size
        reserved = reassembler.reserved
        reassembler.start_part(element, size, room if room > 0 else 0)
        self._announced += size
        self._unfinished += reassembler.reserved - reserved
        if last:
            if sub.element_size and reassembler.size != sub.element_size:
                raise RemoteProtocolError(
                    f"element of {reassembler.size} bytes on a stream with elementSize {sub.element_size}"
                )
            # Demand only grows until the element is complete (and is taken
            # then), so what is checked here still holds at the end.
            if not sub.demand.outstanding:
                raise RemoteProtocolError(f"split element without demand on stream {sub.subscriber}")
        return sub

    def _part_completes(self, sub: _Subscription, events: list[Event]) -> None:
        """The last part's payload is all there: hand the element over,
        unless the stream ended meanwhile (cancelled, or our goodbye)."""
        assert sub.reassembler is not None
        reassembler = sub.reassembler
        self._announced -= reassembler.size
        reserved = reassembler.reserved
        element = reassembler.finish()
        # (What it still holds, a copy=True stream's buffer kept for its next
        # element, stays counted until given back or the stream ends.)
        self._unfinished -= reserved - reassembler.reserved
        if self._subscriptions.get(sub.subscriber) is not sub:
            return
        if not sub.demand.take(1):  # pragma: no cover - checked by _part_arrives
            raise RemoteProtocolError(f"split element without demand on stream {sub.subscriber}")
        # (A read-only view stands for bytes on a copy=False stream: see subscribe.)
        events.append(Elements(subscriber=sub.subscriber, elements=ElementBatch([cast(bytes, element)])))

    def give_back_guesses(self) -> int:
        """Let go of the memory held beyond the payload the peer announced:
        buffers sized to a guess, and those ``copy=True`` streams keep for
        their next element (see ``_split``); how many bytes that was.

        For a receiver about to stop reading because the inbound half is
        full: what it holds for its own convenience must not be what stops
        it (a part that needs the room would have it given back, but no
        part is read while the reader waits)."""
        before = self._unfinished
        if before > self._announced:
            self._give_back_guesses()
        return before - self._unfinished

    def _give_back_guesses(self) -> None:
        """Trim every buffer sized beyond its element's announced payload
        back to that payload (see _part_arrives). Under budget pressure
        only: the reads waiting as views of a buffer would keep it from
        being trimmed, so they lose their in-place mark (they are copied
        into place instead, which gives the same bytes)."""
        self._placed.clear()
        self._slot_headers.clear()
        for sub in self._subscriptions.values():
            reassembler = sub.reassembler
            if reassembler is not None:
                reserved = reassembler.reserved
                reassembler.trim()
                self._unfinished -= reserved - reassembler.reserved

    def _over_budget(self, held: int, what: str) -> RemoteProtocolError:
        return RemoteProtocolError(
            f"memory budget exceeded: {held} bytes {what} on this connection"
            f" (limit {self._max_inbound}, max_connection_memory {self.max_connection_memory})"
        )

    def _forget_parts(self, sub: _Subscription) -> None:
        # A subscription that ends or is cancelled mid-element drops its
        # parts, and the rest of a part still arriving for it is skipped.
        reassembler = sub.reassembler
        if reassembler is None:
            return
        self._unfinished -= reassembler.reserved  # (announced, arrived or not)
        self._announced -= reassembler.size
        if self._part_subscription is sub:
            self._part_subscription = None  # the rest of its part is skipped
        sub.reassembler = None

    def _receive_on_complete(self, message: OnComplete, events: list[Event]) -> None:
        sub = self._subscriptions.get(message.subscriber)
        if sub is not None and sub.state is _ACTIVE:
            self._check_not_splitting(sub, "onComplete")
        self._end_subscription(message, _RECEIVE_COMPLETE, "onComplete", events)

    def _receive_on_error(self, message: OnError, events: list[Event]) -> None:
        self._end_subscription(message, SubscriptionEvent.RECEIVE_ERROR, "onError", events)

    def _end_subscription(
        self, message: OnComplete | OnError, event: SubscriptionEvent, what: str, events: list[Event]
    ) -> None:
        sub = self._subscription_event(message.subscriber, event, what)
        if sub is None:
            # A late terminal for a cancelled stream: nothing more can come.
            self._cancelled.pop(message.subscriber, None)
            return
        self._forget_parts(sub)
        del self._subscriptions[sub.subscriber]
        events.append(message)

    # Wire code -> the step that takes the usual case of that message at once
    # (see _answered_at_once), tried before the general path.
    _AT_ONCE: ClassVar[dict[object, Callable[[Connection, tuple[Any, ...], list[Event]], bool]]] = {
        _SUBSCRIBE_CODE: _subscribed_to_at_once,
        _SUBSCRIBED_CODE: _answered_at_once,
        _ON_COMPLETE_CODE: _completed_at_once,
    }

    # Message type -> handler, for _dispatch. onNext never gets here: the
    # receive loop takes every well-formed one inline.
    _HANDLERS: ClassVar[dict[type, Callable[[Connection, Any, list[Event]], None]]] = {
        Hello: _receive_hello,
        Goodbye: _receive_goodbye,
        Subscribe: _receive_subscribe,
        Request: _receive_request,
        Cancel: _receive_cancel,
        Subscribed: _receive_subscribed,
        OnNextPacked: _receive_on_next_packed,
        OnNextPart: _receive_part,
        OnNextLastPart: _receive_part,
        OnComplete: _receive_on_complete,
        OnError: _receive_on_error,
        Ping: _receive_ping,
        Pong: _receive_pong,
    }

    @staticmethod
    def _check_not_splitting(sub: _Subscription, what: str) -> None:
        if sub.reassembler is not None and sub.reassembler.in_progress:
            raise RemoteProtocolError(f"{what} in the middle of a split element on stream {sub.subscriber}")

    # ---- our subscriptions (we subscribe to the peer) -------------------

    def subscribe(self, publisher: str, initial_demand: int = 0, *, copy: bool = True) -> int:
        """Subscribe to the peer's ``publisher``; return the new stream's Id.

        Ids come from a counter that never goes back, so an Id that was
        cancelled is never reused while late messages for it may arrive.

        ``copy=False``: the stream's split elements are joined into one
        buffer each, which the I/O layer may receive into directly
        (:meth:`receive_buffers`), and handed over as read-only
        ``memoryview`` objects of it instead of ``bytes`` (elements sent
        whole stay ``bytes``).

        Raises:
            LocalProtocolError: negative demand, or the connection is closing.
        """
        self._check_can_send()
        if type(initial_demand) is not int or initial_demand < 0:
            raise LocalProtocolError(f"initial_demand must be an int >= 0, got {initial_demand!r}")
        subscriber = self._next_id
        self._outbound.control += encode_subscribe(publisher, subscriber, min(initial_demand, UNBOUNDED))
        self._next_id += 1
        self._subscriptions[subscriber] = _Subscription(subscriber, publisher, initial_demand, copy)
        return subscriber

    def request(self, subscriber: int, n: int) -> None:
        """Ask for ``n`` more elements on our subscription ``subscriber``.

        A request for a stream that already ended or was cancelled is a
        no-op (RS 3.6).

        Raises:
            LocalProtocolError: ``n <= 0`` (RS 3.9), or an Id we never issued.
        """
        if type(n) is not int or n <= 0:
            raise LocalProtocolError(f"request(n) needs n > 0 (RS 3.9), got {n!r}")
        sub = self._subscriptions.get(subscriber)
        if sub is None or sub.state is _CANCELLED:
            if not 0 < subscriber < self._next_id:
                raise LocalProtocolError(f"request for subscriber id {subscriber}, which was never subscribed")
            return
        if self._state not in _SENDING_STATES:
            return
        if sub.demand.unbounded:
            return
        sub.demand.add(n)
        self._outbound.control += encode_request(subscriber, min(n, UNBOUNDED))

    def cancel(self, subscriber: int) -> None:
        """Cancel our subscription ``subscriber``; a no-op if it already ended."""
        sub = self._subscriptions.get(subscriber)
        if sub is None or sub.state is _CANCELLED:
            return
        sub.enter(SUBSCRIPTION_TRANSITIONS[sub.state, SubscriptionEvent.SEND_CANCEL])
        self._forget_parts(sub)
        del self._subscriptions[subscriber]
        evicted = _remember(self._cancelled, subscriber, self.limits.max_remembered_ids)
        if evicted is not None:
            self._forgotten_below = max(self._forgotten_below, evicted + 1)
        if self._state in _SENDING_STATES:
            self._outbound.control += encode(Cancel(subscriber=subscriber))

    def outstanding_demand(self, subscriber: int) -> int:
        """Demand we granted on our subscription and the peer has not yet used."""
        sub = self._subscriptions.get(subscriber)
        return sub.demand.outstanding if sub is not None else 0

    def element_size(self, subscriber: int) -> int:
        """The elementSize the peer announced for our subscription (0: variable)."""
        sub = self._subscriptions.get(subscriber)
        return sub.element_size if sub is not None else 0

    # ---- our publications (the peer subscribed to us) -------------------

    def _publication(self, subscriber: int) -> Publication:
        publication = self._publications.get(subscriber)
        if publication is None:
            raise LocalProtocolError(f"no open publication with subscriber id {subscriber}")
        return publication

    def _publication_transition(self, publication: Publication, event: PublicationEvent) -> None:
        try:
            publication.state = PUBLICATION_TRANSITIONS[publication.state, event]
        except KeyError:
            error = RemoteProtocolError if event.value.startswith("receive") else LocalProtocolError
            raise error(f"cannot {event.value} on publication {publication.subscriber} in state {publication.state.name}") from None

    def _enter_sending(self, publication: Publication) -> None:
        # The table's SEND_ELEMENTS step (once per batch queued, not per
        # element); a state it does not allow raises.
        self._publication_transition(publication, _SEND_ELEMENTS)
        self._check_can_send()

    def _forget_publication(self, publication: Publication) -> None:
        self._outbound.drop(publication)
        self._outbound.unschedule(publication)
        self._publications.pop(publication.subscriber, None)
        self._remember_finished(publication.subscriber)

    def _remember_finished(self, subscriber: int) -> None:
        _remember(self._finished_publications, subscriber, self.limits.max_remembered_ids)

    def accept(self, subscriber: int, element_size: int = 0) -> None:
        """Answer the peer's subscribe with subscribed.

        Args:
            element_size: if > 0, every element of the stream has exactly this
                many bytes, and runs of them go out packed.
        """
        self._check_can_send()
        publication = self._publication(subscriber)
        if type(element_size) is not int or element_size < 0:
            raise LocalProtocolError(f"element_size must be an int >= 0, got {element_size!r}")
        self._publication_transition(publication, _SEND_SUBSCRIBED)
        publication.element_size = element_size
        self._outbound.control += publication.subscribed_message()

    def publication_demand(self, subscriber: int) -> int:
        """How many more elements may be queued on ``subscriber`` (0 if it ended)."""
        publication = self._publications.get(subscriber)
        if publication is None or publication.state is not _PUBLISHING:
            return 0
        return publication.demand.outstanding

    def queued_bytes(self, subscriber: int) -> int:
        """Bytes queued on the publication and not yet handed out (an empty
        element counting :data:`EMPTY_ELEMENT_BYTES`)."""
        publication = self._publications.get(subscriber)
        return publication.pending_bytes if publication is not None else 0

    def is_publishing(self, subscriber: int) -> bool:
        """True while the publication exists and may still queue elements."""
        publication = self._publications.get(subscriber)
        return publication is not None and publication.state is _PUBLISHING

    def send_elements(self, subscriber: int, elements: Sequence[QueuedElement]) -> None:
        """Queue elements on a publication, within the peer's demand.

        The elements are written by :meth:`data_to_send`, packed, split and
        interleaved with other streams as the scheduler decides. Each is
        ``bytes``, or a ``memoryview`` of a ``bytes`` object (a slice of a
        larger buffer, sent without copying it first): both are immutable,
        so what is queued is what will be written.

        Raises:
            LocalProtocolError: more elements than demand, a wrong element size
                on a fixed-size stream, or a publication that is not active.
        """
        count = len(elements)
        if not count:
            return
        publication = self._publication(subscriber)
        self._enter_sending(publication)
        size = publication.element_size
        chunk: list[QueuedElement] | bytes
        if count == 1 and (type(elements[0]) is bytes or is_bytes_view(elements[0])):
            # One element (a publisher's send): no sets, and no chunk of its
            # own when it can join the last one (Outbound.enqueue_one); the
            # scheduler packs a fixed-size stream's run of them as it packs
            # a joined chunk. (Anything else takes the general path: its
            # error, or on a fixed-size stream, the join's copy of any
            # buffer, as before.)
            element = elements[0]
            if size and len(element) != size:
                raise _wrong_size(elements, size)
            self._take_demand(publication, 1)
            self._outbound.enqueue_one(publication, element, len(element))
            return
        if size:
            # Fixed-size elements are joined now: one type and size check for
            # the whole run, and the scheduler then sends them packed.
            try:
                chunk = b"".join(elements)
            except TypeError:
                raise LocalProtocolError("elements must be bytes or a memoryview of bytes") from None
            if len(chunk) != size * count or set(map(len, elements)) != {size}:
                raise _wrong_size(elements, size)
            nbytes = len(chunk)
        else:
            if set(map(type, elements)) != _ONLY_BYTES:  # (the usual case, found at C speed)
                for element in elements:
                    if type(element) is not bytes and not is_bytes_view(element):
                        raise _not_an_element(element)
            sizes = set(map(len, elements))
            if len(sizes) == 1:
                # Our own copy (the caller may reuse its list), marked so
                # that the scheduler need not measure its elements again.
                chunk = SameSizeElements(elements)
                nbytes = count * (sizes.pop() or EMPTY_ELEMENT_BYTES)
            else:
                chunk = list(elements)
                nbytes = sum(map(len, chunk))
                if 0 in sizes:
                    nbytes += EMPTY_ELEMENT_BYTES * list(map(len, chunk)).count(0)
        self._take_demand(publication, count)
        self._outbound.enqueue(publication, chunk, count, nbytes)

    @staticmethod
    def _take_demand(publication: Publication, count: int) -> None:
        # After every other check: demand taken is demand spent.
        if not publication.demand.take(count):
            raise LocalProtocolError(
                f"{count} elements exceed the demand of {publication.demand.outstanding}"
                f" on stream {publication.subscriber}"
            )

    def send_packed(self, subscriber: int, packed: bytes) -> None:
        """Queue ``len(packed) // element_size`` fixed-size elements at once.

        The fastest way to publish fixed-size elements: no per-element object
        is ever built. Same errors as :meth:`send_elements`.
        """
        publication = self._publication(subscriber)
        size = publication.element_size
        if not size:
            raise LocalProtocolError("send_packed needs a stream accepted with element_size > 0")
        if type(packed) is not bytes:
            if not isinstance(packed, (bytearray, memoryview)):
                raise LocalProtocolError(f"packed data must be bytes, got {type(packed).__name__}")
            packed = bytes(packed)  # a snapshot: the caller may reuse its buffer
        nbytes = len(packed)
        if nbytes % size:
            raise LocalProtocolError(f"packed data must be a multiple of element_size {size} bytes")
        if not nbytes:
            return
        self._enter_sending(publication)
        count = nbytes // size
        self._take_demand(publication, count)
        self._outbound.enqueue(publication, packed, count, nbytes)

    def complete(self, subscriber: int) -> None:
        """End a publication normally, after its queued elements."""
        self._check_can_send()
        publication = self._publication(subscriber)
        self._publication_transition(publication, _SEND_COMPLETE)
        publication.terminal = publication.on_complete_message()
        self._outbound.schedule(publication)

    def fail(self, subscriber: int, error: str) -> None:
        """End a publication with onError.

        Before :meth:`accept` this refuses the subscribe and goes out at once
        (as control); afterwards it follows the queued elements. ``error`` is
        text for people (often an exception's message): a character it holds
        that has no UTF-8 form goes as a backslash escape, and a text longer
        than ``limits.max_string_size`` is cut to it (:func:`text_within`).
        """
        self._check_can_send()
        publication = self._publication(subscriber)
        message = encode(OnError(subscriber=subscriber, error=text_within(error, self.limits.max_string_size)))
        self._publication_transition(publication, PublicationEvent.SEND_ERROR)
        if publication.state is PublicationState.DONE:
            self._forget_publication(publication)
            self._outbound.control += message
        else:
            publication.terminal = message
            self._outbound.schedule(publication)

    # ---- keepalive -------------------------------------------------------

    @property
    def keepalive(self) -> bool:
        """True once both hellos listed the keepalive extension: from then on
        either side may :meth:`send_ping`, and pings received are answered
        with pong automatically."""
        return self._keepalive

    @property
    def ping_in_flight(self) -> int | None:
        """The nonce of our ping still waiting for its pong, if any."""
        return self._ping_in_flight

    def send_ping(self) -> int:
        """Queue a ping (ahead of any data); return its nonce.

        The pong arrives as a :class:`Pong` event. When to ping and how
        long to wait for the pong is the I/O layer's policy
        (:class:`~rstreams.protocol.KeepaliveTimer`).

        Raises:
            LocalProtocolError: keepalive was not agreed, a ping is already
                in flight, or the connection is closing.
        """
        self._check_can_send()
        if not self._keepalive:
            raise LocalProtocolError("ping needs the keepalive extension in both hellos")
        if self._ping_in_flight is not None:
            raise LocalProtocolError(f"ping {self._ping_in_flight} is still waiting for its pong")
        nonce = self._next_ping
        self._next_ping += 1
        self._ping_in_flight = nonce
        self._outbound.control += encode(Ping(nonce=nonce))
        return nonce

    # ---- goodbye and output -------------------------------------------

    def send_goodbye(self, reason: str = "goodbye") -> int:
        """Queue goodbye; every stream ends. Returns the elements dropped.

        Control messages queued earlier still go out before the goodbye; data
        still queued is dropped (drain it first for a graceful close: wait for
        :attr:`has_data_to_send` to turn false). ``reason`` is text for
        people: a character that has no UTF-8 form goes as a backslash escape.
        """
        if self._goodbye_sent:
            raise LocalProtocolError("goodbye was already sent")
        # (A bad reason changes nothing; a long one is cut to what a peer takes.)
        message = encode(Goodbye(reason=text_within(reason, self.limits.max_string_size)))
        self._transition(ConnectionEvent.SEND_GOODBYE)
        self._goodbye_sent = True
        dropped = self._end_all_streams()
        self._outbound.control += message
        return dropped

    @property
    def goodbye_sent(self) -> bool:
        """True once our goodbye is queued."""
        return self._goodbye_sent

    @property
    def control_bytes(self) -> int:
        """Bytes of control messages queued and not yet taken by
        :meth:`data_to_send` (they always go before any element)."""
        return len(self._outbound.control)

    @property
    def inbound_bytes(self) -> int:
        """Bytes the peer sent that this machine holds: the unfinished split
        elements of every stream (their buffers, sized to a guess), the
        buffers ``copy=True`` streams of large elements keep for their next
        element (see ``_split``, "Kept for the next element"), and what was
        received and not yet parsed into events. Never more than the
        inbound half of ``max_connection_memory`` plus a message header,
        once :meth:`events` has parsed what was received."""
        waiting = sum(map(len, self._waiting)) if self._waiting else 0
        return self._unfinished + (self._fed - self._message_end) + waiting

    @property
    def outbound_bytes(self) -> int:
        """Bytes queued for the peer and not yet taken by :meth:`data_to_send`:
        control messages, and the elements queued on every publication."""
        return len(self._outbound.control) + self._outbound.data_bytes

    @property
    def has_data_to_send(self) -> bool:
        """True while control messages or queued elements wait to be written."""
        return self._outbound.has_data

    def data_to_send(self, max_bytes: int = DEFAULT_WRITE_SIZE) -> bytearray:
        """Take the next bytes to write: control messages, then data.

        Returns about ``max_bytes`` at most (one message may go past it);
        the caller owns the returned buffer.
        """
        data = self._outbound.data_to_send(max_bytes)
        self._after_taking()
        return data

    def buffers_to_send(
        self, max_bytes: int = DEFAULT_WRITE_SIZE, max_gathered: int | None = None
    ) -> list[bytearray | memoryview]:
        """As :meth:`data_to_send`, the same bytes in the same order, as a
        list of buffers for a gathering write (``socket.sendmsg``): a large
        split part is a view of its element instead of a copy. Empty when
        nothing waits. The caller owns the buffers; write them in order.

        ``max_gathered`` (default ``max_bytes``): about how many bytes of
        such views one call may hand out; they hold no memory but their
        elements', so a gathered write may be larger than ``max_bytes``.
        """
        buffers = self._outbound.buffers_to_send(max_bytes, max_gathered)
        self._after_taking()
        return buffers

    def _after_taking(self) -> None:
        outbound = self._outbound
        self._hello_taken = True
        if outbound.finished:
            for publication in outbound.finished:
                if self._publications.get(publication.subscriber) is publication:
                    del self._publications[publication.subscriber]
                    self._remember_finished(publication.subscriber)
            outbound.finished.clear()

    def __repr__(self) -> str:
        return (
            f"<Connection {self._state.name}: {len(self._subscriptions)} subscriptions,"
            f" {len(self._publications)} publications>"
        )




class _PredictedPart:
    """A part receive_buffers expects in a header slot: the next part of
    the element being received, with ``size`` bytes of payload. Its
    header's bytes as onNextPart and as onNextLastPart, and what
    read_part_header reads from each, with a view of those bytes to wait in
    _waiting in the slot's place (see _slot_headers)."""

    __slots__ = ("ids", "size", "header", "last_header", "as_part", "as_last_part")

    def __init__(self, ids: bytes, subscriber: int, element: int, size: int) -> None:
        self.ids = ids  # (the subscriber's and element's encoding: they are the same if it is)
        self.size = size
        rest = ids + bin_header(size)
        self.header = bytes((FIXARRAY_4, PART_CODE)) + rest
        self.last_header = bytes((FIXARRAY_4, LAST_PART_CODE)) + rest
        length = len(self.header)
        self.as_part = (memoryview(self.header), PartHeader(length, False, subscriber, element, size))
        self.as_last_part = (memoryview(self.last_header), PartHeader(length, True, subscriber, element, size))


def _filled_part(buffers: list[memoryview | bytearray], nbytes: int) -> list[memoryview | bytearray]:
    """The first ``nbytes`` of ``buffers`` (as a read fills them), as views."""
    filled: list[memoryview | bytearray] = []
    for buffer in buffers:
        if not nbytes:
            break
        taken = len(buffer) if nbytes >= len(buffer) else nbytes
        filled.append(memoryview(buffer)[:taken])
        nbytes -= taken
    return filled


def _first_bytes(waiting: deque[memoryview], count: int) -> bytes:
    """Up to ``count`` bytes from the front of ``waiting`` (a copy: a
    part's header is all that is ever read this way)."""
    front = waiting[0]
    if len(front) >= count:
        return bytes(front[:count])
    views = []
    for view in waiting:
        views.append(view[:count])
        count -= len(views[-1])
        if count <= 0:
            break
    return b"".join(views)


def _may_start_part(front: bytes | bytearray | memoryview) -> bool:
    """Whether a message starting ``front`` (not empty) may be a part: a
    four-element array whose code is a part's, or whose code is in the next
    read. Other four-element messages (subscribe, onNextPacked) go straight
    to the Unpacker, which a part's path would only hand them back to."""
    return front[0] == FIXARRAY_4 and (len(front) < 2 or front[1] == PART_CODE or front[1] == LAST_PART_CODE)


def _may_start_on_next(front: bytes | bytearray | memoryview) -> bool:
    """As :func:`_may_start_part`, for the runs of onNext: subscribed and
    request, three-element arrays too, go straight to the Unpacker."""
    return front[0] == FIXARRAY_3 and (len(front) < 2 or front[1] == ON_NEXT_CODE)


def _drop_empty_views(waiting: deque[memoryview]) -> bool:
    """Drop empty reads from the front of ``waiting``; True if any bytes wait."""
    while waiting:
        if waiting[0]:
            return True
        waiting.popleft()
    return False


def _drop_bytes(waiting: deque[memoryview], count: int) -> None:
    """Remove ``count`` bytes from the front of ``waiting`` (all there)."""
    while count:
        front = waiting[0]
        if len(front) <= count:
            waiting.popleft()
            count -= len(front)
        else:
            waiting[0] = front[count:]
            count = 0


def is_bytes_view(element: object) -> bool:
    """True for a one-dimensional, contiguous byte view of a ``bytes`` object:
    an element that can be queued as it is and cannot change before it is
    written (a view of a ``bytearray`` could)."""
    return (
        type(element) is memoryview
        and type(element.obj) is bytes
        and element.ndim == 1
        and element.format == "B"
        and element.c_contiguous
    )


def _not_an_element(element: object) -> LocalProtocolError:
    """The error for queuing what cannot be an element (send_elements)."""
    return LocalProtocolError(f"elements must be bytes or a memoryview of bytes, got {_describe_element(element)}")


def _wrong_size(elements: Sequence[QueuedElement], size: int) -> LocalProtocolError:
    """The error for elements of another size than a fixed-size stream's."""
    lengths = sorted(set(map(len, elements)))
    return LocalProtocolError(f"elements of {lengths} bytes on a stream with element_size {size}")


def _describe_element(element: object) -> str:
    """What a refused element is, for the error (it failed is_bytes_view)."""
    if type(element) is not memoryview:
        return type(element).__name__
    if type(element.obj) is not bytes:
        return f"a memoryview of {type(element.obj).__name__}"
    return "a memoryview of bytes that is not one run of bytes"


# TLS records start with their content type: 0x15 an alert, 0x16 a handshake,
# whose message type (the sixth byte) is 1 for ClientHello, 2 for ServerHello.
# Neither byte starts a msgpack array, so a peer that speaks TLS fails
# decoding on its first byte; saying so beats "a message must be an array".
_TLS_ALERT = 0x15
_TLS_HANDSHAKE = 0x16
_TLS_CLIENT_HELLO = 1


def _tls_where_hello_was_expected(opening: bytearray) -> RemoteProtocolError | None:
    if not opening or opening[0] not in (_TLS_ALERT, _TLS_HANDSHAKE):
        return None
    if opening[0] == _TLS_HANDSHAKE and len(opening) >= 6 and opening[5] == _TLS_CLIENT_HELLO:
        return RemoteProtocolError("the peer speaks TLS where hello was expected: this port is plain, use tcp://")
    return RemoteProtocolError("this port speaks TLS: use tls://")

