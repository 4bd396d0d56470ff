"""The Relink sans-I/O modules import neither trio nor socket nor logging.

Checked twice, as for the core: statically, by reading the imports of every
module of ``bridges/relink`` but the trio side's (listed below), and
dynamically, by driving a connector and a listener through a handshake, a
message, a drop and a resumption in a fresh interpreter where the I/O
modules cannot be imported.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import bridges.relink
from tests.protocol.test_no_io_imports import forbidden_imports, run_with_io_blocked

RELINK_DIR = Path(bridges.relink.__file__).parent
# The trio side: the adapter, the link handle, connector, listener, app
# server, client, command line and registration (each built on trio).
NOT_SANS_IO = {
    "_app.py",
    "_bridge.py",
    "_cli.py",
    "_client.py",
    "_connect.py",
    "_inbound_channel.py",
    "_serve.py",
    "_settings.py",  # on the kit's LinkSettings
    "_trio.py",
    "_trio_link.py",
}
SANS_IO = sorted(path.name for path in RELINK_DIR.glob("*.py") if path.name not in NOT_SANS_IO)


def test_the_sans_io_modules_are_all_there() -> None:
    assert {"_codec.py", "_connection.py", "_engine.py", "_link.py", "_handshake.py"} <= set(SANS_IO)


@pytest.mark.parametrize("name", SANS_IO)
def test_relink_sans_io_modules_import_no_io_modules(name: str) -> None:
    assert forbidden_imports((RELINK_DIR / name).read_text(encoding="utf-8")) == []


RELINK_BODY = """
    from bridges.relink._connection import Connection
    from bridges.relink._events import LinkRequested, MessageReceived, Resumed
    from bridges.relink._handshake import LinkConfig
    from bridges.relink._link import LinkRegistry, Role

    config = LinkConfig(connector_id_size=1, listener_id_size=1)
    registry = LinkRegistry(1_700_000_000_000_000)

    def run(link=None):
        connector = Connection(Role.CONNECTOR, config=config, endpoint_name="e", link=link)
        listener = Connection(Role.LISTENER, endpoints={"e": config}, epoch=registry.epoch)
        events = []
        for _ in range(6):
            data = connector.data_to_send()
            if data:  # b"" would mean end of file
                listener.receive_data(data)
            for event in listener.events():
                events.append(event)
                if isinstance(event, LinkRequested):
                    known = registry.lookup(event.request.old_epoch, event.request.old_link_id)
                    state = listener.accept_link(known) if known else listener.accept_link(new_link_id=1)
                    registry.add(state)
            data = listener.data_to_send()
            if data:
                connector.receive_data(data)
            events += connector.events()
        return connector, listener, events

    connector, listener, _ = run()
    connector.send_message(1, [b"a"])
    connector.send_message(1, [b"b"])
    listener.receive_data(connector.data_to_send()[:16])  # b is lost with the connection
    assert [e.parts for e in listener.events() if isinstance(e, MessageReceived)] == [(b"a",)]
    connector, listener, events = run(connector.link)
    assert [e.parts for e in events if isinstance(e, MessageReceived)] == [(b"b",)], events
    assert sum(isinstance(e, Resumed) for e in events) == 2, events
    assert "bridges.emp" not in sys.modules and "rstreams._version" not in sys.modules
    assert not BLOCKED & set(sys.modules), sorted(BLOCKED & set(sys.modules))
    print("sans-I/O ok")
"""


def test_relink_machine_runs_where_io_modules_cannot_be_imported() -> None:
    import rstreams.protocol

    packages = [
        ("rstreams", Path(rstreams.protocol.__file__).parent.parent),
        ("bridges", RELINK_DIR.parent),
        ("bridges.relink", RELINK_DIR),
    ]
    assert run_with_io_blocked(packages, RELINK_BODY).strip() == "sans-I/O ok"
