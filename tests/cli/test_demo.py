"""Every publisher of the demo app (``rstreams/demo.py``, also ``examples.demo:app``), over TCP, in process.

The exact bytes matter: an independent conformance client checks them from
the wire profile, so they are checked here element by element (and once
with a raw msgpack client that shares no code with the runtime).
"""

from __future__ import annotations

import itertools
import math
import struct
import time

import msgpack
import pytest
import trio
import trio.testing

import rstreams.demo as demo
import rstreams

TIMEOUT = 20


def u64(data: bytes) -> int:
    assert len(data) == 8
    return int.from_bytes(data, "big")


def blob_element(index: int, size: int) -> bytes:
    return bytes((index + j) % 256 for j in range(size))


async def collect(url: str, name: str, *, prefetch: int = 32, client_app: rstreams.Router | None = None) -> list[bytes]:
    """Every element of ``name``; a stream error is raised as itself (not in a group)."""
    error: rstreams.SubscriptionError | None = None
    async with rstreams.open_session(url, app=client_app) as session:
        try:
            async with session.subscribe(name, prefetch=prefetch) as subscription:
                return [element async for element in subscription]
        except rstreams.SubscriptionError as exc:
            error = exc
    raise error


async def settle() -> None:
    # Let every message in flight over loopback arrive and be handled.
    for _ in range(3):
        await trio.testing.wait_all_tasks_blocked(cushion=0.01)


# ---- range ---------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 5, 65536, 70000])
async def test_range_sends_big_endian_counters_then_completes(demo_url: str, count: int) -> None:
    with trio.fail_after(TIMEOUT):
        async with rstreams.open_session(demo_url) as session:
            async with session.subscribe(f"range?count={count}", prefetch=1000) as numbers:
                assert numbers.element_size == 8
                received = [element async for element in numbers]
    assert len(received) == count
    assert received == [i.to_bytes(8, "big") for i in range(count)]


async def test_range_counts_ten_by_default(demo_url: str) -> None:
    with trio.fail_after(TIMEOUT):
        received = await collect(demo_url, "range")
    assert [u64(element) for element in received] == list(range(10))


def test_range_elements_beyond_the_first_block_are_built_by_arithmetic() -> None:
    for index in (1, 2, 255, 256, 65537, 2**40 + 3, 2**48 - 1):
        start = index * demo.RANGE_BLOCK
        block = demo._range_elements(start, demo.RANGE_BLOCK)
        assert len(block) == demo.RANGE_BLOCK * 8
        for j in (0, 1, 255, 256, 40000, demo.RANGE_BLOCK - 1):
            assert block[j * 8 : j * 8 + 8] == (start + j).to_bytes(8, "big")
    assert demo._range_elements(5 * 65536, 65536) == struct.pack(f">{demo.RANGE_BLOCK}Q", *range(5 * 65536, 6 * 65536))
    # Runs shorter than a block, starting anywhere inside one.
    for start, count in ((0, 1), (7, 16), (65530, 6), (3 * 65536 + 100, 1000), (2**40 + 9, 256)):
        assert demo._range_elements(start, count) == struct.pack(f">{count}Q", *range(start, start + count))


@pytest.mark.parametrize("name", ["range?count=-1", "range?count=ten"])
async def test_range_refuses_bad_counts_with_on_error(demo_url: str, name: str) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(rstreams.PublisherError, match="count"):
        await collect(demo_url, name)


# ---- blob ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "size"),
    [
        (3, 10),
        (300, 7),  # wraps around the 256-element period
        (5, 0),
        (2, 5000),
        (3, 200_000),  # split into parts on the wire
        (2, 1_100_000),  # larger than the shared pattern
    ],
)
async def test_blob_elements_follow_the_pattern(demo_url: str, count: int, size: int) -> None:
    with trio.fail_after(TIMEOUT):
        async with rstreams.open_session(demo_url) as session:
            async with session.subscribe(f"blob?count={count}&size={size}", prefetch=8) as blobs:
                assert blobs.element_size == 0
                received = [element async for element in blobs]
    assert len(received) == count
    for index, element in enumerate(received):
        assert len(element) == size
        assert element == blob_element(index, size), f"element {index} differs"


