"""Values of the trio adapter: its settings, what a server learns of a client, a statistics snapshot.

The settings class is ``EpoxySettings``, not ``EpoxyConfig``: that name is
the spec's, for the struct of the handshake.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Union

from ..kit import LinkSettings
from ._events import MAX_CONVERSATION_ID, is_conversation_id
from ._frames import DEFAULT_LIMITS, EpoxyLimits
from ._structs import EpoxyConfig, Error

__all__ = [
    "EpoxySettings",
    "DEFAULT_SETTINGS",
    "DEFAULT_PORT",
    "DEFAULT_TLS_PORT",
    "ConnectionInfo",
    "AcceptFunction",
    "Verdict",
    "EpoxyStatistics",
]

#: The spec's recommended port, ASCII "bd".
DEFAULT_PORT = 25188
#: The spec's recommended port for TLS, ASCII "bD".
DEFAULT_TLS_PORT = 25156


@dataclass(frozen=True, slots=True, kw_only=True)
class EpoxySettings(LinkSettings):
    """Settings of one Epoxy connection: the kit's :class:`~bridges.kit.LinkSettings`
    (timeouts and buffer bounds) plus Epoxy's own.

    Epoxy has no ping, so ``keepalive_interval`` must stay None (the
    default here): a dead peer is found by TCP, or by a call's own timeout.

    Attributes:
        limits: what the peer may send (frame and framelet sizes, requests
            pending).
        max_conversation_id: the largest conversation id we use before
            sending ``CONVERSATION_IDS_EXHAUSTED`` (default 2**64 - 1; lower
            it to test exhaustion).
        handshake_timeout: seconds to wait for the peer's config (a server:
            and for its application to accept); then ``TIMEOUT`` and close.
            Default 10.
        max_read_ahead: bytes of payloads read but not yet taken by the
            application; beyond it the reader stops. Default 1 MiB (at least
            one frame is always read).
        half_close_timeout: seconds we go on answering a peer that closed
            its side with requests pending (the spec's "reasonable amount of
            time"); then we close too, and what was not answered is dropped.
            Default 10.
        max_write_buffer, receive_size, close_timeout: as in LinkSettings.
    """

    keepalive_interval: float | None = None
    limits: EpoxyLimits = DEFAULT_LIMITS
    max_conversation_id: int = MAX_CONVERSATION_ID
    half_close_timeout: float = 10.0

    def __post_init__(self) -> None:
        LinkSettings.__post_init__(self)
        if self.keepalive_interval is not None:
            raise ValueError("Epoxy has no ping: keepalive_interval must be None")
        if not 0 < self.half_close_timeout < math.inf:  # also refuses nan
            raise ValueError(f"half_close_timeout must be positive and finite, got {self.half_close_timeout!r}")
        if not is_conversation_id(self.max_conversation_id):
            # (Refused here, when it is given, rather than by every connection made with it.)
            raise ValueError(f"max_conversation_id must be a uint64, got {self.max_conversation_id!r}")


DEFAULT_SETTINGS = EpoxySettings()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionInfo:
    """What a server knows of a client when it decides to accept it.

    Attributes:
        peer_address: the client's socket address (``(host, port)`` for
            IPv4, 4 items for IPv6), or None over a stream without a socket.
        local_address: ours, likewise.
        tls: whether the connection is TLS.
        tls_version: the TLS version (``"TLSv1.3"``), or None.
        cipher: the cipher suite's name, or None.
        peer_certificate: the client's certificate as ``ssl`` parses it
            (``getpeercert()``: ``subject``, ``issuer``, ``notAfter``,
            ``subjectAltName``...), or None. ``ssl`` fills it only for a
            certificate it verified, so the server's context must ask for
            client certificates (``verify_mode``) and trust their issuer.
        peer_certificate_der: the same certificate in DER, or None.
        config: the client's ``EpoxyConfig``.
    """

    peer_address: tuple[Any, ...] | None = None
    local_address: tuple[Any, ...] | None = None
    tls: bool = False
    tls_version: str | None = None
    cipher: str | None = None
    peer_certificate: dict[str, Any] | None = None
    peer_certificate_der: bytes | None = None
    config: EpoxyConfig | None = None

    @property
    def peer(self) -> str:
        """The peer as ``host:port`` (``[host]:port`` for IPv6), or ``"?"``."""
        if not self.peer_address:
            return "?"
        host, port = self.peer_address[0], self.peer_address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


#: What an accept function answers: True or None to accept; False to reject
#: with ``CONNECTION_REJECTED``; a ``bond.comm.Error`` to reject with it as
#: the ProtocolError's ``details`` (what Bond's C# listeners do).
Verdict = Union[bool, Error, None]
#: ``accept(info)``, plain or async: the application's say on a connection.
AcceptFunction = Callable[[ConnectionInfo], Union[Verdict, Awaitable[Verdict]]]


@dataclass(frozen=True, slots=True)
class EpoxyStatistics:
    """A snapshot of a connection.

    Attributes:
        bytes_received / bytes_sent: transport bytes so far.
        buffered_bytes: payloads read and not yet taken.
        pending_calls: our requests with no response yet.
        requests_to_answer: the peer's requests we have not answered.
        dropped_responses: responses to no pending request of ours.
        reading: whether the reader is allowed to read now.
    """

    bytes_received: int
    bytes_sent: int
    buffered_bytes: int
    pending_calls: int
    requests_to_answer: int
    dropped_responses: int
    reading: bool
