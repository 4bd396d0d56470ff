"""``bridges.machine``: the output, the events-before-a-violation rule and the state table every bridge's machine shares.

A toy machine reads one byte a message: ``g`` is a good message (an event),
``x`` a violation. The rule: ``events`` returns every event parsed before a
violation, the violation is raised by the next call (or by this one when no
event came before it), ``_fail`` runs once, when it is found, and nothing
after it is parsed. Each of the four bridges' machines is also checked
against the rule over its own wire.

``StateTable``: a toy table answers its rows, refuses a step it has no row
for with the error of whose step it was (this program's, or the peer's),
and reads the mapping it was given, not a copy; each bridge refuses its
own step before its handshake through its table, with its own error.
"""

from __future__ import annotations

import enum
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bridges.machine
from bridges.emp import Connection as EmpConnection
from bridges.emp import LocalProtocolError as EmpLocalProtocolError
from bridges.emp import RemoteProtocolError as EmpRemoteProtocolError
from bridges.epoxy import Connection as EpoxyConnection
from bridges.epoxy import LocalProtocolError as EpoxyLocalProtocolError
from bridges.epoxy import RemoteProtocolError as EpoxyRemoteProtocolError
from bridges.epoxy import Role as EpoxyRole
from bridges.machine import ProtocolMachine, StateTable
from bridges.micromsg2 import Connection as MicroMsg2Connection
from bridges.micromsg2 import LocalProtocolError as MicroMsg2LocalProtocolError
from bridges.micromsg2 import RemoteProtocolError as MicroMsg2RemoteProtocolError
from bridges.micromsg2 import Role as MicroMsg2Role
from bridges.relink import Connection as RelinkConnection
from bridges.relink import LinkConfig
from bridges.relink import LocalProtocolError as RelinkLocalProtocolError
from bridges.relink import RemoteProtocolError as RelinkRemoteProtocolError
from bridges.relink import Role as RelinkRole
from tests.bridges.epoxy_helpers import EpoxyPair
from tests.bridges.micromsg2_pair import open_pair
from tests.bridges.relink_pair import Pair as RelinkPair
from tests.protocol.test_no_io_imports import forbidden_imports


class Violation(Exception):
    pass


class ToyMachine(ProtocolMachine[int, Violation]):
    def __init__(self) -> None:
        super().__init__(Violation, output=b"hello")
        self.received = bytearray()
        self.failures: list[Violation] = []
        self.failed = False

    def receive_data(self, data: bytes) -> None:
        self.received += data

    def events(self) -> list[int]:
        return self._take_events()

    def _parse(self, events: list[int]) -> None:
        while self.received and not self.failed:
            byte = self.received.pop(0)
            if byte != ord("g"):
                raise Violation(f"byte {byte}")
            events.append(byte)

    def _fail(self, error: Violation) -> None:
        self.failures.append(error)
        self.failed = True
        self._outbound += b"error"


def test_the_module_imports_no_io_modules() -> None:
    assert forbidden_imports(Path(bridges.machine.__file__).read_text(encoding="utf-8")) == []


def test_output_is_taken_whole() -> None:
    machine = ToyMachine()
    assert machine.has_data_to_send
    assert machine.data_to_send() == b"hello"
    assert not machine.has_data_to_send and machine.data_to_send() == b""


def test_events_before_a_violation_come_first_and_the_error_next() -> None:
    machine = ToyMachine()
    machine.receive_data(b"ggxgg")
    assert machine.events() == [ord("g")] * 2
    assert len(machine.failures) == 1  # failed when found, before the events were returned
    assert machine.data_to_send() == b"helloerror"
    with pytest.raises(Violation) as caught:
        machine.events()
    assert caught.value is machine.failures[0]
    assert machine.events() == []  # raised once; nothing after the violation is parsed
    assert len(machine.failures) == 1


def test_a_violation_with_nothing_before_it_is_raised_at_once() -> None:
    machine = ToyMachine()
    machine.receive_data(b"xg")
    with pytest.raises(Violation):
        machine.events()
    assert len(machine.failures) == 1 and machine.events() == []


def test_other_errors_are_not_caught() -> None:
    class Broken(ToyMachine):
        def _parse(self, events: list[int]) -> None:
            events.append(1)
            raise KeyError("a bug, not the peer's violation")

    machine = Broken()
    with pytest.raises(KeyError):
        machine.events()
    assert machine.failures == []


@given(st.lists(st.sampled_from(b"gx"), max_size=30), st.lists(st.integers(1, 5), max_size=10))
def test_any_input_in_any_pieces(wire: list[int], cuts: list[int]) -> None:
    """Whatever the bytes and however they arrive, the events are the good
    messages before the first violation, in order, and the violation is raised
    exactly once after them."""
    data = bytes(wire)
    machine = ToyMachine()
    seen: list[int] = []
    raised = 0
    offset = 0
    for size in [*cuts, len(data)]:
        machine.receive_data(data[offset : offset + size])
        offset += size
        for _ in range(2):
            try:
                seen += machine.events()
            except Violation:
                raised += 1
    good_before = len(data) if b"x" not in data else data.index(b"x")
    assert seen == [ord("g")] * good_before
    assert raised == (1 if b"x" in data else 0)
    assert len(machine.failures) == raised


