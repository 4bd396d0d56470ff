"""An rstreams app served over Epoxy as ``rstreams.Publishers``: Subscribe, Publish, and their errors.

The app is served by :class:`EpoxyAppServer` on 127.0.0.1 (port 0) and read
by a Python client, or by a raw peer where the frames themselves matter
(several requests in flight, no answer to an event).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial

import pytest
import trio
import trio.testing
from epoxy_helpers import RawEpoxy, decode_message, message

import examples.demo
import rstreams
from bridges.epoxy import (
    PUBLISHERS_SERVICE,
    Elements,
    EpoxyAppServer,
    EpoxyConnection,
    EpoxyMessageType,
    ErrorCode,
    ErrorResponse,
    Publishers,
    PublishEvent,
    SubscribeRequest,
    bond,
    open_app_session,
    open_epoxy_connection,
)
from rstreams.support import listener_port

REQUEST, RESPONSE, EVENT = EpoxyMessageType.REQUEST, EpoxyMessageType.RESPONSE, EpoxyMessageType.EVENT


def make_app() -> tuple[rstreams.Router, dict[str, trio.Event], rstreams.Topic, rstreams.Topic]:
    """The demo's publishers, a gated publisher, and two topics (one with a codec)."""
    app = rstreams.Router()
    for path in ("range", "fail"):
        route = examples.demo.app.resolve(path)
        assert route is not None
        app.add(path, route)
    gates: dict[str, trio.Event] = {}

    @app.publisher("gate")
    async def gate(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        key = request.params["key"]
        await gates.setdefault(key, trio.Event()).wait()
        await sink.send(key.encode())

    news = rstreams.Topic("news", capacity=2)
    news.mount(app)
    notes = rstreams.Topic("notes", codec="json")
    notes.mount(app)
    return app, gates, news, notes


@dataclass
class Served:
    port: int
    gates: dict[str, trio.Event]
    news: rstreams.Topic
    notes: rstreams.Topic
    app: rstreams.Router

    def gate(self, key: str) -> trio.Event:
        return self.gates.setdefault(key, trio.Event())


@pytest.fixture
async def served(nursery: trio.Nursery) -> AsyncIterator[Served]:
    app, gates, news, notes = make_app()
    server = EpoxyAppServer(app, max_response_bytes=1024)
    [listener] = await nursery.start(partial(server.serve_tcp, "127.0.0.1", 0))
    yield Served(listener_port(listener), gates, news, notes, app)
    await server.aclose()


async def subscribe(connection: EpoxyConnection, name: str) -> list[bytes]:
    result = await connection.call(PUBLISHERS_SERVICE, "Subscribe", SubscribeRequest(publisher=name), Elements)
    return result.elements


async def test_subscribe_answers_with_every_element(served: Served) -> None:
    port = served.port
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            assert await subscribe(connection, "range?count=3") == [n.to_bytes(8, "big") for n in range(3)]
            assert await subscribe(connection, "range?count=0") == []


@pytest.mark.parametrize(
    ("name", "code", "text"),
    [
        ("nope", ErrorCode.METHOD_NOT_FOUND, "no such publisher: nope"),
        ("fail?after=2", ErrorCode.INTERNAL_SERVER_ERROR, "fail: failing after 2 elements as asked"),
        ("range?count=200", ErrorCode.INTERNAL_SERVER_ERROR, "range?count=200: the stream exceeds 1024 bytes"),
        ("range?count=x", ErrorCode.INTERNAL_SERVER_ERROR, "count"),
    ],
    ids=["unknown-publisher", "failure", "size-limit", "bad-query"],
)
async def test_subscribe_errors_are_error_responses(served: Served, name: str, code: int, text: str) -> None:
    port = served.port
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            with pytest.raises(ErrorResponse) as caught:
                await subscribe(connection, name)
            assert caught.value.error.error_code == code
            assert text in caught.value.error.message
            assert caught.value.error.inner_error is None
            # The connection goes on.
            assert await subscribe(connection, "range?count=1") == [bytes(8)]


@pytest.mark.parametrize(
    ("service_name", "method_name", "code"),
    [
        ("rstreams.Nope", "Subscribe", ErrorCode.METHOD_NOT_FOUND),
        (PUBLISHERS_SERVICE, "Unsubscribe", ErrorCode.METHOD_NOT_FOUND),
        (PUBLISHERS_SERVICE, "Publish", ErrorCode.INVALID_INVOCATION),
    ],
)
async def test_unknown_services_and_methods(served: Served, service_name: str, method_name: str, code: int) -> None:
    port = served.port
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            response = await connection.call_raw(service_name, method_name, SubscribeRequest(publisher="range"))
            assert response.is_error and response.decode_error().error_code == code


async def test_a_request_that_does_not_decode_is_an_internal_error(served: Served) -> None:
    port = served.port
    with trio.fail_after(10):
        async with open_epoxy_connection("127.0.0.1", port) as connection:
            response = await connection.call_raw(PUBLISHERS_SERVICE, "Subscribe", b"CB\x01\x00\x10\x02\x00")  # int32 where a string goes
            error = response.decode_error()
            assert error.error_code == ErrorCode.INTERNAL_SERVER_ERROR and "SubscribeRequest" in error.message


async def test_several_requests_in_flight_each_answered_with_its_id(served: Served) -> None:
    port = served.port
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        names = {1: "gate?key=a", 3: "gate?key=b", 5: "range?count=2"}
        await raw.send(*(message(n, REQUEST, SubscribeRequest(publisher=name), PUBLISHERS_SERVICE, "Subscribe") for n, name in names.items()))

        async def next_answer() -> tuple[int, list[bytes]]:
            frame = await raw.receive()
            assert frame is not None
            head, payload, is_error = decode_message(frame)
            assert head.message_type == RESPONSE and not is_error
            return head.conversation_id, bond.unmarshal(Elements, payload).elements

        assert await next_answer() == (5, [bytes(8), (1).to_bytes(8, "big")])
        served.gate("b").set()
        assert await next_answer() == (3, [b"b"])
        served.gate("a").set()
        assert await next_answer() == (1, [b"a"])


async def test_publish_puts_the_value_into_the_topic_as_sent(served: Served) -> None:
    port, notes = served.port, served.notes
    with trio.fail_after(10):
        raw = await RawEpoxy.connect(port)
        await raw.handshake_as_client()
        # A topic with a JSON codec stores the element as sent, not re-encoded.
        await raw.send(
            message(1, EVENT, PublishEvent(topic="notes", value=b'{"a": 1}'), PUBLISHERS_SERVICE, "Publish"),
            message(3, EVENT, PublishEvent(topic="nowhere", value=b"lost"), PUBLISHERS_SERVICE, "Publish"),
            message(5, EVENT, PublishEvent(topic="notes?x=1", value=b"lost"), PUBLISHERS_SERVICE, "Publish"),
            message(7, EVENT, PublishEvent(topic="notes", value=b"[2]"), PUBLISHERS_SERVICE, "Publish"),
        )
        while notes.statistics().published < 2:
            await trio.sleep(0.01)
        await raw.send(message(9, REQUEST, SubscribeRequest(publisher="notes?history=10&until=now"), PUBLISHERS_SERVICE, "Subscribe"))
        frame = await raw.receive()
        assert frame is not None
        head, payload, _ = decode_message(frame)
        assert head.conversation_id == 9  # no answer to any of the events came first
        assert bond.unmarshal(Elements, payload).elements == [b'{"a": 1}', b"[2]"]


async def test_publish_events_read_together_go_into_their_topics_in_order(served: Served) -> None:
    # Runs of Publish events to one topic go in as one batch each
    # (Publishers.publish_events); across topics and runs, in order.
    port, app = served.port, served.app
    sent = [("notes", b"[%d]" % n) if n % 50 else ("nowhere", b"lost") for n in range(1, 301)]
    with trio.fail_after(20):
        async with rstreams.open_local_session(app) as session:
            async with session.subscribe("notes", prefetch=400) as reader:
                raw = await RawEpoxy.connect(port)
                await raw.handshake_as_client()
                await raw.send(
                    *(message(2 * n + 1, EVENT, PublishEvent(topic=topic, value=value), PUBLISHERS_SERVICE, "Publish")
                      for n, (topic, value) in enumerate(sent))
                )  # fmt: skip
                expected = [value for topic, value in sent if topic == "notes"]
                got = [bytes(await reader.__anext__()) for _ in expected]
    assert got == expected


async def test_publish_events_are_paced_by_the_topic(served: Served) -> None:
    port, news, app = served.port, served.news, served.app
    with trio.fail_after(10):
        async with rstreams.open_local_session(app) as session:
            # A blocking subscriber that asks for nothing: the topic (capacity 2) fills.
            async with session.subscribe("news", prefetch=0) as reader:
                async with open_epoxy_connection("127.0.0.1", port) as connection:
                    for n in range(5):
                        await connection.send_event(PUBLISHERS_SERVICE, "Publish", PublishEvent(topic="news", value=bytes([n])))
                    while news.statistics().published < 2:
                        await trio.sleep(0.01)
                    await trio.testing.wait_all_tasks_blocked(0.05)
                    assert news.statistics().published == 2
                    reader.request(5)
                    got = [bytes(await reader.__anext__()) for _ in range(5)]
                    assert got == [bytes([n]) for n in range(5)]


async def test_publishers_without_a_nursery_publish_each_event_on_its_own(caplog: pytest.LogCaptureFixture) -> None:
    app, _, _, notes = make_app()
    with trio.fail_after(10):
        async with open_app_session(app) as session:
            publishers = Publishers(session)
            await publishers.Publish(PublishEvent(topic="notes", value=b"1"))
            assert notes.statistics().published == 1  # in the topic when Publish returns
            with caplog.at_level(logging.WARNING, logger="rstreams.epoxy"):
                await publishers.Publish(PublishEvent(topic="nowhere", value=b"2"))
                await publishers.Publish(PublishEvent(topic="", value=b"3"))
            messages = [record.message for record in caplog.records]
            assert len(messages) == 2
            assert messages[0].startswith("dropped a Publish event for topic 'nowhere': no such publisher: nowhere/publish")
            assert messages[1] == "dropped a Publish event: '' is not a topic name"
            await publishers.aclose()
