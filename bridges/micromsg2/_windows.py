"""Sequence numbers and the two sides of an ack window.

Sequence numbers are 16-bit, start at 1 on each connection and wrap from
65535 to 1: 0 is never used. Every message takes the next number, however
many CONTINUED frames it is split into.

An ack names a sequence number and acknowledges every message sent up to
it, across a wrap (the spec's batch-ack rule; we read ``ack`` the same way,
as a window of one). Because at most ``window`` (<= 65535) messages are ever
unacknowledged, each pending number is distinct and an ack is unambiguous.

The sender (:class:`OutboundWindow`): at most ``window`` messages sent and
not acknowledged. The top-up rule: an ack that frees ``m`` messages gives
back ``m`` credits, which is exactly Reactive Streams' ``request(m)``.

The receiver (:class:`InboundWindow`): the messages received and not yet
consumed by the application. Consuming is what acknowledges (the ack is
sent as the application takes messages, not when the window is full), so
"unacknowledged" and "not consumed" are the same count, and a peer that
sends past the window has broken the protocol.
"""

from __future__ import annotations

from collections import deque

__all__ = ["FIRST_SEQUENCE", "next_sequence", "OutboundWindow", "InboundWindow"]

FIRST_SEQUENCE = 1
_LAST_SEQUENCE = 65535


def next_sequence(sequence: int) -> int:
    """The number after ``sequence``: 65535 wraps to 1."""
    return FIRST_SEQUENCE if sequence >= _LAST_SEQUENCE else sequence + 1


class OutboundWindow:
    """Messages we sent and the peer has not acknowledged.

    Args:
        window: how many may be unacknowledged; None when no ack extension
            was negotiated (nothing is tracked, credit is unlimited).
    """

    def __init__(self, window: int | None) -> None:
        self.window = window
        self._pending: deque[int] = deque()
        self.next_sequence = FIRST_SEQUENCE

    @property
    def credit(self) -> int | None:
        """How many more messages may be sent now; None for unlimited."""
        return None if self.window is None else self.window - len(self._pending)

    @property
    def unacknowledged(self) -> int:
        """How many messages await an ack."""
        return len(self._pending)

    def take_sequence(self) -> int:
        """Number the next message and count it as pending.

        Raises:
            ValueError: the window is full (check :attr:`credit` first).
        """
        if self.window is not None and len(self._pending) >= self.window:
            raise ValueError(f"the ack window of {self.window} is full")
        sequence = self.next_sequence
        self.next_sequence = next_sequence(sequence)
        if self.window is not None:
            self._pending.append(sequence)
        return sequence

    def acknowledge(self, sequence: int) -> int:
        """The peer acknowledged up to ``sequence``: return how many that frees.

        Raises:
            ValueError: ``sequence`` is not one of the pending messages.
        """
        if sequence not in self._pending:
            raise ValueError(f"ack for sequence number {sequence}, which is not awaiting an ack")
        freed = 0
        while True:
            freed += 1
            if self._pending.popleft() == sequence:
                return freed


class InboundWindow:
    """Messages received and not consumed: the receiving side of the window.

    Args:
        window: how many the peer may have unacknowledged (None: no acks).
        max_pending: our own bound, whether or not acks were negotiated.
    """

    def __init__(self, window: int | None, max_pending: int) -> None:
        self.window = window
        self.max_pending = max_pending
        self._pending: deque[int] = deque()
        self.expected_sequence = FIRST_SEQUENCE

    @property
    def pending(self) -> int:
        """How many received messages the application has not consumed."""
        return len(self._pending)

    @property
    def window_full(self) -> bool:
        """Whether one more message would exceed the negotiated ack window."""
        return self.window is not None and len(self._pending) >= self.window

    @property
    def limit_reached(self) -> bool:
        """Whether one more message would exceed our own ``max_pending``."""
        return len(self._pending) >= self.max_pending

    def received(self, sequence: int) -> None:
        """Count a whole message received (its number was checked by the caller)."""
        self._pending.append(sequence)
        self.expected_sequence = next_sequence(sequence)

    def consume(self, count: int) -> int:
        """The application took ``count`` messages: return the last one's number.

        Raises:
            ValueError: ``count`` is not in [1, :attr:`pending`].
        """
        if not 1 <= count <= len(self._pending):
            raise ValueError(f"cannot consume {count} of {len(self._pending)} pending messages")
        for _ in range(count - 1):
            self._pending.popleft()
        return self._pending.popleft()
