"""Text with no UTF-8 form, where the application hands text to the wire.

``os.fsdecode`` (and so ``sys.argv``, ``os.listdir``, an ``OSError``'s file
name) turns bytes that are not UTF-8 into lone surrogates, which msgpack
refuses to encode. Before this was handled, a publisher whose exception
text held one (a file name it could not open, say) killed its whole
connection when the session wrote the onError: every other stream on it
ended as "connection reset", and over a bridge the in-process app session
died the same way. Now:

* texts for people (onError's message, goodbye's reason) go out with such
  characters as backslash escapes, and the connection carries on;
* a publisher name must be UTF-8 text (routing matches it exactly): the
  subscription is refused at once with ``LocalProtocolError``, whichever
  peer it is for, instead of failing later in a task with an untyped
  ``UnicodeEncodeError``.
"""

from __future__ import annotations

import pytest
import trio

import rstreams
from rstreams.protocol import Connection, Goodbye, LocalProtocolError, OnError, Subscribe, check_publisher_name, encode
from rstreams.protocol._codec import encode_subscribe

from ._support import standard_app

pytestmark = pytest.mark.timeout(30)

UNDECODABLE = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.fsdecode gives it


async def cannot_open(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
    raise FileNotFoundError(f"no such file: {UNDECODABLE}")


@pytest.mark.parametrize("transport", ["memory", "tcp", "ws"])
async def test_a_publisher_error_text_without_utf8_reaches_the_subscriber_and_the_connection_lives(connect) -> None:  # type: ignore[no-untyped-def]
    app = standard_app(cannot_open=cannot_open)
    with trio.fail_after(10):
        async with connect(server_app=app) as (client, _server):
            async with client.subscribe("range?count=1000", prefetch=1) as other:
                first = await other.__anext__()
                with pytest.raises(rstreams.PublisherError) as failed:
                    await client.fetch("cannot_open", 1)
                assert failed.value.message == "no such file: caf\\udce9.txt"
                # The stream open on the same connection goes on to its end.
                rest = [element async for element in other]
            assert len(rest) == 999 and first != rest[0]
            assert await client.fetch("range?count=2", 2)


async def test_a_goodbye_reason_without_utf8_is_sent_escaped(connect) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(10):
        async with connect(server_app=standard_app()) as (client, server):
            with pytest.raises(rstreams.SessionClosed) as closed:
                async with client.subscribe("range?count=1000000000", prefetch=1) as stream:
                    await stream.__anext__()
                    await server.aclose(f"moving {UNDECODABLE}")
                    async for _ in stream:
                        pass
            assert closed.value.reason == "moving caf\\udce9.txt"


@pytest.mark.parametrize("transport", ["memory"])
async def test_a_name_without_utf8_is_refused_at_once(connect) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(10):
        async with connect(server_app=standard_app()) as (client, _server):
            with pytest.raises(LocalProtocolError, match="UTF-8"):
                client.subscribe(UNDECODABLE)
            with pytest.raises(LocalProtocolError, match="UTF-8"):
                await client.fetch(f"range?count={UNDECODABLE}", 1)
            assert await client.fetch("range?count=1", 1)  # the session is as it was


def test_the_protocol_refuses_names_and_escapes_texts() -> None:
    check_publisher_name("range?count=1")
    check_publisher_name("ü" * 10)
    for refused in (UNDECODABLE, b"range", None):
        with pytest.raises(LocalProtocolError):
            check_publisher_name(refused)
        with pytest.raises(LocalProtocolError):
            encode_subscribe(refused, 1, 1)  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError):
            Subscribe(publisher=refused, subscriber=1)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        OnError(subscriber=1, error=UNDECODABLE)
    with pytest.raises(LocalProtocolError):
        Goodbye(reason=UNDECODABLE)
    connection = Connection()
    connection.data_to_send()
    with pytest.raises(LocalProtocolError):
        connection.subscribe(UNDECODABLE, 1)
    connection.send_goodbye(f"bye {UNDECODABLE}")
    assert connection.data_to_send() == encode(Goodbye(reason="bye caf\\udce9.txt"))


# (Every bridge's peer, over its own wire: tests/bridges/test_any_url.py.)


def test_a_route_or_topic_no_name_could_reach_is_refused_when_added() -> None:
    # (It was served, and no subscriber could ever name it.)
    with pytest.raises(ValueError, match="UTF-8"):
        rstreams.Router().add(UNDECODABLE, cannot_open)
    with pytest.raises(ValueError, match="UTF-8"):
        rstreams.Topic(UNDECODABLE)
