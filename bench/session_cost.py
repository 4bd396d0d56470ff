"""CPU cost of a subscribe round trip in the session layer, each side alone.

``bench/protocol_cost.py`` measures the sans-I/O machine; this adds the
session's own work on top, still without I/O or task switches, so that a
change to either can be judged in microseconds per round trip without the
noise of two processes sharing cores:

* server: a :class:`~rstreams.Session` serving the benchmark's app
  (``bench/_bench_app.py``) takes a read of ``--batch`` subscribes to
  ``range?count=1`` through its dispatch (as its reader does: events in
  batches, each subscribe answered by the publisher at once) and collects
  the write that answers them;
* client: a :class:`~rstreams.Session` opens ``--batch`` fetches (what
  ``Session.fetch`` does before it parks), collects the write, and
  dispatches the read of their answers (what its reader does).

The peer of each is a bare :class:`~rstreams.protocol.Connection`, not
timed. Prints microseconds per round trip, from the fastest tenth of the rounds.

Usage: ``python bench/session_cost.py [--rounds N] [--batch N]``
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import trio  # noqa: E402

from rstreams import Session  # noqa: E402
from rstreams._subscribe import _Fetch  # noqa: E402
from protocol_cost import fastest_tenth  # noqa: E402
from rstreams.protocol import Connection  # noqa: E402

NAME = "range?count=1"


def _session(app: object) -> tuple[Session, socket.socket]:
    # A real socket, never read or written: the session only needs one to exist.
    ours, theirs = socket.socketpair()
    return Session(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), app=app), theirs  # type: ignore[arg-type]


def _handshake(session: Session, peer: Connection) -> None:
    session._conn.receive_data(bytes(peer.data_to_send(1 << 20)))
    session._conn.events()
    peer.receive_data(bytes(session._collect()))
    peer.events()


def _read(session: Session, data: bytes, batch: int) -> None:
    """What Session._receive_once does with one read (no I/O)."""
    session._unsent_answers()
    conn = session._conn
    conn.receive_data(data)
    while True:
        events = conn.events(batch)
        if not events:
            break
        session._dispatching = True
        try:
            session._dispatch(events)
        finally:
            session._dispatching = False


def server_round(session: Session, peer: Connection, batch: int) -> float:
    for _ in range(batch):
        peer.subscribe(NAME, 1)
    data = bytes(peer.data_to_send(1 << 20))
    start = time.perf_counter()
    _read(session, data, 32)
    written = session._collect_buffers()  # (as the reader collects its direct write)
    if session._answered_now:
        session._note_answered()  # (as the reader does after its write)
    elapsed = time.perf_counter() - start
    peer.receive_data(b"".join(written))
    peer.events()
    return elapsed


def client_round(session: Session, peer: Connection, batch: int) -> float:
    start = time.perf_counter()
    fetches = []
    for _ in range(batch):
        fetch = _Fetch(NAME, 1)
        fetch.subscriber = session._open_subscription(fetch, 1)
        fetches.append(fetch)
    written = session._collect_buffers()  # (as the writer collects, on plain TCP)
    elapsed = time.perf_counter() - start
    peer.receive_data(b"".join(written))
    for event in peer.events():
        peer.accept(event.subscriber, 8)  # type: ignore[union-attr]
        peer.send_packed(event.subscriber, bytes(8))  # type: ignore[union-attr]
        peer.complete(event.subscriber)  # type: ignore[union-attr]
    answers = bytes(peer.data_to_send(1 << 20))
    start = time.perf_counter()
    _read(session, answers, 32)
    elapsed += time.perf_counter() - start
    for fetch in fetches:
        assert fetch._ended and fetch.elements() == [bytes(8)]
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="batches to run (default 2000)")
    parser.add_argument("--batch", type=int, default=64, help="round trips per batch (default 64)")
    args = parser.parse_args(argv)
    from _bench_app import app

    server, _keep1 = _session(app)
    client, _keep2 = _session(None)
    server_peer, client_peer = Connection(), Connection()
    _handshake(server, server_peer)
    _handshake(client, client_peer)
    results = {}
    for side, session, peer, run in (("server", server, server_peer, server_round), ("client", client, client_peer, client_round)):
        timings = []
        for i in range(args.rounds):
            timings.append(run(session, peer, args.batch))
        # The fastest tenth of the rounds, after a tenth for warming up.
        results[side] = fastest_tenth(timings[len(timings) // 10 :]) / args.batch * 1e6
    print(f"server {results['server']:.2f} us, client {results['client']:.2f} us per round trip (session, no I/O)")


if __name__ == "__main__":
    main()
