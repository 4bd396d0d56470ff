"""A resume's resend is pulled in bounded pieces, and what is kept is counted as what it holds.

A connector that never acknowledges makes the listener keep up to a window
of messages per channel (65,536); each resume used to re-encode all of them
in one synchronous step (a quarter of a second a channel, every other
connection of the server waiting). Now the channel learns where to resend
from (``HOLDING`` -> ``CATCHING_UP``, ``_state.CHANNEL_TRANSITIONS``) and
``data_to_send`` encodes about ``resend_chunk`` bytes of it per call; the
trio writer pulls the next piece when its queue runs dry.

Checked here: sans-I/O, each ``data_to_send`` stays within the chunk and
everything arrives once and in order, whatever is sent, closed, committed
or cut meanwhile (hypothesis); over real sockets on 127.0.0.1, the server
writes a resend of many kept messages in many bounded writes with another
task running between them, and the connector gets every message exactly
once, in order.
"""

from __future__ import annotations

from functools import partial

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relink_pair import Pair

from bridges.relink import (
    Connection,
    Event,
    HandshakeComplete,
    LinkConfig,
    LinkRequested,
    LinkState,
    MessageReceived,
    RelinkLink,
    RelinkServer,
    RelinkSettings,
    Role,
)
from bridges.relink._link import KEPT_MESSAGE_COST, KEPT_PART_COST, kept_cost, kept_total
from bridges.relink._state import CHANNEL_TRANSITIONS, ChannelEvent, ChannelPhase
from rstreams.protocol import StateEnum
from rstreams.support import listener_port

CONFIG = LinkConfig(connector_id_size=1, listener_id_size=1)


def numbered(n: int) -> tuple[bytes, ...]:
    return (n.to_bytes(4, "big"), bytes(n % 53))


def received(events: list[Event], channel: int) -> list[tuple[bytes, ...]]:
    return [e.parts for e in events if isinstance(e, MessageReceived) and e.channel == channel]


def exchange(pair: Pair, rounds: int, chunk: int | None = None) -> tuple[list[Event], list[int]]:
    # ``rounds`` times one data_to_send each way (as a writer does, one
    # write at a time): the listener's events, and the size of each
    # connector write. With ``chunk``: a write that is only a piece of the
    # resend is checked to be about that big.
    events: list[Event] = []
    sizes: list[int] = []
    for _ in range(rounds):
        only_resend = not pair.connector.output_size and pair.connector.resend_pending
        data = pair.connector.data_to_send()
        if chunk is not None and only_resend:
            assert 0 < len(data) <= chunk + LARGEST_PACKET
        sizes.append(len(data))
        if data:
            pair.listener.receive_data(data)
        for event in pair.listener.events():
            events.append(event)
            if isinstance(event, LinkRequested):
                pair.decide(event)
                events += pair.listener.events()
        data = pair.listener.data_to_send()
        if data:
            pair.connector.receive_data(data)
        pair.connector.events()
    return events, sizes


def pull_all(pair: Pair, chunk: int | None = None, limit: int = 100_000) -> tuple[list[Event], list[int]]:
    # Exchange until neither side has anything to send.
    events: list[Event] = []
    sizes: list[int] = []
    for _ in range(limit):
        if not (pair.connector.has_data_to_send or pair.listener.has_data_to_send):
            return events, sizes
        more, more_sizes = exchange(pair, 1, chunk)
        events += more
        sizes += more_sizes
    raise AssertionError("never quiet")


#: A packet of the largest numbered message (4 + 52 bytes) and a close, with headers.
LARGEST_PACKET = 128


# ---- the table --------------------------------------------------------------------


def test_the_channel_table_uses_state_enums_and_every_phase_can_resume() -> None:
    for (phase, event), target in CHANNEL_TRANSITIONS.items():
        for member in (phase, event, target):
            assert isinstance(member, StateEnum)
    for phase in ChannelPhase:
        assert CHANNEL_TRANSITIONS[phase, ChannelEvent.BEGIN_RESUME] is ChannelPhase.HOLDING
    # Only a resend in progress becomes live by finishing it.
    assert {p for (p, e) in CHANNEL_TRANSITIONS if e is ChannelEvent.CAUGHT_UP} == {ChannelPhase.CATCHING_UP}


# ---- sans-I/O ------------------------------------------------------------------------


