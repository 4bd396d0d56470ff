"""The handshake negotiation, as pure functions of the three messages.

1. The client sends what it requires and what it suggests.
2. The server checks that it implements every extension the client
   requires (else ERROR and disconnect), and answers with what it requires
   and what it suggests.
3. The client checks that it implements everything the server requires
   (else ERROR and disconnect), and sends the final list: the required
   extensions of both (the client's first, then the server's not already
   there), then the optional ones it takes from the server's suggestions,
   in the server's order. The server checks that list.

The index an EXTENSION frame names is the one-based position in the final
message's Required list followed by its Optional list.

Our choices where the spec is silent (``docs/bridges/micromsg2.md``):

* Version: the lower of both is used, and a side that does not speak it
  refuses. We speak 1.x, so a peer announcing 1.x or later is fine (1.0 is
  used) and one announcing 0.x is refused.
* The client takes a server suggestion if it implements it and it is in
  ``accept`` (by default: every extension it implements). A suggestion the
  server did not echo is dropped, as in the spec's example.
* When both sides name ``batch-ack`` with different counts, the smaller
  count is used, and never more than the client's ``max_window`` (a server
  refuses a final count over its own); so is batch-ack when both ``ack`` and ``batch-ack`` would
  be used (``ack`` is then dropped from the optional ones).
* Unknown *optional* extensions are ignored; an unknown extension in the
  final list is refused like an unknown required one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ._errors import MalformedTextError, RemoteProtocolError, UnsupportedExtensionError, UnsupportedVersionError
from ._extensions import ACK, BATCH_ACK, KNOWN_EXTENSIONS, MAX_WINDOW, ExtensionSpec
from ._frames import PROTOCOL_VERSION, Handshake

__all__ = [
    "HandshakeOptions",
    "negotiated_version",
    "server_reply",
    "client_final",
    "check_final",
    "ack_window",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeOptions:
    """What one side says in the handshake.

    Attributes:
        identity: our identity (ASCII, at most 255 bytes).
        required: extensions the peer must implement.
        optional: extensions we suggest.
        accept: (client) the names of server suggestions we take; None for
            every extension we implement.
        max_window: the largest ack window we take: a client lowers a
            larger batch-ack count to it in the final list, a server refuses
            a final list over it (it is what we are willing to hold
            unconsumed, ``Limits.max_pending_messages``).
    """

    identity: str = ""
    required: tuple[ExtensionSpec, ...] = ()
    optional: tuple[ExtensionSpec, ...] = ()
    accept: frozenset[str] | None = None
    max_window: int = MAX_WINDOW

    def __post_init__(self) -> None:
        unknown = _unknown(self.required + self.optional)
        if unknown:
            raise ValueError(f"extensions this implementation does not speak: {', '.join(unknown)}")
        Handshake(identity=self.identity, required=self.required, optional=self.optional)
        window = ack_window(self.required + self.optional)
        if window is not None and window > self.max_window:
            raise ValueError(f"a batch-ack count of {window} is over the limit of {self.max_window} pending messages")

    def hello(self) -> Handshake:
        """Our handshake message (steps 1 and 2)."""
        return Handshake(identity=self.identity, required=self.required, optional=self.optional)


def _unknown(extensions: Iterable[ExtensionSpec]) -> tuple[str, ...]:
    return tuple(extension.name for extension in extensions if extension.name not in KNOWN_EXTENSIONS)


def negotiated_version(peer: Handshake) -> tuple[int, int]:
    """The version in use with this peer: the lower of both.

    Raises:
        UnsupportedVersionError: we do not speak the lower version.
    """
    version = min(PROTOCOL_VERSION, (peer.major, peer.minor))
    if version[0] != PROTOCOL_VERSION[0]:
        raise UnsupportedVersionError(
            f"version {peer.major}.{peer.minor} is not supported; this side speaks"
            f" {PROTOCOL_VERSION[0]}.{PROTOCOL_VERSION[1]}",
            peer_version=(peer.major, peer.minor),
        )
    return version


def ack_window(extensions: Iterable[ExtensionSpec]) -> int | None:
    """The ack window these extensions set (batch-ack wins over ack), or None.

    Raises:
        MalformedTextError: a batch-ack count that is not in [1, 65535].
    """
    windows = {extension.name: extension.window for extension in extensions if extension.name in (ACK, BATCH_ACK)}
    return windows.get(BATCH_ACK, windows.get(ACK))


def _check_window(extensions: Iterable[ExtensionSpec]) -> None:
    try:
        ack_window(extensions)
    except MalformedTextError as exc:
        raise RemoteProtocolError(exc.message) from None


def server_reply(options: HandshakeOptions, hello: Handshake) -> Handshake:
    """Step 2: the server's answer to the client's ``hello``.

    Raises:
        UnsupportedVersionError: see :func:`negotiated_version`.
        UnsupportedExtensionError: the client requires what we do not implement.
    """
    negotiated_version(hello)
    unknown = _unknown(hello.required)
    if unknown:
        raise UnsupportedExtensionError(f"required extensions not supported: {', '.join(unknown)}", names=unknown)
    _check_window(hello.required)
    return options.hello()


def _merge(ours: ExtensionSpec, theirs: ExtensionSpec) -> ExtensionSpec:
    if ours.name == BATCH_ACK and ours.window != theirs.window:
        return ExtensionSpec.batch_ack(min(ours.window, theirs.window))
    return ours


def _capped(extensions: list[ExtensionSpec], max_window: int) -> list[ExtensionSpec]:
    return [
        ExtensionSpec.batch_ack(max_window)
        if extension.name == BATCH_ACK and extension.window > max_window
        else extension
        for extension in extensions
    ]


def client_final(options: HandshakeOptions, reply: Handshake) -> Handshake:
    """Step 3: the client's final list, from its options and the server's reply.

    Raises:
        UnsupportedVersionError: see :func:`negotiated_version`.
        UnsupportedExtensionError: the server requires what we do not implement.
    """
    negotiated_version(reply)
    unknown = _unknown(reply.required)
    if unknown:
        raise UnsupportedExtensionError(f"required extensions not supported: {', '.join(unknown)}", names=unknown)
    _check_window(reply.required + reply.optional)
    ours = {extension.name: extension for extension in options.required + options.optional}
    required = list(options.required)
    for extension in reply.required:
        index = next((i for i, item in enumerate(required) if item.name == extension.name), None)
        if index is not None:
            required[index] = _merge(required[index], extension)
        else:
            required.append(_merge(ours[extension.name], extension) if extension.name in ours else extension)
    taken = {extension.name for extension in required}
    accept = KNOWN_EXTENSIONS if options.accept is None else options.accept
    optional = [
        _merge(ours[extension.name], extension) if extension.name in ours else extension
        for extension in reply.optional
        if extension.name in KNOWN_EXTENSIONS and extension.name in accept and extension.name not in taken
    ]
    if BATCH_ACK in taken | {extension.name for extension in optional}:
        optional = [extension for extension in optional if extension.name != ACK]
    required, optional = _capped(required, options.max_window), _capped(optional, options.max_window)
    return Handshake(identity=options.identity, required=tuple(required), optional=tuple(optional))


def check_final(options: HandshakeOptions, final: Handshake) -> tuple[tuple[int, int], tuple[ExtensionSpec, ...]]:
    """The server's check of step 3: return the version and the extensions in use.

    Raises:
        UnsupportedVersionError: see :func:`negotiated_version`.
        UnsupportedExtensionError: the final list names what we do not implement.
        RemoteProtocolError: it leaves out an extension we require, or a
            batch-ack count is invalid.
    """
    version = negotiated_version(final)
    extensions = final.extensions
    unknown = _unknown(extensions)
    if unknown:
        raise UnsupportedExtensionError(f"extensions not supported: {', '.join(unknown)}", names=unknown)
    missing = [extension.name for extension in options.required if extension.name not in {e.name for e in extensions}]
    if missing:
        raise RemoteProtocolError(f"the final handshake leaves out required extensions: {', '.join(missing)}")
    _check_window(extensions)
    window = ack_window(extensions)
    if window is not None and window > options.max_window:
        raise RemoteProtocolError(f"a batch-ack count of {window} is over this side's limit of {options.max_window}")
    return version, extensions
