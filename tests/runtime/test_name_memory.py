"""What the peer's publisher names hold is charged while their streams last, never longer.

A session charges each of the peer's streams what its name holds beyond
``NAME_MEMORY_ALLOWANCE`` (``Session._names_memory``), and gives it back
when the publication has stopped, however it stops: at once, failing at
once, completing or failing as a task, cancelled by the subscriber while
it runs or after it ended, or with the session. A charge given back twice,
or never, would drift: a server that runs for weeks would refuse every
stream, or let names past the budget. Any sequence of subscribes, requests
and cancels keeps the charge equal to the open publications' names, and
back to nothing once they have all ended.
"""

from __future__ import annotations

import msgpack
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import rstreams
from rstreams._session import _SHORT_NAME, _SHORT_NAME_PARAMS

from ._support import RawPeer

LONG_QUERY = "&".join(f"k{i}=v" for i in range(300))


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def now(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    sink.send_nowait(b"x")


def fail_now(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    raise ValueError("refused at once")


async def task(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    for _ in range(3):
        await sink.send(b"y")


async def fail(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    await sink.send(b"z")
    raise ValueError("failed as a task")


async def forever(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    await trio.sleep_forever()


PUBLISHERS = {"now": now, "fail_now": fail_now, "task": task, "fail": fail, "forever": forever}
APP = rstreams.Router(PUBLISHERS)

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.sampled_from(sorted(PUBLISHERS)), st.booleans(), st.integers(0, 4)),
        st.tuples(st.just("request"), st.integers(1, 8), st.integers(1, 4)),
        st.tuples(st.just("cancel"), st.integers(1, 8)),
    ),
    max_size=40,
)


def charged_to_open_publications(session: rstreams.Session) -> int:
    handles = [*session._publications.values(), *session._stopping]
    return sum(handle.name_memory for handle in handles)


@settings(max_examples=150, deadline=None)
@given(operations=OPERATIONS)
def test_names_are_charged_while_their_streams_last(operations: list[tuple]) -> None:
    async def main() -> None:
        client_stream, server_stream = trio.testing.memory_stream_pair()
        peer = RawPeer(client_stream)
        charged_at_all = False
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def read_everything() -> None:
                    try:
                        while True:
                            await peer.receive()
                    except Exception:
                        pass

                async with rstreams.open_stream_session(server_stream, app=APP) as server:
                    await peer.send_raw(pack([0, 0, []]))  # hello
                    nursery.start_soon(read_everything)
                    next_id = 1
                    for operation in operations:
                        if operation[0] == "subscribe":
                            _, name, long, demand = operation
                            full = f"{name}?{LONG_QUERY}" if long else name
                            await peer.send_raw(pack([1, full, next_id, demand]))
                            next_id += 1
                        elif operation[0] == "request":
                            _, subscriber, n = operation
                            if subscriber < next_id:
                                await peer.send_raw(pack([2, subscriber, n]))
                        else:
                            _, subscriber = operation
                            if subscriber < next_id:
                                await peer.send_raw(pack([3, subscriber]))
                        await trio.testing.wait_all_tasks_blocked()
                        assert server._names_memory == charged_to_open_publications(server)
                        charged_at_all = charged_at_all or server._names_memory > 0
                    # Every stream still open is cancelled: nothing is charged once they stop.
                    await peer.send_raw(b"".join(pack([3, subscriber]) for subscriber in range(1, next_id)))
                    await trio.testing.wait_all_tasks_blocked()
                    assert not server._publications and not server._stopping
                    assert server._names_memory == 0
                    await peer.aclose()  # (the session ends at once, without goodbyes)
                nursery.cancel_scope.cancel()
        assert server._names_memory == 0

    trio.run(main)


def test_the_long_names_of_the_property_are_charged_at_all() -> None:
    # (the property's premise: the long names above are charged at all)
    name = f"forever?{LONG_QUERY}"
    _, params = rstreams.SubscribeRequest.parse_name(name)
    assert rstreams.SubscribeRequest.name_memory(name, params) > rstreams.NAME_MEMORY_ALLOWANCE


@settings(max_examples=300, deadline=None)
@given(
    name=st.lists(st.sampled_from(["&", "=", "a", "k1", "?", "/", "é", "%41", ":"]) | st.text(max_size=4), max_size=64)
    .map("".join)
    .map(lambda name: name[:64])
)
def test_the_short_names_spared_the_reckoning_are_within_the_allowance(name: str) -> None:
    # The session charges nothing for a short plain name without reckoning
    # it (_charged_name_memory's first test): it must be one that the
    # reckoning would charge nothing.
    try:
        _, params = rstreams.SubscribeRequest.parse_name(name)
    except ValueError:
        return
    if len(params) <= _SHORT_NAME_PARAMS and name.isascii() and "%" not in name:
        assert rstreams.SubscribeRequest.name_memory(name, params) <= rstreams.NAME_MEMORY_ALLOWANCE


def test_the_longest_name_spared_the_reckoning_is_within_the_allowance() -> None:
    name = "p" * (_SHORT_NAME - 27) + "?" + "&".join(f"k{i}={'v' * 5}" for i in range(_SHORT_NAME_PARAMS))
    assert len(name) == _SHORT_NAME
    _, params = rstreams.SubscribeRequest.parse_name(name)
    assert len(params) == _SHORT_NAME_PARAMS
    assert rstreams.SubscribeRequest.name_memory(name, params) <= rstreams.NAME_MEMORY_ALLOWANCE