def test_a_resume_of_many_kept_messages_comes_in_bounded_pieces_once_and_in_order() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    for n in range(2000):
        pair.connector.send_message(1, numbered(n))
    pair.connector.data_to_send()  # lost with the connection: the listener has none
    second = pair.reconnect()
    second.connector.resend_chunk = 4096
    events, sizes = pull_all(second, chunk=4096)
    assert received(events, 1) == [numbered(n) for n in range(2000)]
    assert sum(1 for size in sizes if size) >= 2000 * 30 // 4096  # many pieces, not one


def test_messages_sent_while_catching_up_follow_the_resend() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    for n in range(300):
        pair.connector.send_message(1, numbered(n))
    pair.connector.data_to_send()
    second = pair.reconnect()
    second.connector.resend_chunk = 512
    events, _ = exchange(second, 4)  # the handshake and the resume, then a piece of the resend
    link = second.connector.link
    assert link is not None
    state = link.outgoing[1]
    assert state.phase is ChannelPhase.CATCHING_UP and 0 < state.sent < 300
    second.connector.send_message(1, numbered(300))  # kept, written after the resend
    second.connector.send_message(2, numbered(0))  # another channel: at once
    assert second.connector.output_size > 0
    second.connector.close_channel(1)
    more, _ = pull_all(second, chunk=512)
    events += more
    assert received(events, 1) == [numbered(n) for n in range(301)]
    assert received(events, 2) == [numbered(0)]
    assert state.phase is ChannelPhase.LIVE and state.close_sent


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("send"), st.integers(1, 3), st.integers(1, 40)),
            st.tuples(st.just("pull"), st.integers(1, 3), st.integers(1, 2000)),
            st.tuples(st.just("consume"), st.integers(1, 3), st.integers(1, 30)),
            st.tuples(st.just("drop"), st.integers(0, 3), st.integers(0, 400)),
        ),
        max_size=30,
    ),
    chunk=st.integers(1, 600),
)
def test_any_pulls_sends_and_drops_deliver_everything_once_in_order(
    steps: list[tuple[str, int, int]], chunk: int
) -> None:
    # The connector sends numbered messages on channels 1..3; the listener
    # consumes some; connections drop with a random prefix of the bytes in
    # flight delivered; a resume's resend is pulled a random number of times
    # between the other steps. Whatever happens, each channel's messages
    # arrive in order and exactly once, the kept count matches the buffer,
    # and a LIVE channel has nothing unsent.
    pair = Pair(CONFIG)
    pair.handshake()
    pair.connector.resend_chunk = chunk
    sent = {1: 0, 2: 0, 3: 0}
    got: dict[int, list[tuple[bytes, ...]]] = {1: [], 2: [], 3: []}
    unconsumed = {1: 0, 2: 0, 3: 0}

    def take(events: list[Event]) -> None:
        for channel, parts in ((e.channel, e.parts) for e in events if isinstance(e, MessageReceived)):
            got[channel].append(parts)
            unconsumed[channel] += 1

    def listener_answers() -> None:
        data = pair.listener.data_to_send()
        if data:
            pair.connector.receive_data(data)
        pair.connector.events()

    for op, channel, value in steps:
        if op == "send":
            for _ in range(value):
                if not pair.connector.can_send(channel):
                    break
                pair.connector.send_message(channel, numbered(sent[channel]))
                sent[channel] += 1
        elif op == "pull":
            take(exchange(pair, value % 7 + 1, chunk)[0])
        elif op == "consume" and unconsumed[channel]:
            count = min(value, unconsumed[channel])
            pair.listener.consume(channel, count=count)
            pair.listener.flush_acks()
            unconsumed[channel] -= count
            take(exchange(pair, 1, chunk)[0])
        elif op == "drop":
            data = pair.connector.data_to_send()[:value]
            if data:
                pair.listener.receive_data(data)
            take(pair.listener.events())
            pair = pair.reconnect()
            pair.connector.resend_chunk = chunk
            take(exchange(pair, 3, chunk)[0])  # the handshake and both resume preambles
        link = pair.connector.link
        if link is not None:
            kept = sum(kept_cost(m) for s in link.outgoing.values() for m in s.buffered)
            assert link.kept_memory == kept
            for state in link.outgoing.values():
                if state.phase is ChannelPhase.LIVE:
                    assert state.sent == len(state.buffered)
    events, _ = pull_all(pair, chunk)
    take(events)
    for channel in (1, 2, 3):
        assert got[channel] == [numbered(n) for n in range(sent[channel])], channel


