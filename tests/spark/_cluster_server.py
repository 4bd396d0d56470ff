"""The rstreams side of test_cluster.py, in its own process (internal).

    python _cluster_server.py ROWS

Fills a 2-partition topic ``events`` with ROWS elements of 100 bytes (round
robin), serves it on 127.0.0.1 and prints the port. Every peer is
recorded as it connects (the ``authenticate`` hook sees its address) with
the process that owns the peer's socket and its ancestors, found in ``/proc`` while the
connection is open. A line on stdin asks for the record: it prints one JSON
line ``{"statistics", "peers", "subscriptions"}``. EOF on stdin stops it.

A separate process, so that the topic's gigabyte is not in the driver's
memory that the test measures.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio

import rstreams

ELEMENT_SIZE = 100


def socket_owner(local_port: int) -> int | None:
    """The pid owning the TCP socket bound to 127.0.0.1:``local_port`` (our peer's side), from /proc."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == local_port and fields[9] != "0":
                inode = fields[9]
                break
        if inode:
            break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return int(pid)
        except OSError:
            continue
    return None


def ancestors(pid: int) -> list[int]:
    """The parent, grandparent, ... of ``pid``, from /proc (read while it runs)."""
    chain = []
    while pid > 1:
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain


async def main(rows: int) -> None:
    app = rstreams.Router()
    topic = rstreams.Topic("events", partitions=2, capacity=rows)
    topic.mount(app)
    route = app.resolve("events")
    assert route is not None
    subscriptions: list[str] = []

    async def recorded(sink: rstreams.Sink, request: rstreams.SubscribeRequest) -> None:
        subscriptions.append(request.name)
        await route.publisher(sink, request)  # type: ignore[call-arg]

    app.add("events", recorded)
    padding = b"x" * (ELEMENT_SIZE - 12)
    for low in range(0, rows, 100_000):
        await topic.publish_many([b"%012d" % i + padding for i in range(low, min(rows, low + 100_000))])
    peers: list[dict[str, Any]] = []

    async def authenticate(token: str | None, peer: rstreams.PeerInfo) -> rstreams.Principal:
        port = int(peer.address.rsplit(":", 1)[1])
        pid = socket_owner(port)
        peers.append({"address": peer.address, "pid": pid, "ancestors": ancestors(pid) if pid else []})
        return rstreams.Principal(name=peer.address)

    server = rstreams.Server(app, authenticate=authenticate)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        print(rstreams.listener_port(listeners[0]), flush=True)
        while await trio.to_thread.run_sync(sys.stdin.readline):
            record = {"statistics": server.statistics(), "peers": peers, "subscriptions": subscriptions}
            print(json.dumps(record, default=str), flush=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
