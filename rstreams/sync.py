"""A blocking client for code that is not trio: plain scripts, notebooks, asyncio.

::

    import rstreams.sync

    print(rstreams.sync.fetch("tcp://127.0.0.1:9000", "range?count=5", 5))

    with rstreams.sync.subscribe("tcp://127.0.0.1:9000", "ticker", codec="msgpack") as ticks:
        for tick in ticks:          # blocks until the next element arrives
            print(tick)
            if tick > 10:
                break               # leaving the block cancels the stream

From asyncio, call these through a thread, so that the event loop never
blocks: ``await asyncio.to_thread(rstreams.sync.fetch, url, name, 5)``, and
for a stream ``await asyncio.to_thread(next, subscription, None)``.

How it works: each call opens its own connection in a thread of its own,
running trio (``trio.run``) for as long as the connection is open. The
calling thread asks that run for the next batch of elements with
``trio.from_thread.run`` and hands them out one by one, so the only elements
held are those the subscription's demand window let in (the window is
topped up as the caller takes elements, exactly as for a trio subscriber):
a slow loop still holds the publisher back, end to end. Leaving early
(``break`` in a ``with`` block, :meth:`Subscription.close`, an exception)
cancels the stream and closes the connection with goodbye.

Everything the trio API offers stays available inside trio; this module is
the way in for everyone else. Awaiting the trio API (``rstreams.connect``,
``rstreams.open_session``, ``rstreams.serve_*``) under asyncio raises a
``RuntimeError`` that points here.
"""

from __future__ import annotations

import ssl
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Generic, TypeVar

import trio

from ._codecs import CodecLike
from ._config import SessionConfig
from ._connect import connect
from ._peer import DEFAULT_PREFETCH, Peer
from ._subscribe import Subscription as AsyncSubscription

__all__ = ["Subscription", "subscribe", "fetch"]

T = TypeVar("T")


