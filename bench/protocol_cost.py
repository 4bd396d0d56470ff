"""Pure protocol cost of a subscribe round trip, both sides, without trio.

A micro-benchmark for the sans-I/O machine alone: what a subscribe round trip
(subscribe, subscribed, one element, onComplete) costs in CPU before any I/O
or task switching is added, so changes to ``rstreams/protocol`` can be judged
on their own. Prints microseconds per round trip for the three phases, from
the fastest tenth of the batches (wall time, which a shared machine only
inflates):

* client: ``subscribe`` and encoding it (``data_to_send``);
* server: parsing the subscribe, ``accept``, ``send_packed``, ``complete``
  and writing the answers (``data_to_send``);
* client: parsing the answers through ``Connection.events()``.

Usage: ``python bench/protocol_cost.py [--rounds N] [--batch N] [--warmup N]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rstreams.protocol import Connection  # noqa: E402


def _handshake() -> tuple[Connection, Connection]:
    client, server = Connection(), Connection()
    server.receive_data(bytes(client.data_to_send(1 << 20)))
    server.events()
    client.receive_data(bytes(server.data_to_send(1 << 20)))
    client.events()
    return client, server


def round_trips(client: Connection, server: Connection, n: int) -> tuple[float, float, float, int]:
    """Run ``n`` round trips as one batch; return the seconds of each phase and the client's event count."""
    t0 = time.perf_counter()
    for _ in range(n):
        client.subscribe("range?count=1", 1)
    data = bytes(client.data_to_send(1 << 20))
    t1 = time.perf_counter()
    server.receive_data(data)
    for event in server.events():
        server.accept(event.subscriber, 8)  # type: ignore[union-attr]
        server.send_packed(event.subscriber, bytes(8))  # type: ignore[union-attr]
        server.complete(event.subscriber)  # type: ignore[union-attr]
    out = bytes(server.data_to_send(1 << 20))
    t2 = time.perf_counter()
    client.receive_data(out)
    events = client.events()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, len(events)


def fastest_tenth(seconds: list[float]) -> float:
    """The mean of the fastest tenth of the batches: other processes on a
    shared machine only ever slow a batch down, and the mean of them all
    moved by a third between runs of the same code."""
    fastest = sorted(seconds)[: max(1, len(seconds) // 10)]
    return sum(fastest) / len(fastest)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="batches to run (default 300)")
    parser.add_argument("--batch", type=int, default=64, help="round trips per batch (default 64)")
    parser.add_argument("--warmup", type=int, default=20, help="batches not counted (default 20)")
    args = parser.parse_args(argv)
    client, server = _handshake()
    samples: tuple[list[float], list[float], list[float]] = ([], [], [])
    events = 0
    for i in range(args.rounds):
        *phases, events = round_trips(client, server, args.batch)
        if i >= args.warmup:
            for k, seconds in enumerate(phases):
                samples[k].append(seconds)
    subscribe, serve, parse = (fastest_tenth(phase) / args.batch * 1e6 for phase in samples)
    print(
        f"client subscribe+encode {subscribe:.2f} us, server {serve:.2f} us,"
        f" client parse {parse:.2f} us per rt; events/batch {events}"
    )


if __name__ == "__main__":
    main()
