"""Bounded request slots: the next request is read only when a slot is free.

A server that answers requests concurrently (EMP's request-response,
Epoxy's requests) holds one slot per request being answered. Taking the
next request from the connection waits for a free slot first, so a client
that floods requests is held back by the socket instead of by a growing
queue of handler tasks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from ._config import check_count

__all__ = ["RequestSlots"]

T = TypeVar("T")


class RequestSlots:
    """At most ``limit`` requests being answered at once."""

    def __init__(self, limit: int) -> None:
        check_count("the number of request slots", limit)
        self.limit = limit
        self._semaphore = trio.Semaphore(limit)

    @property
    def busy(self) -> int:
        """Slots taken now."""
        return self.limit - self._semaphore.value

    async def receive(self, receive: Callable[[], Awaitable[T]]) -> T:
        """Wait for a free slot, then return ``await receive()``.

        The slot is then the caller's, to :meth:`release` once the request is
        answered; if ``receive`` raises, the slot is released here.
        """
        await self._semaphore.acquire()
        try:
            return await receive()
        except BaseException:
            self._semaphore.release()
            raise

    def release(self) -> None:
        """Give back a slot taken by :meth:`receive`."""
        self._semaphore.release()