class _TrioThread(Generic[T]):
    # One trio run in a thread of its own, holding open whatever ``enter``
    # entered on an exit stack (a connection, a subscription) until close()
    # or until the run fails. The run's main task owns every context it
    # entered, so they are left in the task that entered them, as trio's
    # cancel scopes require; other threads only call into the run.
    #
    # close() may come at any moment: before the run started (then the run
    # sees _closing and ends at once), while it connects (the connecting is
    # cancelled), or once connected (the stop event: the contexts are left
    # normally, so the stream is cancelled and the session says goodbye).

    def __init__(self, enter: Callable[[AsyncExitStack], Awaitable[T]]) -> None:
        self._enter = enter
        self._ready = threading.Event()
        self._closing = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._stop: trio.Event | None = None
        self._entered = False
        self._error: BaseException | None = None
        self._value: T | None = None
        # A daemon thread: a subscription never closed must not keep the
        # interpreter from exiting (its connection then ends with the process).
        self._thread = threading.Thread(target=self._run, name="rstreams.sync", daemon=True)

    def start(self) -> T:
        try:
            self._thread.start()
            self._ready.wait()
        except BaseException:  # Ctrl-C while connecting: leave nothing behind
            self.close()
            raise
        if self._error is not None:
            self._thread.join()
            raise self._error
        assert self._value is not None
        return self._value

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - the caller's thread raises it
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._stop = trio.Event()
        with trio.CancelScope() as self._scope:
            self._token = trio.lowlevel.current_trio_token()
            if self._closing:  # close() came before the token: it cannot reach us
                return
            async with AsyncExitStack() as stack:
                self._value = await self._enter(stack)
                self._entered = True
                self._ready.set()
                await self._stop.wait()

    def _stop_soon(self) -> None:
        if self._entered:
            assert self._stop is not None
            self._stop.set()  # leave the contexts in order, politely
        else:
            assert self._scope is not None
            self._scope.cancel()  # still connecting: give up

    def call(self, function: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``function`` in the trio thread; raise what ended the run, if it ended."""
        try:
            return trio.from_thread.run(function, trio_token=self._token)
        except (trio.RunFinishedError, trio.Cancelled):
            # The run ended under the call (the connection failed or closed).
            self._thread.join()
            if self._error is not None:
                raise self._error from None
            raise RuntimeError("the rstreams.sync connection is closed") from None

    def close(self) -> None:
        self._closing = True
        token = self._token
        if token is not None:
            try:
                trio.from_thread.run_sync(self._stop_soon, trio_token=token)
            except trio.RunFinishedError:
                pass  # already over
        if self._thread.is_alive():
            self._thread.join()


class Subscription:
    """A stream from a publisher, as a blocking iterator (see :func:`subscribe`).

    Iterate it from one thread at a time; :meth:`close` may be called from
    any thread. Use it in a ``with`` block, or iterate it to the end, or call
    :meth:`close`: each releases the connection and its thread.
    """

    def __init__(self, runner: _TrioThread[AsyncSubscription]) -> None:
        self._runner = runner
        self._subscription = runner.start()
        self._batches = self._subscription.batches()
        self._buffered: deque[Any] = deque()
        self._ended = False
        self._closed = False  # by close(), perhaps from another thread
        self._busy = threading.Lock()

    @property
    def name(self) -> str:
        """The publisher name subscribed to, with its query."""
        return self._subscription.name

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        """The next element (decoded by the codec, if any); blocks until one arrives.

        Raises:
            StopIteration: the stream completed (or was closed).
            PublisherError: the publisher failed.
            SessionClosed / SessionBroken: the connection ended first.
        """
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("another thread is iterating this rstreams.sync.Subscription")
        try:
            while not self._buffered:
                if self._ended:
                    raise StopIteration
                try:
                    batch = self._runner.call(self._next_batch)
                except BaseException:
                    closed_meanwhile = self._closed
                    self.close()
                    if closed_meanwhile:
                        raise StopIteration from None
                    raise
                if batch is None:
                    self._ended = True
                    self.close()
                    raise StopIteration
                self._buffered.extend(batch)
            return self._buffered.popleft()
        finally:
            self._busy.release()

    async def _next_batch(self) -> Sequence[Any] | None:
        try:
            return await self._batches.__anext__()
        except StopAsyncIteration:
            return None

    def close(self) -> None:
        """Cancel the stream (if still open), say goodbye and wait for the thread to end.

        Safe to call more than once, and from any thread.
        """
        self._ended = self._closed = True
        self._runner.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rstreams.sync.Subscription {self.name!r}{' ended' if self._ended else ''}>"


def subscribe(
    url: str,
    name: str,
    *,
    prefetch: int | None = DEFAULT_PREFETCH,
    codec: CodecLike = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
) -> Subscription:
    """Connect to ``url`` and subscribe to ``name``; iterate the result.

    Args:
        url: any URL :func:`rstreams.connect` takes (``tcp://``, ``tls://``,
            ``ws://``, ``wss://``, and every installed bridge's).
        name: the publisher name with its query, e.g. ``"range?count=5"``.
        prefetch: elements kept requested ahead of the caller (None: a
            window that adapts to the caller's pace, within a byte budget).
        codec: how to decode elements ("raw", "msgpack", "json", a Codec).
        ssl_context: for the TLS schemes; default: verify against system roots.
        config: the session's settings (None: the defaults).

    Returns once the publisher accepted the subscription.

    Raises:
        UnknownPublisher / PublisherError: the publisher refused.
        OSError: the connection could not be made.
        ValueError: a malformed URL, or a scheme no bridge handles.

    Blocks the calling thread; from asyncio, call it through
    ``asyncio.to_thread``. Ctrl-C while it connects closes what was opened.
    """

    async def enter(stack: AsyncExitStack) -> AsyncSubscription:
        peer: Peer = await stack.enter_async_context(connect(url, ssl_context=ssl_context, config=config))
        return await stack.enter_async_context(peer.subscribe(name, prefetch=prefetch, codec=codec))

    return Subscription(_TrioThread(enter))


def fetch(
    url: str,
    name: str,
    limit: int,
    *,
    codec: CodecLike = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
) -> list[Any]:
    """Connect to ``url``, take at most ``limit`` elements of ``name``, close; return them.

    Returns once the publisher completed or ``limit`` elements arrived (the
    stream is then cancelled). Everything asked for is held in memory, so
    ``limit`` bounds it; for long streams use :func:`subscribe`.

    Raises:
        ValueError: ``limit`` is not an int >= 1, a malformed URL, or a
            scheme no bridge handles.
        UnknownPublisher / PublisherError: the publisher refused or failed.
        OSError: the connection could not be made.

    Blocks the calling thread; from asyncio, call it through
    ``asyncio.to_thread``.
    """
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")

    async def enter(stack: AsyncExitStack) -> Peer:
        return await stack.enter_async_context(connect(url, ssl_context=ssl_context, config=config))

    runner = _TrioThread(enter)
    peer = runner.start()
    try:
        result: list[Any] = runner.call(lambda: peer.fetch(name, limit, codec=codec))
    finally:
        runner.close()
    return result
