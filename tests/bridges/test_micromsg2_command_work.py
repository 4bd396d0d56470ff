"""One call of the machine's events() parses a bounded amount of the peer's commands."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.micromsg2 import Subscribe
from bridges.micromsg2._connection import COMMAND_WORK_PER_CALL
from bridges.micromsg2._frames import CommandFrame
from bridges.micromsg2._payloads import NamedArguments
from bridges.micromsg2._codec import encode_frame
from tests.bridges.micromsg2_pair import open_pair


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 200), st.integers(0, 32))
def test_filters_are_parsed_a_bounded_amount_per_call(count: int, conditions: int) -> None:
    pair = open_pair("pubsub")
    server = pair.server
    text = ";".join(f"k{n}=N{n}" for n in range(conditions)) or None
    data = b"".join(
        encode_frame(CommandFrame(command=NamedArguments.of("subscribe", {"destination": f"d{i}", **({"filter": text} if text else {})})))
        for i in range(count)
    )
    server.receive_data(data)
    subscribes = []
    while True:
        events = server.events()
        assert len(events) * (1 + conditions) <= COMMAND_WORK_PER_CALL + 1 + conditions
        subscribes += [event for event in events if isinstance(event, Subscribe)]
        if not server.events_pending:
            break
    assert [event.destination for event in subscribes] == [f"d{i}" for i in range(count)]
