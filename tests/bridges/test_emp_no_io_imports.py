"""The EMP sans-I/O modules import neither trio nor socket nor logging.

Checked twice, as for the core: statically, by reading the imports of each
sans-I/O module, and dynamically, by driving two machines in a fresh
interpreter where the I/O modules cannot be imported. (``bridges/emp/__init__``
re-exports the trio adapter too, so it is not sans-I/O and is not imported
there: the packages are registered bare.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import bridges.emp
from tests.protocol.test_no_io_imports import forbidden_imports, run_with_io_blocked

EMP_DIR = Path(bridges.emp.__file__).parent
SANS_IO = ["_codec.py", "_events.py", "_connection.py", "_state.py", "_errors.py"]


@pytest.mark.parametrize("name", SANS_IO)
def test_emp_sans_io_modules_import_no_io_modules(name: str) -> None:
    assert forbidden_imports((EMP_DIR / name).read_text(encoding="utf-8")) == []


def test_the_check_would_notice() -> None:
    assert forbidden_imports("import trio\nimport socket\nimport logging") == ["trio", "socket", "logging"]


EMP_BODY = """
    from bridges.emp._connection import Connection
    from bridges.emp._events import CompressionScheme, Data, Error

    client, server = Connection(), Connection()
    server.receive_data(client.data_to_send())
    server.events()
    client.receive_data(server.data_to_send())
    client.events()
    request_id = client.send_request(b"range?count=3", compression=CompressionScheme.GZIP)
    server.receive_data(client.data_to_send())
    [request] = server.events()
    assert request.body == b"range?count=3", request
    server.send_response(request_id, b"x" * 100_000, compression=CompressionScheme.GZIP)
    client.receive_data(server.data_to_send())
    [response] = client.events()
    assert isinstance(response, Data) and response.body == b"x" * 100_000
    client.receive_data(b"\\x00\\x00\\x00\\x08\\x07\\x00\\x00\\x00")
    try:
        client.events()
    except Exception as exc:
        assert exc.code == 3, exc
    else:
        raise AssertionError("an unknown message type was accepted")
    assert "bridges.emp._trio" not in sys.modules and "rstreams._version" not in sys.modules
    assert not BLOCKED & set(sys.modules), sorted(BLOCKED & set(sys.modules))
    print("sans-I/O ok")
"""


def test_emp_machine_runs_where_io_modules_cannot_be_imported() -> None:
    import rstreams.protocol

    packages = [
        ("rstreams", Path(rstreams.protocol.__file__).parent.parent),
        ("bridges", EMP_DIR.parent),
        ("bridges.emp", EMP_DIR),
    ]
    assert run_with_io_blocked(packages, EMP_BODY).strip() == "sans-I/O ok"
