"""The source's driver-side pieces without Spark: the Feed and the row codecs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import msgpack
import pytest

import rstreams

from .conftest import ServerThread, require_spark

require_spark()

from rstreams.spark import BadElement, Feed, SinkOptions, SourceOptions  # noqa: E402
from rstreams.spark._rows import encode_rows, row_decoder  # noqa: E402


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    app = rstreams.Router()

    @app.publisher("endless")
    async def endless(sink: rstreams.Sink) -> None:
        i = 0
        while True:
            await sink.send(i.to_bytes(4, "big"))
            i += 1

    @app.publisher("gappy")
    async def gappy(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        start = request.int_param("from", 0)
        for seq in (start, start + 1, start + 3):
            await sink.send(rstreams.encode_sequenced(seq, b"x"))

    thread = ServerThread(app)
    yield thread
    thread.close()


def test_demand_is_bounded_by_capacity_and_topped_up_on_release(server: ServerThread) -> None:
    feed = Feed(server.url, "endless", start=100, capacity=50, sequenced=False)
    try:
        assert feed.wait_until(lambda count, ended: count >= 150, 10)
        time.sleep(0.2)  # nothing more may come: all demand is spent
        stats = feed.statistics()
        assert (stats.base, stats.next_offset, stats.outstanding) == (100, 150, 0)
        assert feed.slice(148, 152) == [(48).to_bytes(4, "big"), (49).to_bytes(4, "big")]
        feed.release(120)  # Spark committed 20: 20 more may come
        assert feed.wait_until(lambda count, ended: count >= 170, 10)
        time.sleep(0.2)
        assert feed.statistics().next_offset == 170
    finally:
        feed.close()
        feed.join(5)
    assert feed.ended and feed.error == "closed"


def test_a_sequence_gap_fails_the_feed_instead_of_misnumbering(server: ServerThread) -> None:
    feed = Feed(server.url, "gappy?from=5", start=5, capacity=10, sequenced=True)
    assert feed.wait_until(lambda count, ended: ended, 10)
    assert feed.next_offset == 7
    assert feed.error == "sequence gap: expected element 7, the publisher sent 8"


def test_an_unreachable_server_is_an_error_not_a_hang() -> None:
    feed = Feed("tcp://127.0.0.1:1", "x", start=0, capacity=10, sequenced=False)
    assert feed.wait_until(lambda count, ended: ended, 10)
    assert feed.error is not None and "Error" in feed.error


def test_row_decoding_by_name_by_position_and_bad_elements() -> None:
    fields = [("n", "long"), ("ts", "timestamp"), ("value", "double"), ("offset", "long")]
    decode = row_decoder("msgpack", fields, "fail")
    by_name = decode(msgpack.packb({"n": 1, "ts": 0, "value": 2}), 40)
    assert by_name is not None and by_name[0] == 1 and by_name[1].year == 1970 and by_name[2] == 2.0 and by_name[3] == 40
    assert decode(msgpack.packb([2, None, 1.5]), 41) == (2, None, 1.5, 41)
    with pytest.raises(BadElement, match="element at offset 9 is not a valid msgpack row"):
        decode(b"\xc1", 9)
    assert row_decoder("json", fields, "skip")(b"not json", 3) is None
    assert row_decoder("raw", [], "fail")(b"ab", 7) == (b"ab", 7)


def test_rows_are_encoded_with_deduplication_tags() -> None:
    rows = list(encode_rows([{"a": 1}, {"a": 2}], format="msgpack", tag=(4, 1)))
    assert [msgpack.unpackb(row) for row in rows] == [
        {"a": 1, "_batch": 4, "_partition": 1, "_row": 0},
        {"a": 2, "_batch": 4, "_partition": 1, "_row": 1},
    ]


def test_options_are_checked_with_clear_messages() -> None:
    with pytest.raises(ValueError, match="needs"):
        SourceOptions.parse({"url": "tcp://127.0.0.1:1"})
    with pytest.raises(ValueError, match="at least 2 x maxRowsPerBatch"):
        SourceOptions.parse({"url": "u", "publisher": "p", "maxRowsPerBatch": "10", "bufferRows": "15"})
    options = SourceOptions.parse({"URL": "u", "Publisher": "p", "MAXROWSPERBATCH": "10", "replay": "true"})
    assert (options.max_rows_per_batch, options.buffer_rows, options.replay) == (10, 20, True)
    with pytest.raises(ValueError, match="format"):
        SinkOptions.parse({"url": "u", "topic": "t", "format": "xml"})
