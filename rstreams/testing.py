"""Helpers for testing code built on rstreams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from ._config import DEFAULT_CONFIG, SessionConfig
from ._publish import Router
from ._session import Session, open_stream_session

__all__ = ["session_pair"]


@asynccontextmanager
async def session_pair(
    client_app: Router | None = None,
    server_app: Router | None = None,
    *,
    config: SessionConfig = DEFAULT_CONFIG,
    lockstep: bool = False,
) -> AsyncIterator[tuple[Session, Session]]:
    """Two sessions connected in memory: ``(client, server)``.

    ``lockstep=True`` uses trio's lockstep streams (no buffering at all),
    which shakes out ordering assumptions.
    """
    pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    client_stream, server_stream = pair()
    async with open_stream_session(server_stream, app=server_app, config=config) as server:
        async with open_stream_session(client_stream, app=client_app, config=config) as client:
            yield client, server
