"""The limits every connection enforces, in one place.

A peer decides how many bytes it sends; this side decides how many it will
hold. Each limit below bounds one buffer or one value that a peer controls,
so a hostile or broken peer costs at most a known amount of memory before it
is told ``protocol error`` and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["ProtocolLimits", "DEFAULT_LIMITS", "DEFAULT_CONNECTION_MEMORY", "MESSAGE_HEADER_BOUND"]

KiB = 1024
MiB = 1024 * KiB

#: The memory one connection may hold on behalf of its peer, in bytes, in
#: every protocol rstreams speaks (wire-v0 and every bridge): what it has
#: received and not yet handed on, and what it has queued for the peer and
#: not yet written. One number, so that a server's memory is bounded by
#: connections x this, plus a constant (issue 18).
DEFAULT_CONNECTION_MEMORY = 64 * MiB

#: What a message adds to the data it carries, at most, with margin: the
#: largest header in front of a split part's payload (fixarray, code, two
#: uint64 Ids, bin32 length) is 25 bytes. A part fits in a message of
#: ``max_message_size`` when it is this much smaller; the sender cuts its
#: parts, the WebSocket layer its messages, and the receiver's budget its
#: room for an unfinished part, by this one bound.
MESSAGE_HEADER_BOUND = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolLimits:
    """Limits on what a peer may send, and how this side splits what it sends.

    Attributes:
        max_message_size: largest single protocol message accepted, in bytes.
            Also bounds an unsplit onNext element. Default 16 MiB.
        max_element_size: largest element accepted after joining split parts.
            Default 32 MiB: one largest element fits the inbound half of the
            default per-connection budget (:data:`DEFAULT_CONNECTION_MEMORY`;
            ``SessionConfig`` refuses a larger one than its budget's half).
        max_string_size: largest str field (publisher names, error texts,
            goodbye reasons), in UTF-8 bytes. Default 64 KiB.
        max_extensions: most extension ids accepted in a hello. Default 64.
        split_threshold: elements larger than this are sent as onNextPart ...
            onNextLastPart. Default 64 KiB.
        part_size: the payload of each part of a split element but the last
            (which carries the rest); an element of at most this many bytes
            is sent in two halves, since a split element has at least one
            onNextPart. Default 256 KiB: every part costs each side a header
            and its bookkeeping (1 MiB elements moved about a fifth faster
            than in 64 KiB parts), and another stream's message waits for
            at most one part (about 0.1 ms on loopback, 2 ms at 1 Gbit/s).
            Parts never exceed ``max_message_size`` less a header (a larger
            setting is cut to fit). A peer must accept messages of a part
            and its header (256 KiB + 64 bytes from a default rstreams
            sender; 64 KiB + 64 over TLS and WebSocket, where parts are
            ``split_threshold`` bytes): one whose ``max_message_size`` is
            smaller needs the sender's ``part_size`` lowered to fit.
        max_remembered_ids: how many cancelled or finished stream Ids are
            remembered so that late messages for them are recognised (and
            dropped) rather than taken for unknown Ids. Default 65536.
    """

    max_message_size: int = 16 * MiB
    max_element_size: int = 32 * MiB
    max_string_size: int = 64 * KiB
    max_extensions: int = 64
    split_threshold: int = 64 * KiB
    part_size: int = 256 * KiB
    max_remembered_ids: int = 65536

    def __post_init__(self) -> None:
        for name in (
            "max_message_size",
            "max_element_size",
            "max_string_size",
            "max_extensions",
            "split_threshold",
            "part_size",
            "max_remembered_ids",
        ):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.split_threshold > self.max_message_size - MESSAGE_HEADER_BOUND:
            raise ValueError("split_threshold must leave room for a message header under max_message_size")

    def for_copied_writes(self) -> ProtocolLimits:
        """These limits for a connection whose writes copy every message
        (TLS, WebSocket, memory streams: all but plain TCP's gathered
        writes): parts of at most ``split_threshold``. The scheduler gives a
        stream one quantum of ``split_threshold`` bytes per round-robin
        visit but at least one message, and on the copying path a larger
        part would give a split stream the larger share of every write."""
        if self.part_size <= self.split_threshold:
            return self
        return replace(self, part_size=self.split_threshold)


DEFAULT_LIMITS = ProtocolLimits()
