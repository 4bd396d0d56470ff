"""CPU per message of the bridges' sans-I/O machines alone, sending and receiving.

    python bench/bridge_protocol_cost.py [ROOT] [--rounds N] [--batch N] [--size B] [--protocols relink,micromsg2]

``bench/bridge_stream.py`` measures a stream through each bridge end to
end, two processes and their scheduling included; this measures only what
a change to a protocol machine changes: two machines of one protocol wired
back to back in this process, after their handshake, one sending ``--batch``
messages of ``--size`` bytes that the other receives and acknowledges (so
the windows never fill). Prints one JSON line per protocol: microseconds a
message to queue and encode it (send), and to decode it into an event
(receive), from the fastest tenth of the rounds after a tenth for warming
up (as ``protocol_cost.py`` does).

* ``relink``: a connector sends on channel 5; the listener consumes and
  flushes its acks.
* ``micromsg2``: a server sends MESSAGE frames to a client that negotiated
  ``batch-ack`` (max-count 1024) and acknowledges each batch.

ROOT (default: this checkout) is where ``bridges`` and ``rstreams`` are
imported from, for an A/B between two commits' copies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
parser.add_argument("--rounds", type=int, default=400, help="batches to run (default 400)")
parser.add_argument("--batch", type=int, default=500, help="messages per batch (default 500)")
parser.add_argument("--size", type=int, default=8, help="bytes per message (default 8)")
parser.add_argument("--protocols", default="relink,micromsg2", help="comma-separated (default relink,micromsg2)")
args = parser.parse_args()
sys.path.insert(0, str(Path(args.root).resolve()))

import bridges.micromsg2  # noqa: E402  (from ROOT)
import bridges.relink  # noqa: E402

class Machines(NamedTuple):
    """Two machines of one protocol after their handshake, and what a round does with them."""

    sender: Any
    receiver: Any
    send_one: Callable[[], object]  # queue one message on the sender
    received: type  # the receiver's event for a message
    acknowledge: Callable[[int], object]  # the receiver acknowledges that many


def exchange(a: Any, b: Any, on_event: Callable[[object], object] = lambda event: None) -> None:
    """Move bytes both ways until neither side has any (a handshake); each event to ``on_event``."""
    for _ in range(10):
        moved = False
        for source, target in ((a, b), (b, a)):
            data = source.data_to_send()
            if data:
                target.receive_data(data)
                moved = True
            for event in target.events():
                on_event(event)
        if not moved:
            return
    raise AssertionError("the machines never went quiet")


def timed_round(machines: Machines, batch: int) -> tuple[float, float]:
    """Send ``batch`` messages, then receive them: (seconds sending, seconds receiving); then the acks."""
    sender, receiver = machines.sender, machines.receiver
    send_one = machines.send_one
    start = time.perf_counter()
    for _ in range(batch):
        send_one()
    data = sender.data_to_send()
    sent = time.perf_counter()
    receiver.receive_data(data)
    events = receiver.events()
    received = time.perf_counter()
    assert sum(isinstance(event, machines.received) for event in events) == batch
    machines.acknowledge(batch)
    sender.receive_data(receiver.data_to_send())
    sender.events()
    return sent - start, received - sent


def relink_machines(payload: bytes) -> Machines:
    relink = bridges.relink
    config = relink.LinkConfig(connector_id_size=2, listener_id_size=1)
    registry = relink.LinkRegistry(1_700_000_000_000_000)
    sender = relink.Connection(relink.Role.CONNECTOR, config=config, endpoint_name="bench", send_window=65536)
    receiver = relink.Connection(
        relink.Role.LISTENER, endpoints={"bench": config}, epoch=registry.epoch, send_window=65536
    )

    def decide(event: object) -> None:
        if isinstance(event, relink.LinkRequested):
            receiver.accept_link(new_link_id=registry.new_link_id())

    exchange(sender, receiver, decide)
    assert sender.state is relink.ConnectionState.OPEN, sender.state

    def acknowledge(count: int) -> None:
        receiver.consume(5, sequence=None, count=count)
        receiver.flush_acks()

    return Machines(sender, receiver, lambda: sender.send_message(5, [payload]), relink.MessageReceived, acknowledge)


def micromsg2_machines(payload: bytes) -> Machines:
    micromsg2 = bridges.micromsg2
    spec = micromsg2.ExtensionSpec(name="batch-ack", properties=(("max-count", "1024"),))
    pubsub = micromsg2.ExtensionSpec(name="pubsub")
    client = micromsg2.Connection(micromsg2.Role.CLIENT, identity="bench", required=[pubsub])
    server = micromsg2.Connection(micromsg2.Role.SERVER, optional=[spec])
    exchange(client, server)
    return Machines(
        server, client, lambda: server.send_message("bench", payload), micromsg2.MessageReceived, client.acknowledge
    )


def main() -> None:
    # Only now: protocol_cost (next to this file) puts this checkout on
    # sys.path when imported, and ROOT's packages are loaded already.
    from protocol_cost import fastest_tenth

    assert Path(bridges.relink.__file__).is_relative_to(Path(args.root).resolve()), "bridges not from ROOT"
    payload = bytes(args.size)
    makers = {"relink": relink_machines, "micromsg2": micromsg2_machines}
    for name in args.protocols.split(","):
        machines = makers[name](payload)
        sends, receives = [], []
        for _ in range(args.rounds):
            send, receive = timed_round(machines, args.batch)
            sends.append(send)
            receives.append(receive)
        warm = args.rounds // 10
        print(
            json.dumps(
                {
                    "protocol": name,
                    "send_us": round(fastest_tenth(sends[warm:]) / args.batch * 1e6, 2),
                    "receive_us": round(fastest_tenth(receives[warm:]) / args.batch * 1e6, 2),
                    "size": args.size,
                }
            )
        )


if __name__ == "__main__":
    main()
