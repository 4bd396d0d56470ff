"""The MicroMsg2 sans-I/O modules import neither trio nor socket nor logging.

Checked twice, as for the core and Relink: statically, by reading the
imports of every module of ``bridges/micromsg2`` but the trio adapter's
and the mapping's (listed below), and dynamically, by driving a client and a server
through a handshake, a subscription, a message and an ack in a fresh
interpreter where the I/O modules cannot be imported.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import bridges.micromsg2
from tests.protocol.test_no_io_imports import forbidden_imports, run_with_io_blocked

MICROMSG2_DIR = Path(bridges.micromsg2.__file__).parent
# The trio adapter, the mapping, the command line, and the package that re-exports them.
NOT_SANS_IO = {
    "__init__.py",
    "_settings.py",
    "_trio.py",
    "_stream.py",
    "_connect.py",
    "_broker.py",
    "_client.py",
    "_bridge.py",
    "_cli.py",
}
SANS_IO = sorted(path.name for path in MICROMSG2_DIR.glob("*.py") if path.name not in NOT_SANS_IO)


def test_the_sans_io_modules_are_all_there() -> None:
    assert {"_codec.py", "_connection.py", "_filters.py", "_handshake.py", "_windows.py"} <= set(SANS_IO)


@pytest.mark.parametrize("name", SANS_IO)
def test_micromsg2_sans_io_modules_import_no_io_modules(name: str) -> None:
    assert forbidden_imports((MICROMSG2_DIR / name).read_text(encoding="utf-8")) == []


MICROMSG2_BODY = """
    from bridges.micromsg2._connection import Connection
    from bridges.micromsg2._extensions import ExtensionSpec
    from bridges.micromsg2._state import Role

    client = Connection(Role.CLIENT, required=[ExtensionSpec(name="pubsub")])
    server = Connection(Role.SERVER, optional=[ExtensionSpec.batch_ack(4)])
    events = []

    def pump():
        for _ in range(4):
            data = client.data_to_send()
            if data:
                server.receive_data(data)
            events.extend(server.events())
            data = server.data_to_send()
            if data:
                client.receive_data(data)
            events.extend(client.events())

    pump()
    client.subscribe("topic/x", "price>=N10")
    pump()
    server.send_message("topic/x", b"hello", properties={"price": 12})
    pump()
    client.acknowledge()
    pump()
    kinds = [type(event).__name__ for event in events]
    assert kinds == ["HandshakeCompleted", "HandshakeCompleted", "Subscribe", "MessageReceived",
                     "Acknowledged"], kinds
    assert "bridges.emp" not in sys.modules and "rstreams._version" not in sys.modules
    assert not BLOCKED & set(sys.modules), sorted(BLOCKED & set(sys.modules))
    print("sans-I/O ok")
"""


def test_micromsg2_machine_runs_where_io_modules_cannot_be_imported() -> None:
    import rstreams.protocol

    packages = [
        ("rstreams", Path(rstreams.protocol.__file__).parent.parent),
        ("bridges", MICROMSG2_DIR.parent),
        ("bridges.micromsg2", MICROMSG2_DIR),
    ]
    assert run_with_io_blocked(packages, MICROMSG2_BODY).strip() == "sans-I/O ok"