async def test_blob_refuses_sizes_above_the_maximum(demo_url: str) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(rstreams.PublisherError, match="maximum"):
        await collect(demo_url, f"blob?count=1&size={demo.MAX_BLOB_SIZE + 1}")


# ---- ticker --------------------------------------------------------------


async def test_ticker_sends_seq_time_and_a_random_walk(demo_url: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with rstreams.open_session(demo_url) as session:
            async with session.subscribe("ticker?interval=0.01", prefetch=4) as ticks:
                received = [msgpack.unpackb(raw) async for raw in _take(ticks, 6)]
    for seq, tick in enumerate(received):
        assert isinstance(tick, list) and len(tick) == 3
        number, unix_time, value = tick
        assert number == seq
        assert isinstance(unix_time, float) and abs(unix_time - time.time()) < 60
        assert isinstance(value, float) and math.isfinite(value)
    times = [tick[1] for tick in received]
    assert times == sorted(times)
    assert len({tick[2] for tick in received}) > 1  # it walks


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "soon"])
async def test_ticker_refuses_bad_intervals(demo_url: str, interval: str) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(rstreams.PublisherError, match="interval"):
        await collect(demo_url, f"ticker?interval={interval}")


async def _take(subscription: rstreams.Subscription, count: int):  # type: ignore[no-untyped-def]
    for _ in range(count):
        yield await subscription.__anext__()


# ---- fail ----------------------------------------------------------------


@pytest.mark.parametrize("after", [0, 3, 100])
async def test_fail_sends_n_elements_then_on_error(demo_url: str, after: int) -> None:
    received: list[bytes] = []
    with trio.fail_after(TIMEOUT):
        async with rstreams.open_session(demo_url) as session:
            async with session.subscribe(f"fail?after={after}", prefetch=16) as failing:
                assert failing.element_size == 8
                with pytest.raises(rstreams.PublisherError) as caught:
                    async for element in failing:
                        received.append(element)
    assert received == [i.to_bytes(8, "big") for i in range(after)]
    assert caught.value.message == f"fail: failing after {after} elements as asked"


# ---- unknown names -------------------------------------------------------


async def test_unknown_names_get_no_such_publisher(demo_url: str) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(rstreams.UnknownPublisher) as caught:
        await collect(demo_url, "nope?x=1")
    assert str(caught.value) == "no such publisher: nope?x=1"


# ---- echo ----------------------------------------------------------------


def numbered_source(count: int | None = None, *, fail_after: int | None = None) -> tuple[rstreams.Router, dict[str, object]]:
    """A client-side router with ``numbers``, and what its publisher saw."""
    seen: dict[str, object] = {"sent": 0, "most_allowed": 0, "cancelled": trio.Event()}

    async def numbers(sink: rstreams.Sink) -> None:
        try:
            for i in itertools.count() if count is None else range(count):
                if fail_after is not None and i == fail_after:
                    raise RuntimeError(f"source gave up after {i}")
                await sink.send(i.to_bytes(4, "big"))
                seen["sent"] = i + 1
                # All the demand the source has ever been given: sent + outstanding.
                seen["most_allowed"] = max(int(seen["most_allowed"]), i + 1 + sink.demand)  # type: ignore[call-overload]
        except trio.Cancelled:
            seen["cancelled"].set()  # type: ignore[attr-defined]
            raise

    return rstreams.Router({"numbers": numbers}), seen


async def test_echo_republishes_the_clients_publisher_in_order(demo_url: str) -> None:
    client_app, _ = numbered_source(100)
    with trio.fail_after(TIMEOUT):
        received = await collect(demo_url, "echo?source=numbers", prefetch=8, client_app=client_app)
    assert received == [i.to_bytes(4, "big") for i in range(100)]


