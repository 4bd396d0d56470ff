"""What every waiter of the kit raises once a connection has ended: a fresh copy of why."""

from __future__ import annotations

__all__ = ["copy_error"]


def copy_error(error: BaseException) -> BaseException:
    """A copy of ``error`` to raise in one more task.

    Each waiter raises its own copy of why the connection ended: one
    exception object raised in several tasks would collect all their
    tracebacks. (``copy.copy`` would call ``__init__``, whose signatures
    differ.)
    """
    clone = type(error).__new__(type(error))
    clone.args = error.args
    clone.__dict__.update(error.__dict__)
    clone.__cause__ = error.__cause__
    return clone
