"""Exception groups at the edge of a context manager that owns a nursery."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["caller_sees_its_own_exception", "first_leaf", "without_consequences"]


@contextmanager
def caller_sees_its_own_exception() -> Iterator[None]:
    """Re-raise a lone exception out of the group a nursery wrapped it in.

    A context manager that runs its own nursery around the caller's block
    (a session, an EMP connection) would otherwise hand the caller an
    ``ExceptionGroup`` for the ``KeyError`` its own code raised. A group of
    several, or a nested one, is left as it is: it says something the single
    exception would hide.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise


@contextmanager
def without_consequences(is_consequence: Callable[[BaseException], bool]) -> Iterator[None]:
    """Leave out of a nursery's group the errors that only follow from
    another one in it, as trio leaves out the ``Cancelled`` of the tasks a
    failure cancelled.

    A session whose own task failed (Ctrl-C landing in a publisher) ends
    every stream on it, and the caller's block, waiting on one of them,
    raises that end: a second exception beside the one that caused it,
    which ``except* KeyboardInterrupt`` would leave unhandled. A group made
    only of consequences is left as it is: then nothing else explains them.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        consequences, rest = group.split(is_consequence)
        if consequences is None or rest is None:
            raise
        raise rest from None


def first_leaf(error: BaseException) -> BaseException:
    """The first exception in ``error`` that is not a group: what to report
    of an error that came out of nested nurseries, each of which wrapped it
    in a group of one ("Exceptions from Trio nursery (1 sub-exception)"
    says nothing). ``error`` itself when it is not a group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
