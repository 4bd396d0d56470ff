"""Joining the CONTINUED frames of one message, within a size limit.

A message over 1 MiB is sent as several MESSAGE frames, CONTINUED on all
but the last, each with the same sequence number, destination and
properties. We read the frames of one message as consecutive MESSAGE
frames (other frames, such as acks, may come between them, but not another
message's frame): a frame that does not match the message being joined is
a protocol error, so is a total over ``max_message_size``.
"""

from __future__ import annotations

from ._errors import MessageTooLargeError, RemoteProtocolError
from ._frames import MessageFrame

__all__ = ["Reassembler"]


class Reassembler:
    """Holds the parts of the message being joined (at most one at a time)."""

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size
        self._first: MessageFrame | None = None
        self._parts: list[bytes] = []
        self._size = 0

    @property
    def size(self) -> int:
        """Payload bytes held of the message being joined."""
        return self._size if self._first is not None else 0

    @property
    def in_progress(self) -> bool:
        """True between a message's first CONTINUED frame and its last frame."""
        return self._first is not None

    def add(self, frame: MessageFrame) -> MessageFrame | None:
        """Add a frame; return the whole message once its last frame is in.

        Raises:
            RemoteProtocolError: the frame belongs to another message.
            MessageTooLargeError: the message is over the limit.
        """
        first = self._first
        if first is not None and (
            frame.sequence != first.sequence
            or frame.destination != first.destination
            or frame.properties != first.properties
        ):
            raise RemoteProtocolError(
                f"frame of message {frame.sequence} while message {first.sequence} is still CONTINUED"
            )
        self._size += len(frame.payload)
        if self._size > self.max_message_size:
            raise MessageTooLargeError(f"a message of more than {self.max_message_size} bytes")
        if frame.continued:
            if first is None:
                self._first = frame
            self._parts.append(frame.payload)
            return None
        if first is None:
            self._size = 0
            return frame
        payload = b"".join((*self._parts, frame.payload))
        self._first, self._parts, self._size = None, [], 0
        return MessageFrame(sequence=first.sequence, destination=first.destination,
                            properties=first.properties, payload=payload)  # fmt: skip
