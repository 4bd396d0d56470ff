"""SessionConfig: validation, and unusual sizes that must still work."""

from __future__ import annotations

import dataclasses
import math

import pytest
import trio

import rstreams

from ._support import blob, collect, fetch_range, standard_app


@pytest.mark.parametrize(
    "field", ["handshake_timeout", "drain_timeout", "goodbye_timeout", "busy_poll"]
)
def test_timeouts_must_not_be_negative(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        rstreams.SessionConfig(**{field: -1})
    rstreams.SessionConfig(**{field: 0})
    # nan failed inside trio mid-session (the handshake's scope, the close's
    # sleep); infinity made a wait the protocol bounds unbounded.
    for value in (math.nan, math.inf):
        with pytest.raises(ValueError, match=field):
            rstreams.SessionConfig(**{field: value})


@pytest.mark.parametrize("field", ["read_size", "write_size"])
def test_a_read_or_a_write_fits_in_the_connection_budget(field: str) -> None:
    # (A read_size of 10**30 died in os.read with OverflowError.)
    budget = rstreams.SessionConfig().max_connection_memory
    rstreams.SessionConfig(**{field: budget})
    with pytest.raises(ValueError, match=field):
        rstreams.SessionConfig(**{field: budget + 1})
    with pytest.raises(ValueError, match=field):
        rstreams.SessionConfig(**{field: 10**30})


@pytest.mark.parametrize("field", ["authenticate", "authorize"])
def test_hooks_must_be_callable(field: str) -> None:
    # (A non-callable authenticate refused every peer as "authentication failed".)
    hooks = {"authenticate": rstreams.static_token("t")} if field == "authorize" else {}
    with pytest.raises(TypeError, match=field):
        rstreams.SessionConfig(**{**hooks, field: "not a function"})


@pytest.mark.parametrize("field", ["read_size", "write_size", "max_queued_bytes"])
def test_sizes_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        rstreams.SessionConfig(**{field: 0})


def test_config_is_frozen_and_keyword_only() -> None:
    config = rstreams.SessionConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.read_size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        rstreams.SessionConfig(rstreams.ProtocolLimits())  # type: ignore[misc]


async def test_tiny_reads_and_writes(connect) -> None:
    # Messages cut at every possible place by the transport still decode.
    config = rstreams.SessionConfig(
        read_size=7, write_size=5, limits=rstreams.ProtocolLimits(split_threshold=100)
    )
    with trio.fail_after(20):
        async with connect(standard_app(), config=config) as (client, _):
            await fetch_range(client, 200)
            async with client.subscribe("blob?count=3&size=1000", prefetch=2) as blobs:
                assert await collect(blobs) == [blob(i, 1000) for i in range(3)]


async def test_a_tiny_queue_bound_still_delivers_everything(connect) -> None:
    # max_queued_bytes below one element: the publisher waits for each write.
    config = rstreams.SessionConfig(max_queued_bytes=1)
    with trio.fail_after(20):
        async with connect(standard_app(), config=config) as (client, _):
            async with client.subscribe("blob?count=20&size=3000", prefetch=20) as blobs:
                assert await collect(blobs) == [blob(i, 3000) for i in range(20)]
            await fetch_range(client, 300)


def test_a_token_no_hello_can_carry_is_refused_with_the_config() -> None:
    # (It was refused when a session opened, by the hello.)
    for token in (5, "x" * 8193, b"caf\xe9".decode("utf-8", "surrogateescape")):
        with pytest.raises(ValueError, match="token"):
            rstreams.SessionConfig(token=token)  # type: ignore[arg-type]
    assert rstreams.SessionConfig(token="x" * 8192).token == "x" * 8192


def test_the_app_s_objects_refuse_what_would_fail_later() -> None:
    # Found by building each public constructor with odd values: each was
    # accepted and failed (or misbehaved) only once in use.
    async def publisher(sink: rstreams.Sink) -> None:  # pragma: no cover - never run
        pass

    for size in (-1, 1.5):
        with pytest.raises(ValueError, match="element_size"):
            rstreams.Route(publisher, element_size=size)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="element_size"):
            rstreams.Router().add("p", publisher, element_size=size)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key"):
        rstreams.Topic("t", key=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_connections"):
        rstreams.Server(rstreams.Router(), max_connections=1.5)  # type: ignore[arg-type]
