"""An app's elements into a bridge connection's budget: room first, then the elements.

A bridge serving an app asks a publisher, through its in-process session
(:func:`~bridges.kit.open_app_session`), for elements it will send to its
peer, and counts each element in its connection's :class:`MemoryBudget`
from the moment it has it. Before its first element a subscription does not
know how large its elements are, so room cannot be reserved for them when
they are asked for: reserving the most an element may be held that room
until the element came, and a subscription to a publisher that never sends
held it for good (two of them left a MicroMsg2 connection no room; one held
every other first ask of a Relink link).

So room is taken when the elements are *there*, before they are taken out
of the session: :meth:`rstreams.Subscription.wait_buffered` says how many
bytes the next batch is, the budget is waited on for them, and only then
does the batch leave the subscription. Until then the elements are the app
session's, counted in its inbound half (the session is opened with the
connection's budget, so that half is half of it), which stops that
session's reader while full: waiting for room holds the reader back, never
more memory. What one peer causes is therefore its connection's budget,
plus the app session's own, the same number (see
``docs/bridges/README.md``, "Memory budget"), and a subscription whose
publisher sends nothing holds nothing.

A batch is counted in full: room for at most ``max_bytes`` of it is waited
for, and the rest (only ever a single element larger than ``max_bytes``) is
charged on top, since no wait could make room for more than the budget's
ceiling.
"""

from __future__ import annotations

from collections.abc import Sequence

from rstreams import Subscription
from rstreams.protocol import ElementBatch

from ._budget import MemoryBudget

__all__ = ["BatchesWithinBudget", "next_ask"]


def next_ask(budget_limit: int, sharing: int, largest: int, most: int) -> int:
    """How many elements a subscription asks its publisher for next.

    One while it has seen no element (its size is unknown); then as many as
    its share of half the budget holds at the largest element it has seen,
    the half shared among the ``sharing`` subscriptions open now, within
    [1, ``most``]. The share follows how many are open, not how many may
    be: one subscription alone asks for enough to keep its peer busy (a
    fixed share of a thousand possible subscriptions asked for one 64 KiB
    element at a time, and Relink moved 86 MB/s), and each new one shrinks
    the next asks of all. What an ask brings is counted when it arrives
    (:class:`BatchesWithinBudget`), so this sizes the asks, not the bound.
    """
    if largest <= 0:
        return 1
    share = max(budget_limit // (2 * max(1, sharing)), 1)
    return max(1, min(most, share // largest))


class BatchesWithinBudget:
    """A subscription's batches, each counted in ``budget`` before it is taken (see the module docstring).

    Args:
        subscription: the app's stream (entered; no codec).
        budget: where the elements count from the moment they are taken.
        max_bytes: the most room one batch waits for (at most the budget's
            limit); a batch holds no more than this, but a single element
            larger than it, whose rest is charged.

    ``async for batch in BatchesWithinBudget(...)``: each batch is at least
    one element, and ``sum(map(len, batch))`` bytes of ``budget`` are the
    caller's to give back (or hand over) once the elements are gone.
    """

    def __init__(self, subscription: Subscription, budget: MemoryBudget, *, max_bytes: int) -> None:
        if not 0 < max_bytes <= budget.limit:
            raise ValueError(f"max_bytes must be within the budget's limit (1..{budget.limit}), got {max_bytes!r}")
        self.subscription = subscription
        self.budget = budget
        self.max_bytes = max_bytes

    def __aiter__(self) -> BatchesWithinBudget:
        return self

    async def __anext__(self) -> Sequence[bytes]:
        """The next batch, its bytes counted in the budget.

        Raises:
            StopAsyncIteration: the stream completed (or was cancelled).
            PublisherError, SessionClosed: the stream failed, after its elements.
            The budget's error, once it is closed (the connection ended).

        Cancellation: nothing is taken, from the subscription or the budget.
        """
        count, size = await self.subscription.wait_buffered(max_bytes=self.max_bytes)
        if not count:
            raise StopAsyncIteration
        room = min(size, self.max_bytes)
        await self.budget.take(room)
        try:
            batch: Sequence[bytes] = await self.subscription.batches(count).__anext__()
        except BaseException:
            self.budget.give_back(room)
            raise
        # The batch is what was counted (nothing else takes from the
        # subscription); the rest of an element larger than max_bytes
        # is already in memory.
        # (A packed batch knows its size; summing it would slice every element.)
        arrived = batch.nbytes if isinstance(batch, ElementBatch) else sum(map(len, batch))
        if arrived > room:
            self.budget.charge(arrived - room)
        else:
            self.budget.give_back(room - arrived)
        return batch