# ---- the four bridges' machines follow the rule -------------------------------------------

# What each machine needs to reach its open state from a freshly made peer,
# and then bytes that are valid (one event or more) followed by garbage.
# Only the order and the single raise are checked here: what each machine
# queues and why is tested with its own protocol.


def _emp() -> tuple[EmpConnection, type[Exception], bytes]:
    client, server = EmpConnection(), EmpConnection()
    server.receive_data(client.data_to_send())
    server.events()
    client.receive_data(server.data_to_send())
    client.events()
    client.send_ping()
    return server, EmpRemoteProtocolError, client.data_to_send() + b"\xff" * 64


def _epoxy() -> tuple[EpoxyConnection, type[Exception], bytes]:
    pair = EpoxyPair()
    pair.handshake()
    pair.client.send_event("svc", "m", b"payload")
    return pair.server, EpoxyRemoteProtocolError, pair.client.data_to_send() + b"\xff" * 64


def _micromsg2() -> tuple[MicroMsg2Connection, type[Exception], bytes]:
    pair = open_pair()
    pair.server.send_message("t", b"payload")
    return pair.client, MicroMsg2RemoteProtocolError, pair.server.data_to_send() + b"\xff" * 64


def _relink() -> tuple[RelinkConnection, type[Exception], bytes]:
    pair = RelinkPair()
    pair.handshake()
    pair.connector.send_message(5, [b"part"])
    return pair.listener, RelinkRemoteProtocolError, pair.connector.data_to_send() + b"\xff" * 64


@pytest.mark.parametrize("make", [_emp, _epoxy, _micromsg2, _relink], ids=["emp", "epoxy", "micromsg2", "relink"])
def test_each_bridge_returns_the_events_before_a_violation_then_raises_once(make) -> None:  # type: ignore[no-untyped-def]
    machine, error, wire = make()
    machine.receive_data(wire)
    events = machine.events()
    assert events, "the valid message before the garbage is returned first"
    with pytest.raises(error):
        machine.events()
    assert machine.state.name == "ERROR"
    assert machine.events() == []


# ---- the state table ----------------------------------------------------------


class Door(enum.Enum):
    SHUT = "shut"
    OPEN = "open"


class Push(enum.Enum):
    OPEN = "open the door"
    KNOCK = "knock"


class Ours(Exception):
    pass


class Theirs(Exception):
    pass


def test_a_table_answers_its_rows_and_refuses_the_rest_by_whose_step_it_was() -> None:
    rows = {(Door.SHUT, Push.OPEN): Door.OPEN, (Door.SHUT, Push.KNOCK): Door.SHUT}
    table = StateTable(rows, local_error=Ours, remote_error=Theirs)
    assert table.after_local(Door.SHUT, Push.OPEN) is Door.OPEN
    assert table.after_received(Door.SHUT, Push.KNOCK, "a knock") is Door.SHUT
    with pytest.raises(Ours, match="^cannot open the door in state OPEN$") as ours:
        table.after_local(Door.OPEN, Push.OPEN)
    assert ours.value.__cause__ is None and ours.value.__suppress_context__  # (no KeyError behind it)
    with pytest.raises(Theirs, match="^unexpected a knock in state OPEN$"):
        table.after_received(Door.OPEN, Push.KNOCK, "a knock")


def test_a_table_reads_the_rows_it_was_given_not_a_copy() -> None:
    rows = {(Door.SHUT, Push.OPEN): Door.OPEN}
    table = StateTable(rows, local_error=Ours, remote_error=Theirs)
    del rows[Door.SHUT, Push.OPEN]
    with pytest.raises(Ours):
        table.after_local(Door.SHUT, Push.OPEN)
    rows[Door.OPEN, Push.KNOCK] = Door.SHUT
    assert table.after_received(Door.OPEN, Push.KNOCK, "a knock") is Door.SHUT


@pytest.mark.parametrize(
    ("send", "error", "message"),
    [
        (lambda: EmpConnection().send_ping(), EmpLocalProtocolError, "cannot send ping, pong or data in state HANDSHAKING"),
        (
            lambda: EpoxyConnection(EpoxyRole.CLIENT).send_event("svc", "m", b"p"),
            EpoxyLocalProtocolError,
            "cannot send a message in state CLIENT_AWAITING_CONFIG",
        ),
        (
            lambda: MicroMsg2Connection(MicroMsg2Role.CLIENT).send_message("t", b"p"),
            MicroMsg2LocalProtocolError,
            "cannot send a frame in state AWAITING_REPLY",
        ),
        (
            lambda: RelinkConnection(RelinkRole.CONNECTOR, config=LinkConfig()).send_message(5, [b"x"]),
            RelinkLocalProtocolError,
            "cannot send packet in state AWAIT_LISTENER_VERSION",
        ),
    ],
    ids=["emp", "epoxy", "micromsg2", "relink"],
)
def test_each_bridge_refuses_its_own_step_through_its_table(send, error, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=f"^{message}$"):
        send()
