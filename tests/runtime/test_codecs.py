"""Element codecs: raw bytes by default, msgpack and JSON per route and per subscription."""

from __future__ import annotations

import json

import msgpack
import pytest
import trio

import rstreams
import rstreams.testing

from ._support import collect

VALUES = [{"n": 1, "tags": ["a", "é"]}, [1, 2.5, None, True], "text", 42]


async def values_publisher(sink: rstreams.Sink) -> None:
    for value in VALUES:
        await sink.send(value)


async def values_many_publisher(sink: rstreams.Sink) -> None:
    await sink.send_many(VALUES)


class Upper:
    """A custom codec: str values, sent upper-case, received lower-case."""

    name = "upper"

    def encode(self, value: str) -> bytes:
        return value.upper().encode()

    def decode(self, data: bytes) -> str:
        return data.decode().lower()


@pytest.mark.parametrize("codec", ["msgpack", "json", rstreams.MsgpackCodec(), rstreams.JsonCodec()], ids=str)
async def test_route_and_subscription_codec(connect, codec: object) -> None:
    app = rstreams.Router()
    app.add("values", values_publisher, codec=codec)  # type: ignore[arg-type]
    app.add("many", values_many_publisher, codec=codec)  # type: ignore[arg-type]
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("values", codec=codec) as stream:  # type: ignore[arg-type]
                assert await collect(stream) == VALUES
            async with client.subscribe("many", codec=codec, prefetch=2) as stream:  # type: ignore[arg-type]
                assert [value async for batch in stream.batches() for value in batch] == VALUES


async def test_raw_subscription_sees_the_encoded_bytes() -> None:
    app = rstreams.Router()
    app.add("msgpack", values_publisher, codec="msgpack")
    app.add("json", values_publisher, codec="json")
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("msgpack") as stream:
                raw = await collect(stream)
            assert raw == [msgpack.packb(v, use_bin_type=True) for v in VALUES]
            async with client.subscribe("json", codec="raw") as stream:
                raw = await collect(stream)
            assert [json.loads(r) for r in raw] == VALUES  # type: ignore[arg-type]
            assert raw[0] == '{"n":1,"tags":["a","é"]}'.encode()  # compact, UTF-8


async def test_codec_per_subscription_on_a_raw_route() -> None:
    async def texts(sink: rstreams.Sink) -> None:
        await sink.send(b'{"a": 1}')
        await sink.send(msgpack.packb([1, b"bin"], use_bin_type=True))

    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=rstreams.Router({"texts": texts})) as (client, _):
            async with client.subscribe("texts", prefetch=0) as stream:
                stream.request(1)
                assert json.loads(await stream.__anext__()) == {"a": 1}
            async with client.subscribe("texts", codec="json", prefetch=1) as stream:
                assert await stream.__anext__() == {"a": 1}
                with pytest.raises(ValueError):  # the second element is not JSON
                    await stream.__anext__()


async def test_msgpack_keeps_bytes_and_str_apart() -> None:
    async def mixed(sink: rstreams.Sink) -> None:
        await sink.send([b"\x00\xff", "str"])

    app = rstreams.Router()
    app.add("mixed", mixed, codec="msgpack")
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("mixed", codec="msgpack") as stream:
                assert await collect(stream) == [[b"\x00\xff", "str"]]


async def test_custom_codec_object(connect) -> None:
    async def words(sink: rstreams.Sink) -> None:
        await sink.send_many(["alpha", "Beta"])

    app = rstreams.Router()
    app.add("words", words, codec=Upper())
    with trio.fail_after(10):
        async with connect(app) as (client, _):
            async with client.subscribe("words") as stream:
                assert await collect(stream) == [b"ALPHA", b"BETA"]
            async with client.subscribe("words", codec=Upper()) as stream:
                assert await collect(stream) == ["alpha", "beta"]


async def test_unencodable_value_fails_the_publisher() -> None:
    async def bad(sink: rstreams.Sink) -> None:
        await sink.send(object())

    async def text_on_raw(sink: rstreams.Sink) -> None:
        await sink.send("not bytes")

    app = rstreams.Router({"text": text_on_raw})
    app.add("bad", bad, codec="json")
    with trio.fail_after(10):
        async with rstreams.testing.session_pair(server_app=app) as (client, _):
            async with client.subscribe("bad") as stream:
                with pytest.raises(rstreams.PublisherError, match="not JSON serializable"):
                    await stream.__anext__()
            async with client.subscribe("text") as stream:
                with pytest.raises(rstreams.PublisherError, match="str"):
                    await stream.__anext__()


async def test_unknown_codec_names_are_refused_early() -> None:
    with trio.fail_after(10):
        async with rstreams.testing.session_pair() as (client, _):
            with pytest.raises(ValueError, match="unknown codec"):
                client.subscribe("x", codec="yaml")
            with pytest.raises(TypeError):
                client.subscribe("x", codec=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown codec"):
        rstreams.Router().add("x", values_publisher, codec="pickle")


def test_codec_classes() -> None:
    raw = rstreams.RawCodec()
    assert raw.name == "raw"
    assert raw.encode(b"x") == b"x"
    assert raw.encode(bytearray(b"ab")) == b"ab"
    assert raw.encode(memoryview(b"cd")) == b"cd"
    assert raw.decode(b"y") == b"y"
    with pytest.raises(TypeError, match="bytes"):
        raw.encode("text")

    packer = rstreams.MsgpackCodec()
    assert packer.name == "msgpack"
    for value in VALUES + [b"bytes", {"k": b"v"}]:
        assert packer.decode(packer.encode(value)) == value

    text = rstreams.JsonCodec()
    assert text.name == "json"
    assert text.encode({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    for value in VALUES:
        assert text.decode(text.encode(value)) == value

    for codec in (raw, packer, text, Upper()):
        assert isinstance(codec, rstreams.Codec)
