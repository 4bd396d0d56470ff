"""Telling a caller under asyncio (or any loop but trio) what to do instead.

The runtime runs on trio only. Awaited from asyncio, its first trio call
would fail deep inside with a message about trio's internals; the public
entry points (``connect``, ``open_session``, ``serve_*``) call
:func:`require_trio` first, so the error names the way in that does work.
Asking sniffio costs a context-variable read: nothing next to a connection.
"""

from __future__ import annotations

import sniffio

__all__ = ["require_trio"]


def require_trio(entry_point: str) -> None:
    """Raise unless the running async library is trio.

    Raises:
        RuntimeError: running under another async library (asyncio, ...),
            with what to use instead.
    """
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return  # not under a known loop: let trio say what it says
    if library != "trio":
        raise RuntimeError(
            f"rstreams.{entry_point} runs on trio, but was awaited under {library}. "
            "From asyncio, scripts or notebooks use the blocking client rstreams.sync "
            "(rstreams.sync.subscribe / rstreams.sync.fetch; under asyncio through "
            "asyncio.to_thread), or run trio code with trio.run(main)."
        )
