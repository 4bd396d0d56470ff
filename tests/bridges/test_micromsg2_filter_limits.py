"""Filters within ``Limits.max_filter_length`` and ``Limits.max_filter_conditions``.

A filter over either limit is refused before any condition is parsed, and
from a peer it fails that one subscription (its stream ERROR, the text cut
at 1000 characters) while the connection stays usable: by ``parse_filter``
(property tests), by the machine (byte vectors), and by the broker over a
real socket, where the probe's 900 KB filter of 150,000 conditions is
refused as a small typed error.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from micromsg2_pair import Pair
from micromsg2_raw import RawClient

import examples.demo
import rstreams
from bridges.micromsg2 import (
    CommandFrame,
    Completed,
    Connection,
    Decoder,
    ErrorFrame,
    ExtensionSpec,
    FilterError,
    FilterTooLargeError,
    HandshakeCompleted,
    Limits,
    MessageReceived,
    MicroMsg2AppServer,
    NamedArguments,
    Role,
    StreamFailed,
    Subscribe,
    encode_frame,
    parse_filter,
)
from rstreams.support import listener_port

PUBSUB = ExtensionSpec(name="pubsub")
DEFAULTS = Limits()

# ---- parse_filter ------------------------------------------------------------

conditions = st.lists(
    st.tuples(
        st.from_regex(r"[a-z][a-z0-9-]{0,5}", fullmatch=True),
        st.sampled_from(["=", "!=", "<", ">", "~", "&"]),
        st.from_regex(r"[A-Za-z0-9]{0,8}", fullmatch=True),
    ),
    min_size=1,
    max_size=40,
)


@given(conditions, st.integers(1, 50), st.integers(1, 400), st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_filter_is_refused_exactly_when_over_a_limit(
    items: list[tuple[str, str, str]], max_conditions: int, max_length: int, trailing: bool
) -> None:
    text = ";".join(f"{key}{op}T{value}" for key, op, value in items) + (";" if trailing else "")
    over = len(text) > max_length or len(items) > max_conditions
    try:
        parsed = parse_filter(text, max_length=max_length, max_conditions=max_conditions)
    except FilterTooLargeError:
        assert over
    else:
        assert not over
        assert len(parsed.conditions) == len(items)
        assert parsed == parse_filter(text)  # the limits change nothing else


@given(st.text(alphabet=st.sampled_from("ab1=<>!~&;NDT.-%x"), max_size=300), st.integers(1, 8), st.integers(1, 64))
@settings(max_examples=500, deadline=None)
def test_any_text_parses_within_the_limits_or_is_a_filter_error(text: str, max_conditions: int, max_length: int) -> None:
    try:
        parsed = parse_filter(text, max_length=max_length, max_conditions=max_conditions)
    except FilterError:
        return
    assert len(parsed.conditions) <= max_conditions
    assert len(text) <= max_length


def test_the_limits_are_checked_before_any_condition_is_parsed() -> None:
    # 150,000 conditions, none of which would parse: refused for their
    # number, not for the first bad one (no condition is looked at).
    with pytest.raises(FilterTooLargeError, match="at most 256 conditions; this one has 150000"):
        parse_filter(";".join(["?"] * 150_000), max_conditions=256)
    with pytest.raises(FilterTooLargeError, match="at most 4096 characters; this one has 4097"):
        parse_filter("a=T" + "x" * 4094, max_length=4096)


def test_limits_refuse_a_filter_limit_that_is_not_a_positive_integer() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            Limits(max_filter_conditions=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            Limits(max_filter_length=bad)  # type: ignore[arg-type]


# ---- the machine --------------------------------------------------------------


def open_server(limits: Limits = DEFAULTS) -> Connection:
    # A server machine after the handshake, fed raw COMMAND frames from then on.
    client = Connection(Role.CLIENT, identity="hulk", required=[PUBSUB])
    server = Connection(Role.SERVER, optional=[PUBSUB], limits=limits)
    pair = Pair(client, server)
    pair.pump()
    assert any(isinstance(event, HandshakeCompleted) for event in pair.server_events)
    return server


def subscribe_frame(destination: str, filter_text: str) -> bytes:
    return encode_frame(CommandFrame(command=NamedArguments.of("subscribe", {"destination": destination, "filter": filter_text})))


def errors_in(data: bytes) -> list[NamedArguments]:
    decoder = Decoder()
    decoder.feed(data)
    frames = []
    while (frame := decoder.next_frame()) is not None:
        assert isinstance(frame, ErrorFrame)
        frames.append(frame.error)
    return frames


@pytest.mark.parametrize(
    ("filter_text", "why"),
    [
        (";".join(["a~T"] * 33), "at most 32 conditions; this one has 33"),
        ("a=T" + "x" * 5000, "at most 4096 characters; this one has 5003"),
    ],
    ids=["conditions", "length"],
)
def test_the_machine_fails_that_subscription_only(filter_text: str, why: str) -> None:
    server = open_server()
    server.receive_data(subscribe_frame("chat", filter_text) + subscribe_frame("prices", "price>=N10"))
    events = server.events()
    # The refused subscription is not reported (nothing to subscribe to);
    # the next one, on the same connection, is.
    assert [type(event) for event in events] == [Subscribe]
    assert events[0] == Subscribe(destination="prices", filter=parse_filter("price>=N10"))
    assert server.subscriptions == frozenset({"prices"})
    [error] = errors_in(server.data_to_send())
    assert error.get("destination") == "chat"
    assert why in (error.get("message") or "")


def test_the_machine_refuses_the_probe_s_900_kb_filter_with_a_short_error() -> None:
    server = open_server()
    server.receive_data(subscribe_frame("chat?history=1", ";".join(["a~T"] * 150_000)))
    assert server.events() == []
    data = server.data_to_send()
    assert len(data) < 1200
    [error] = errors_in(data)
    assert error.get("message") == "a filter is at most 4096 characters; this one has 599999"


def test_smaller_limits_are_the_server_s_own() -> None:
    server = open_server(Limits(max_filter_conditions=2, max_filter_length=64))
    server.receive_data(subscribe_frame("a", "x=N1;y=N2") + subscribe_frame("b", "x=N1;y=N2;z=N3"))
    assert [event.destination for event in server.events() if isinstance(event, Subscribe)] == ["a"]
    [error] = errors_in(server.data_to_send())
    assert error.get("message") == "a filter has at most 2 conditions; this one has 3"


def test_stream_error_texts_are_cut_at_1000_characters() -> None:
    server = open_server()
    server.receive_data(subscribe_frame("prices", "price>=N10"))
    server.events()
    server.fail_stream("prices", "x" * 5000)
    server.refuse_sends("chat", "y" * 5000)
    errors = errors_in(server.data_to_send())
    assert [(error.get("destination"), error.get("message")) for error in errors] == [
        ("prices", "x" * 1000),
        ("chat", "y" * 1000),
    ]


# ---- over a real socket -------------------------------------------------------


@pytest.fixture
async def port(nursery: trio.Nursery) -> int:
    app = rstreams.Router()
    route = examples.demo.app.resolve("range")
    assert route is not None
    app.add("range", route)
    rstreams.Topic("chat", capacity=8).mount(app)
    server = MicroMsg2AppServer(app)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    return listener_port(listener)


async def test_the_broker_refuses_huge_filters_typed_and_the_connection_stays_usable(port: int) -> None:
    with trio.fail_after(30):
        client = await RawClient.connect(port, window=8)
        assert isinstance(await client.next_event(), HandshakeCompleted)
        huge = ";".join(["a~T"] * 150_000)  # the probe's: a 900 KB COMMAND frame
        many = ";".join(f"k{n}=N{n}" for n in range(300))  # short, but 300 conditions
        for index, filter_text in enumerate((huge, many, huge)):
            await client.stream.send_all(subscribe_frame(f"chat?history={index + 1}", filter_text))
        failed = [await client.next_event() for _ in range(3)]
        assert [type(event) for event in failed] == [StreamFailed] * 3
        assert isinstance(failed[0], StreamFailed) and isinstance(failed[1], StreamFailed)
        assert failed[0].message == "a filter is at most 4096 characters; this one has 599999"
        assert failed[1].message == "a filter has at most 32 conditions; this one has 300"
        # The same connection still subscribes, with a filter within the limits.
        await client.subscribe("range?count=2", "a=N1")  # (range's elements carry no properties)
        await client.subscribe("range?count=3")
        seen: list[object] = []
        while len([event for event in seen if isinstance(event, Completed)]) < 2:
            event = await client.next_event()
            seen.append(event)
            if isinstance(event, MessageReceived):
                await client.ack(1)
        payloads = [event.payload for event in seen if isinstance(event, MessageReceived)]
        assert payloads == [n.to_bytes(8, "big") for n in range(3)]
        await client.aclose()
