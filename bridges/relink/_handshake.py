"""The Relink handshake (``specs/relink.md`` section 1), as values and bytes.

The exchange is half-duplex::

    connector  version:u8  padding:7
    listener   version:u8  padding:7
    connector  name-length:u8  name  connector-id-size:u8  listener-id-size:u8
               flags:u8  padding to 8  old-epoch:i64  old-link-id:u64
    listener   epoch:i64  link-id:u64

Alignment is counted from the start of the stream, the 8-byte version block
included, so the padding before the epoch is ``(-(1 + len(name) + 3)) % 8``
(Go counts from after the version block: the same thing, since 8 divides 8).
Both transmissions are multiples of 8 bytes, so packets start 8-aligned.

Flags: bit 0 the connector's channel uses transactions, bit 1 the
listener's, bit 2 the connector requires its old link id. The other bits
are unused: sent as zero, ignored.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._errors import HandshakeRejected, LocalProtocolError, RemoteProtocolError
from ._packets import MAX_CHANNEL_ID_SIZE, PROTOCOL_VERSION

__all__ = [
    "MAX_LINK_ID",
    "MAX_ENDPOINT_NAME_SIZE",
    "check_endpoint_name",
    "VERSION_SIZE",
    "REPLY_SIZE",
    "LinkConfig",
    "HandshakeRequest",
    "HandshakeReply",
    "encode_version",
    "decode_version",
    "encode_request",
    "decode_request",
    "request_size",
    "encode_reply",
    "decode_reply",
    "check_request",
    "ReplyOutcome",
    "judge_reply",
]

#: Link ids are in [1, 2**63); 0 means "none".
MAX_LINK_ID = 2**63 - 1
MAX_ENDPOINT_NAME_SIZE = 255


def check_endpoint_name(name: object, error: Callable[[str], Exception], what: str = "endpoint_name") -> None:
    """The rule for an endpoint name, asked for (a connector's request) or
    offered (a listener's endpoints): a ``str`` of at most
    :data:`MAX_ENDPOINT_NAME_SIZE` bytes of UTF-8 (a name with lone
    surrogates has none, and no request could ever match it). Raises
    ``error(message)`` otherwise, the message naming it ``what``."""
    if not isinstance(name, str):
        raise error(f"{what} must be a str")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise error(f"{what} is not encodable as UTF-8") from None
    if size > MAX_ENDPOINT_NAME_SIZE:
        raise error(f"{what} is {size} bytes of UTF-8; at most {MAX_ENDPOINT_NAME_SIZE} fit")
VERSION_SIZE = 8
REPLY_SIZE = 16

_FLAG_CONNECTOR_TRANSACTIONS = 0x01
_FLAG_LISTENER_TRANSACTIONS = 0x02
_FLAG_REQUIRE_OLD_LINK = 0x04
_IDENT = struct.Struct("<qQ")  # epoch (signed), link id
_MIN_EPOCH = -(2**63)
_MAX_EPOCH = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """What both peers must agree on: channel id sizes and transactions, per direction.

    "Connector's channel" means the channels the connector sends messages on,
    whichever side holds this config.

    Attributes:
        connector_id_size: bytes per id of the connector's channels, 0 to 8
            (0: one unnamed channel, id ``0``).
        listener_id_size: bytes per id of the listener's channels, 0 to 8.
        connector_transactions: the connector's channels use transactions.
        listener_transactions: the listener's channels use transactions.
    """

    connector_id_size: int = 0
    listener_id_size: int = 0
    connector_transactions: bool = False
    listener_transactions: bool = False

    def __post_init__(self) -> None:
        for name in ("connector_id_size", "listener_id_size"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= MAX_CHANNEL_ID_SIZE:
                raise LocalProtocolError(f"{name} must be an int in [0, {MAX_CHANNEL_ID_SIZE}], got {value!r}")
        for name in ("connector_transactions", "listener_transactions"):
            if type(getattr(self, name)) is not bool:
                raise LocalProtocolError(f"{name} must be a bool")

    @property
    def transaction_flags(self) -> int:
        return (_FLAG_CONNECTOR_TRANSACTIONS if self.connector_transactions else 0) | (
            _FLAG_LISTENER_TRANSACTIONS if self.listener_transactions else 0
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeRequest:
    """The connector's second transmission: endpoint, config, and the link it had.

    Attributes:
        endpoint_name: the listener endpoint to talk to (UTF-8, at most 255 bytes).
        config: channel id sizes and transaction flags.
        require_old_link: fail rather than start a new link if the listener
            does not know ``old_link_id``.
        old_epoch: the listener epoch of the old link, or 0.
        old_link_id: the old link id, or 0.
    """

    endpoint_name: str
    config: LinkConfig = LinkConfig()
    require_old_link: bool = False
    old_epoch: int = 0
    old_link_id: int = 0

    def __post_init__(self) -> None:
        check_endpoint_name(self.endpoint_name, LocalProtocolError)
        if not isinstance(self.config, LinkConfig):
            raise LocalProtocolError("config must be a LinkConfig")
        if type(self.require_old_link) is not bool:
            raise LocalProtocolError("require_old_link must be a bool")
        _check_ident(self.old_epoch, self.old_link_id, LocalProtocolError)

    @property
    def flags(self) -> int:
        return self.config.transaction_flags | (_FLAG_REQUIRE_OLD_LINK if self.require_old_link else 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeReply:
    """The listener's second transmission: its epoch and the link id (0: refused)."""

    epoch: int
    link_id: int

    def __post_init__(self) -> None:
        _check_ident(self.epoch, self.link_id, LocalProtocolError)


def _check_ident(epoch: object, link_id: object, error: type[LocalProtocolError] | type[RemoteProtocolError]) -> None:
    if type(epoch) is not int or not _MIN_EPOCH <= epoch <= _MAX_EPOCH:
        raise error(f"epoch must be a signed 64-bit int, got {epoch!r}")
    if type(link_id) is not int or not 0 <= link_id <= MAX_LINK_ID:
        raise error(f"link id must be 0 or in [1, 2**63), got {link_id!r}")


def encode_version(version: int = PROTOCOL_VERSION) -> bytes:
    """The 8-byte version block each peer sends first."""
    return bytes((version,)) + bytes(7)


def decode_version(block: bytes | bytearray) -> int:
    """The version byte of an 8-byte version block (the padding is ignored)."""
    if len(block) != VERSION_SIZE:
        raise ValueError("a version block is 8 bytes")
    return block[0]


def _name_pad(name_size: int) -> int:
    # Stream offset 8 (after the version block) + length byte + name + 3 bytes.
    return -(VERSION_SIZE + 1 + name_size + 3) % 8


def request_size(name_size: int) -> int:
    """Bytes of the connector's second transmission for a name of ``name_size`` bytes."""
    return 1 + name_size + 3 + _name_pad(name_size) + 16


def encode_request(request: HandshakeRequest) -> bytes:
    """The connector's second transmission (it follows the version blocks)."""
    name = request.endpoint_name.encode("utf-8")
    config = request.config
    return b"".join(
        (
            bytes((len(name),)),
            name,
            bytes((config.connector_id_size, config.listener_id_size, request.flags)),
            bytes(_name_pad(len(name))),
            _IDENT.pack(request.old_epoch, request.old_link_id),
        )
    )


def decode_request(data: bytes | bytearray) -> tuple[HandshakeRequest, int] | None:
    """Parse the connector's second transmission from the start of ``data``.

    Returns:
        The request and how many bytes it took, or None if ``data`` is too
        short yet (at most 1 + 255 + 3 + 7 + 16 bytes are ever needed).

    Raises:
        RemoteProtocolError: the name is not UTF-8, an id size or the link
            id is out of range, or a link id comes without an epoch.
    """
    if not data:
        return None
    name_size = data[0]
    size = request_size(name_size)
    if len(data) < size:
        return None
    try:
        name = bytes(data[1 : 1 + name_size]).decode("utf-8")
    except UnicodeDecodeError:
        raise RemoteProtocolError("endpoint name is not valid UTF-8") from None
    connector_id_size, listener_id_size, flags = data[1 + name_size : 4 + name_size]
    for what, value in (("connector's", connector_id_size), ("listener's", listener_id_size)):
        if value > MAX_CHANNEL_ID_SIZE:
            raise RemoteProtocolError(f"{what} channel id size {value} is over {MAX_CHANNEL_ID_SIZE}")
    epoch, link_id = _IDENT.unpack_from(data, size - 16)
    _check_ident(epoch, link_id, RemoteProtocolError)
    if link_id and not epoch:
        raise RemoteProtocolError(f"old link id {link_id} without an epoch")
    config = LinkConfig(
        connector_id_size=connector_id_size,
        listener_id_size=listener_id_size,
        connector_transactions=bool(flags & _FLAG_CONNECTOR_TRANSACTIONS),
        listener_transactions=bool(flags & _FLAG_LISTENER_TRANSACTIONS),
    )
    request = HandshakeRequest(
        endpoint_name=name,
        config=config,
        require_old_link=bool(flags & _FLAG_REQUIRE_OLD_LINK),
        old_epoch=epoch,
        old_link_id=link_id,
    )
    return request, size


def encode_reply(reply: HandshakeReply) -> bytes:
    """The listener's second transmission: epoch and link id."""
    return _IDENT.pack(reply.epoch, reply.link_id)


def decode_reply(data: bytes | bytearray) -> HandshakeReply:
    """Parse the listener's 16-byte reply.

    Raises:
        RemoteProtocolError: the link id is 2**63 or more.
    """
    if len(data) != REPLY_SIZE:
        raise ValueError("a handshake reply is 16 bytes")
    epoch, link_id = _IDENT.unpack(bytes(data))
    _check_ident(epoch, link_id, RemoteProtocolError)
    return HandshakeReply(epoch=epoch, link_id=link_id)


# ---- the decisions ------------------------------------------------------------


def check_request(endpoints: Mapping[str, LinkConfig], request: HandshakeRequest) -> None:
    """The listener's check: a known endpoint, and exactly its config.

    Raises:
        HandshakeRejected: unknown endpoint name, other channel id sizes or
            other transaction flags (the spec: terminate the connection).
    """
    config = endpoints.get(request.endpoint_name)
    if config is None:
        raise HandshakeRejected(f"unknown endpoint name {request.endpoint_name!r}")
    asked = request.config
    if (asked.connector_id_size, asked.listener_id_size) != (config.connector_id_size, config.listener_id_size):
        raise HandshakeRejected(
            f"channel id sizes {asked.connector_id_size}/{asked.listener_id_size} differ"
            f" from the endpoint's {config.connector_id_size}/{config.listener_id_size}"
        )
    if asked != config:
        raise HandshakeRejected("transaction flags differ from the endpoint's")


class ReplyOutcome(enum.Enum):
    """What the listener's reply means to the connector."""

    RESUMED = "resumed"  # the old epoch and link id came back
    NEW = "new"  # a new link (any old one's state is lost)
    REFUSED = "refused"  # zero link id after requiring the old one: the link is lost


def judge_reply(request: HandshakeRequest, reply: HandshakeReply) -> ReplyOutcome:
    """The connector's reading of the listener's epoch and link id.

    Raises:
        RemoteProtocolError: a non-positive epoch, a zero link id not
            allowed by the request, or a new link when the old one was
            required (the listener should have answered zero), as Go checks.
    """
    if reply.epoch <= 0:
        raise RemoteProtocolError(f"bad epoch {reply.epoch} from the listener")
    old = (request.old_epoch, request.old_link_id)
    if request.require_old_link:
        if reply.link_id == 0:
            return ReplyOutcome.REFUSED
        if (reply.epoch, reply.link_id) != old:
            raise RemoteProtocolError("the listener started a new link though the old one was required")
    if reply.link_id == 0:
        raise RemoteProtocolError("no link id from the listener")
    if request.old_link_id and (reply.epoch, reply.link_id) == old:
        return ReplyOutcome.RESUMED
    return ReplyOutcome.NEW
