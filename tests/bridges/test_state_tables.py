"""Every transition table, the core's and each bridge's, is keyed by StateEnum members.

A table is looked up for every message each protocol sends or receives.
``rstreams.protocol.StateEnum`` hashes its members by identity; a plain
``enum.Enum`` would run its Python-level ``__hash__`` twice per lookup.
"""

from __future__ import annotations

import enum

import pytest

from bridges.emp import _state as emp_state
from bridges.epoxy import _state as epoxy_state
from bridges.micromsg2 import _state as micromsg2_state
from bridges.relink import _state as relink_state
from rstreams.protocol import StateEnum
from rstreams.protocol import _state as core_state

TABLES = {
    "core connection": core_state.CONNECTION_TRANSITIONS,
    "core subscription": core_state.SUBSCRIPTION_TRANSITIONS,
    "core publication": core_state.PUBLICATION_TRANSITIONS,
    "EMP": emp_state.CONNECTION_TRANSITIONS,
    "Epoxy": epoxy_state.TRANSITIONS,
    "MicroMsg2": micromsg2_state.CONNECTION_TRANSITIONS,
    "Relink": relink_state.CONNECTION_TRANSITIONS,
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_table_is_keyed_and_valued_by_state_enums(name: str) -> None:
    table = TABLES[name]
    assert table
    for (state, event), target in table.items():
        for member in (state, event, target):
            assert isinstance(member, StateEnum), f"{name}: {member!r} is not a StateEnum"
            assert type(member).__hash__ is object.__hash__


def test_state_enum_members_hash_by_identity_and_compare_as_enum_members() -> None:
    class Light(StateEnum):
        RED = "red"
        GREEN = "green"

    assert hash(Light.RED) == object.__hash__(Light.RED) and hash(Light.RED) != hash(Light.GREEN)
    assert Light("red") is Light.RED and Light.RED != "red" and isinstance(Light.RED, enum.Enum)
    assert {(Light.RED, Light.GREEN): 1}[(Light("red"), Light["GREEN"])] == 1
