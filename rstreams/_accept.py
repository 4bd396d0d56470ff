"""Accept loops that survive running out of file descriptors.

``trio.serve_listeners`` retries an accept that failed for lack of
resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) every 0.1 s and logs each
failure at ERROR with a traceback: a server at its open-file limit writes
ten tracebacks a second until a connection closes. This is the same loop
with the policy a server wants there:

* say it once, as one line that names the cause and the remedy
  (``ulimit -n``, ``--max-connections``);
* back off: wait 0.1 s after the first failure, doubling up to
  :data:`MAX_BACKOFF` while accepting keeps failing (a connection waiting
  in the listen backlog is accepted at the next try, so nothing is lost
  but latency);
* once an accept works again, say so once (how many accepts failed, for
  how long), and start from the beginning next time.

Any other error from ``accept`` ends the loop, as in trio.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NoReturn, TypeVar

import trio

__all__ = ["serve_listeners", "ACCEPT_CAPACITY_ERRNOS", "FIRST_BACKOFF", "MAX_BACKOFF"]

logger = logging.getLogger("rstreams")

#: The errors that mean "no resources to accept with right now", as trio's.
ACCEPT_CAPACITY_ERRNOS = frozenset(
    code for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS) if code is not None
)
#: Seconds to wait after the first failed accept of a run.
FIRST_BACKOFF = 0.1
#: The longest wait between two tries: what a client at the head of the
#: backlog may wait beyond the moment a descriptor frees up.
MAX_BACKOFF = 5.0

_S = TypeVar("_S", bound=trio.abc.AsyncResource)
_L = TypeVar("_L", bound=trio.abc.Listener[Any])  # (typed as trio types its own)


class _Backoff(Generic[_S]):
    # One listener's run of failed accepts.

    def __init__(self, listener: trio.abc.Listener[_S]) -> None:
        self.listener = listener
        self.failures = 0
        self.started = 0.0
        self.delay = FIRST_BACKOFF

    def failed(self, error: OSError) -> float:
        if not self.failures:
            self.started = trio.current_time()
            name = errno.errorcode.get(error.errno or 0, str(error.errno))
            logger.warning(
                "cannot accept connections: %s (%s); retrying with back-off up to %g s until a descriptor "
                "frees up (raise the open-file limit, ulimit -n, or lower --max-connections)",
                name,
                os.strerror(error.errno or 0),
                MAX_BACKOFF,
            )
        else:
            self.delay = min(self.delay * 2, MAX_BACKOFF)
        self.failures += 1
        return self.delay

    def succeeded(self) -> None:
        if self.failures:
            logger.warning(
                "accepting connections again after %d failed accepts in %.1f s",
                self.failures,
                trio.current_time() - self.started,
            )
            self.failures = 0
            self.delay = FIRST_BACKOFF


async def _run_handler(stream: _S, handler: Callable[[_S], Awaitable[object]]) -> None:
    try:
        await handler(stream)
    finally:
        await trio.aclose_forcefully(stream)


async def _serve_one_listener(
    listener: trio.abc.Listener[_S], handler_nursery: trio.Nursery, handler: Callable[[_S], Awaitable[object]]
) -> NoReturn:
    backoff = _Backoff(listener)
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                await trio.sleep(backoff.failed(exc))
            else:
                backoff.succeeded()
                handler_nursery.start_soon(_run_handler, stream, handler)


async def serve_listeners(
    handler: Callable[[_S], Awaitable[object]],
    listeners: list[_L],
    *,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[_L]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """``trio.serve_listeners``, with a quiet back-off when descriptors run out.

    Accepts on every listener until cancelled and runs ``handler(stream)``
    for each connection in ``handler_nursery`` (default: a nursery of its
    own), closing the stream when the handler returns. ``task_status``
    gets the listeners once all accept. An accept that fails for lack of
    resources is logged once per run of failures and retried with an
    exponential back-off (see the module docstring); other errors raise.

    Cancellation: stops accepting and closes the listeners; handlers in an
    outside ``handler_nursery`` keep running.
    """
    async with trio.open_nursery() as nursery:
        if handler_nursery is None:
            handler_nursery = nursery
        for listener in listeners:
            nursery.start_soon(_serve_one_listener, listener, handler_nursery, handler)
        # Every accept loop is started (trio's own serve_listeners gives the
        # same promise: connections are accepted once this returns).
        task_status.started(listeners)
    raise AssertionError("the accept loops never return")  # pragma: no cover