# ---- the budget's count of what is kept ---------------------------------------------


def test_a_kept_message_counts_what_it_holds_in_memory() -> None:
    pair = Pair(CONFIG)
    pair.handshake()
    link = pair.connector.link
    assert link is not None
    pair.connector.send_message(1, [b"12345678"])
    pair.connector.send_message(1, [])
    assert link.unacknowledged_bytes == 8  # the payload, as before
    assert link.kept_memory == 8 + 2 * KEPT_MESSAGE_COST + KEPT_PART_COST
    assert kept_cost((b"12345678",)) >= 98  # measured: tuple 48, bytes 33 + 8, deque slot 8
    batch = [(b"12345678",), (), (b"a", b"bc")]
    assert kept_total(batch) == sum(map(kept_cost, batch))
    pair.pump()
    pair.listener.consume(1, count=2)
    pair.listener.flush_acks()
    pair.pump()
    assert link.kept_memory == 0


# ---- over real sockets -----------------------------------------------------------------

COUNT = 3000
WRITE_BUFFER = 4096
SOCKET_SETTINGS = RelinkSettings(
    reconnect_delay=0.01, reconnect_max_delay=0.05, shutdown_timeout=0.5, max_write_buffer=WRITE_BUFFER
)


async def connector_handshake(port: int, link: LinkState | None) -> tuple[trio.SocketStream, Connection, list[Event]]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    machine = Connection(Role.CONNECTOR, config=CONFIG, endpoint_name="test", link=link)
    events: list[Event] = []
    while not any(isinstance(e, HandshakeComplete) for e in events):
        while machine.has_data_to_send:
            await stream.send_all(machine.data_to_send())
        data = await stream.receive_some(65536)
        assert data
        machine.receive_data(data)
        events += machine.events()
    while machine.has_data_to_send:
        await stream.send_all(machine.data_to_send())
    return stream, machine, events


async def test_a_resume_is_written_in_bounded_writes_with_other_tasks_between(nursery: trio.Nursery) -> None:
    all_sent = trio.Event()
    links: list[RelinkLink] = []

    async def handler(link: RelinkLink) -> None:
        links.append(link)
        for n in range(COUNT):
            await link.send(1, numbered(n))
        all_sent.set()
        await link.wait_ended()

    server = RelinkServer(handler, {"test": CONFIG}, settings=SOCKET_SETTINGS)
    listeners = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    port = listener_port(listeners[0])
    with trio.fail_after(30):
        # First connection: a connector that reads and never parses nor
        # acknowledges; the server keeps every message.
        stream, machine, _ = await connector_handshake(port, None)
        while not all_sent.is_set():
            with trio.move_on_after(0.05):
                await stream.receive_some(65536)
        await stream.aclose()
        link_state = machine.link
        assert link_state is not None and not link_state.incoming  # so the resume asks for everything
        server_link = links[0]
        await server_link.wait_disconnected()

        # A bystander task that records, each time it runs, what the
        # server's connection has taken from its machine and written.
        seen: list[tuple[int, int]] = []
        done = trio.Event()

        async def watch() -> None:
            while not done.is_set():
                connection = server_link.connection
                if connection is not None and connection.resumed:
                    observed = (connection.bytes_sent + connection.write_backlog(), connection.bytes_sent)
                    if not seen or seen[-1] != observed:
                        seen.append(observed)
                await trio.lowlevel.checkpoint()

        nursery.start_soon(watch)
        stream, machine, events = await connector_handshake(port, link_state)
        got = received(events, 1)
        while len(got) < COUNT:
            data = await stream.receive_some(65536)
            assert data
            machine.receive_data(data)
            got += received(machine.events(), 1)
        done.set()
        assert got == [numbered(n) for n in range(COUNT)]  # every kept message, once, in order
        total = seen[-1][0]
        assert total > 30 * WRITE_BUFFER
        # Never much more than two writes' worth taken and unwritten ...
        assert max(queued - written for queued, written in seen) <= 2 * WRITE_BUFFER + 1024
        # ... so the bystander ran between many pieces.
        assert len({queued for queued, _ in seen}) >= total // (2 * WRITE_BUFFER)
        await stream.aclose()
