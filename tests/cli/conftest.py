"""Fixtures: the demo app in process, and the ``rstreams`` command as a user runs it.

The repository root goes first on ``sys.path`` so that ``examples.demo`` is
importable however pytest was started (``pytest`` or ``python -m pytest``).

``demo_url`` serves ``examples.demo:app`` in process on 127.0.0.1 (port 0).
``demo_server`` runs ``rstreams serve examples.demo:app`` as a subprocess, with
the console script installed next to the running interpreter and the
repository root as the working directory, exactly as a user would type it.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

import rstreams

from ._support import ROOT, ServeProcess

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import examples.demo  # noqa: E402  (needs the path above)


@pytest.fixture
async def demo_url(nursery: trio.Nursery) -> AsyncIterator[str]:
    """``tcp://127.0.0.1:PORT`` of the demo app served in this process."""
    listeners = await nursery.start(rstreams.serve_tcp, examples.demo.app, "127.0.0.1", 0)
    yield f"tcp://127.0.0.1:{rstreams.listener_port(listeners[0])}"


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """``rstreams serve examples.demo:app --tcp 127.0.0.1:0``, shared by a module's tests."""
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with ServeProcess.start(["serve", "examples.demo:app", "--tcp", "127.0.0.1:0"], log) as server:
        yield server


@pytest.fixture
def fresh_demo_server(tmp_path: Path) -> Iterator[ServeProcess]:
    """A demo server of the test's own, for tests that stop or kill it."""
    with ServeProcess.start(["serve", "examples.demo:app", "--tcp", "127.0.0.1:0"], tmp_path / "stderr.log") as server:
        yield server
