"""The demo app under its checkout name, ``examples.demo:app``.

The app itself ships with the package as :mod:`rstreams.demo` (so that
``rstreams demo`` and ``rstreams serve rstreams.demo:app`` work from an
installed wheel); this module re-exports it, so scripts, tests and commands
that name ``examples.demo:app`` in a checkout serve the very same router.
"""

from __future__ import annotations

from rstreams.demo import (
    BLOB_BATCH_BYTES,
    BLOB_BATCH_ELEMENTS,
    ECHO_PREFETCH,
    MAX_BLOB_SIZE,
    MAX_INTERVAL,
    MIN_INTERVAL,
    RANGE_BLOCK,
    RANGE_IDLE_RUN,
    app,
    chat,
    sensors,
)

__all__ = [
    "app",
    "chat",
    "sensors",
    "RANGE_BLOCK",
    "RANGE_IDLE_RUN",
    "MAX_BLOB_SIZE",
    "BLOB_BATCH_BYTES",
    "BLOB_BATCH_ELEMENTS",
    "MIN_INTERVAL",
    "MAX_INTERVAL",
    "ECHO_PREFETCH",
]
