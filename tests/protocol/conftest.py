"""Fixtures for the sans-I/O protocol tests (plain synchronous tests, no trio)."""

from __future__ import annotations

import pytest

from helpers import SMALL_LIMITS, ConnectionPair


@pytest.fixture
def pair() -> ConnectionPair:
    """A client and a server that have exchanged hellos."""
    connections = ConnectionPair()
    connections.open()
    return connections


@pytest.fixture
def small_pair() -> ConnectionPair:
    """Like ``pair``, with ``SMALL_LIMITS`` on both sides."""
    connections = ConnectionPair(SMALL_LIMITS)
    connections.open()
    return connections