async def test_echo_passes_demand_through_to_the_source(demo_url: str) -> None:
    client_app, seen = numbered_source()
    bound = demo.ECHO_PREFETCH
    with trio.fail_after(TIMEOUT):
        async with rstreams.open_session(demo_url, app=client_app) as session:
            async with session.subscribe("echo?source=numbers", prefetch=0) as echo:
                await settle()
                assert int(seen["most_allowed"]) <= bound  # type: ignore[call-overload]
                requested = 0
                for step in (5, 10, 1, 40):
                    echo.request(step)
                    requested += step
                    received = [await echo.__anext__() for _ in range(step)]
                    assert [int.from_bytes(r, "big") for r in received] == list(range(requested - step, requested))
                    await settle()
                    assert int(seen["most_allowed"]) <= requested + bound  # type: ignore[call-overload]
                    assert int(seen["sent"]) >= requested  # type: ignore[call-overload]
            # Leaving the echo subscription cancels the source on our side.
            await seen["cancelled"].wait()  # type: ignore[attr-defined]


async def test_echo_fails_when_the_source_fails(demo_url: str) -> None:
    client_app, _ = numbered_source(fail_after=2)
    received: list[bytes] = []
    with trio.fail_after(TIMEOUT):
        async with rstreams.open_session(demo_url, app=client_app) as session:
            async with session.subscribe("echo?source=numbers", prefetch=4) as echo:
                with pytest.raises(rstreams.PublisherError) as caught:
                    async for element in echo:
                        received.append(element)
    assert received == [b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"]
    assert caught.value.message == "source gave up after 2"


async def test_echo_of_a_missing_source_fails_with_its_error(demo_url: str) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(rstreams.PublisherError) as caught:
        await collect(demo_url, "echo?source=missing", client_app=rstreams.Router())
    assert caught.value.message == "no such publisher: missing"


async def test_echo_needs_a_source(demo_url: str) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(rstreams.PublisherError, match="source"):
        await collect(demo_url, "echo")


async def test_echo_source_names_keep_their_query(demo_url: str) -> None:
    # The source's own query travels URL-encoded inside echo's.
    async def counted(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        for i in range(request.int_param("count", 0)):
            await sink.send(bytes([i]))

    with trio.fail_after(TIMEOUT):
        received = await collect(demo_url, "echo?source=counted%3Fcount%3D3", client_app=rstreams.Router({"counted": counted}))
    assert received == [b"\x00", b"\x01", b"\x02"]


# ---- on the wire, with nothing but msgpack -------------------------------


async def test_range_on_the_wire(demo_url: str) -> None:
    port = int(demo_url.rsplit(":", 1)[1])
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(
                msgpack.packb([0, 0, []]) + msgpack.packb([1, "range?count=3", 1, 10], use_bin_type=True)
            )
            unpacker = msgpack.Unpacker(raw=False)
            messages: list[list[object]] = []
            while not messages or messages[-1][0] not in (6, 7):
                data = await stream.receive_some(65536)
                assert data, f"connection closed after {messages}"
                unpacker.feed(data)
                messages.extend(unpacker)
            assert messages[0] == [0, 0, [1]]  # hello: profile 0, the keepalive extension
            assert messages[1] == [4, 1, 8]
            elements: list[bytes] = []
            for message in messages[2:-1]:
                if message[0] == 5:
                    elements.append(message[2])  # type: ignore[arg-type]
                else:
                    assert message[0] == 8 and message[1] == 1
                    packed = message[3]
                    assert isinstance(packed, bytes) and len(packed) == 8 * message[2]  # type: ignore[operator]
                    elements.extend(packed[i : i + 8] for i in range(0, len(packed), 8))
            assert elements == [i.to_bytes(8, "big") for i in range(3)]
            assert messages[-1] == [6, 1]
            await stream.send_all(msgpack.packb([11, "bye"]))
            rest: list[object] = []
            while data := await stream.receive_some(65536):
                unpacker.feed(data)
                rest.extend(unpacker)
            assert rest and rest[-1][0] == 11  # type: ignore[index]
