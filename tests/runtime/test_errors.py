"""The exception hierarchy (architecture §8)."""

from __future__ import annotations

import pytest

import rstreams


def test_hierarchy() -> None:
    assert issubclass(rstreams.RStreamsError, Exception)
    for error in (
        rstreams.ProtocolError,
        rstreams.SessionClosed,
        rstreams.SubscriptionError,
    ):
        assert issubclass(error, rstreams.RStreamsError)
    assert issubclass(rstreams.LocalProtocolError, rstreams.ProtocolError)
    assert issubclass(rstreams.RemoteProtocolError, rstreams.ProtocolError)
    assert issubclass(rstreams.HandshakeError, rstreams.RemoteProtocolError)
    assert issubclass(rstreams.SessionBroken, rstreams.SessionClosed)
    assert issubclass(rstreams.PublisherError, rstreams.SubscriptionError)
    assert issubclass(rstreams.UnknownPublisher, rstreams.PublisherError)
    assert not issubclass(rstreams.SessionClosed, rstreams.SubscriptionError)
    assert not issubclass(rstreams.SubscriptionError, rstreams.SessionClosed)


def test_session_closed() -> None:
    local = rstreams.SessionClosed("bye", by_peer=False)
    assert (local.reason, local.by_peer) == ("bye", False)
    assert str(local) == "session closed by the local side: bye"
    remote = rstreams.SessionClosed("server leaving", by_peer=True)
    assert str(remote) == "session closed by the peer: server leaving"
    with pytest.raises(TypeError):
        rstreams.SessionClosed("no by_peer")  # type: ignore[call-arg]


def test_session_broken_is_always_the_peer() -> None:
    broken = rstreams.SessionBroken("connection lost")
    assert broken.by_peer is True
    assert broken.reason == "connection lost"
    assert isinstance(broken, rstreams.SessionClosed)


def test_publisher_errors() -> None:
    error = rstreams.PublisherError("disk on fire")
    assert error.message == str(error) == "disk on fire"
    unknown = rstreams.UnknownPublisher("ticker", "no such publisher: ticker")
    assert unknown.name == "ticker"
    assert unknown.message == str(unknown) == "no such publisher: ticker"


def test_protocol_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        rstreams.ProtocolError("x")
    remote = rstreams.RemoteProtocolError("bad bytes")
    assert remote.goodbye_reason == "protocol error: bad bytes"


def test_a_lone_exception_leaves_the_nursery_group_unwrapped() -> None:
    from rstreams._groups import caller_sees_its_own_exception

    with pytest.raises(KeyError):
        with caller_sees_its_own_exception():
            raise BaseExceptionGroup("one", [KeyError("k")])
    with pytest.raises(BaseExceptionGroup) as several:
        with caller_sees_its_own_exception():
            raise BaseExceptionGroup("two", [KeyError("k"), ValueError("v")])
    assert len(several.value.exceptions) == 2
    with pytest.raises(BaseExceptionGroup) as nested:
        with caller_sees_its_own_exception():
            raise BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [KeyError("k")])])
    assert isinstance(nested.value.exceptions[0], BaseExceptionGroup)


def test_first_leaf_reaches_the_error_inside_nested_nursery_groups() -> None:
    from rstreams.support import first_leaf

    lost = ConnectionResetError("reset")
    assert first_leaf(lost) is lost
    nested = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [lost]), ValueError("v")])
    assert first_leaf(nested) is lost
