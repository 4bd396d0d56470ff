"""The Epoxy sans-I/O modules, Bond's encodings included, import neither trio nor socket nor logging.

Checked twice, as for the core and EMP: statically, by reading the imports
of every sans-I/O module of ``bridges/epoxy`` (all of ``bond/``, and the
frames, structs, events, state, connection and errors), and dynamically, by
driving a client and a server in a fresh interpreter where the I/O modules
cannot be imported. There ``rstreams``, ``bridges`` and ``bridges.epoxy``
are registered bare (``bridges.epoxy``'s ``__init__`` re-exports the trio
adapter too), while ``bridges.epoxy.bond``'s own ``__init__`` runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import bridges.epoxy
from tests.protocol.test_no_io_imports import forbidden_imports, run_with_io_blocked

EPOXY_DIR = Path(bridges.epoxy.__file__).parent
SANS_IO = {"_connection.py", "_frames.py", "_state.py", "_structs.py", "_events.py", "_errors.py"}
MODULES = sorted(path for path in EPOXY_DIR.rglob("*.py") if path.parent.name == "bond" or path.name in SANS_IO)


def test_the_package_has_the_expected_modules() -> None:
    names = {path.relative_to(EPOXY_DIR).as_posix() for path in MODULES}
    assert names >= SANS_IO | {"bond/__init__.py", "bond/_reader.py", "bond/_api.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.relative_to(EPOXY_DIR).as_posix())
def test_epoxy_modules_import_no_io_modules(path: Path) -> None:
    assert forbidden_imports(path.read_text(encoding="utf-8")) == []


EPOXY_BODY = """
    from bridges.epoxy import bond
    from bridges.epoxy._connection import Connection
    from bridges.epoxy._events import Response
    from bridges.epoxy._state import Role
    from bridges.epoxy._structs import Error, ErrorCode
    from bridges.epoxy._errors import ErrorResponse, PeerProtocolError

    class Params(bond.Struct):
        x: int = bond.field(1, bond.INT32)

    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(client.data_to_send())
    server.events()
    server.accept()
    client.receive_data(server.data_to_send())
    client.events()
    first = client.send_request("svc", "Echo", Params(x=1))
    second = client.send_request("svc", "Missing", Params(x=2))
    server.receive_data(client.data_to_send())
    requests = server.events()
    assert [r.decode(Params).x for r in requests] == [1, 2], requests
    server.send_response(first, requests[0].payload)
    server.send_error_response(second, Error(error_code=ErrorCode.METHOD_NOT_FOUND))
    client.receive_data(server.data_to_send())
    echo, missing = client.events()
    assert echo == Response(conversation_id=1, payload=requests[0].payload), echo
    assert missing.decode_error().error_code == ErrorCode.METHOD_NOT_FOUND
    assert bond.to_json(bond.read_tree(bond.serialize(Params(x=3), bond.Protocol.FAST), bond.Protocol.FAST)) == {"1": 3}
    assert str(ErrorResponse(missing.decode_error())).startswith("error response METHOD_NOT_FOUND")
    assert PeerProtocolError(11).error_code == 11
    assert "rstreams._version" not in sys.modules and "bridges.emp" not in sys.modules
    assert "bridges.epoxy._trio" not in sys.modules
    assert not BLOCKED & set(sys.modules), sorted(BLOCKED & set(sys.modules))
    print("sans-I/O ok")
"""


def test_epoxy_runs_where_io_modules_cannot_be_imported() -> None:
    import rstreams.protocol

    packages = [
        ("rstreams", Path(rstreams.protocol.__file__).parent.parent),
        ("bridges", EPOXY_DIR.parent),
        ("bridges.epoxy", EPOXY_DIR),
    ]
    assert run_with_io_blocked(packages, EPOXY_BODY).strip() == "sans-I/O ok"
