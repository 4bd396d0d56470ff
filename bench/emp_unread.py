"""EMP (or Epoxy) clients that ask and never read: what do they cost the server? (issue 18, item 5)

Runs an EMP (``--protocol epoxy``: Epoxy) app server (``rstreams.demo:app``, the kit's serving with
``LinkSettings.max_connection_memory=BUDGET``) in a subprocess, opens
CONNECTIONS raw EMP connections from this process, sends REQUESTS requests
for ``blob?count=4&size=1048576`` (4 MiB each) on each and reads nothing,
and prints the server's VmRSS (``/proc/PID/status``) before and at its
highest. Then the clients read: how many responses each got.

    python bench/emp_unread.py [--connections 8] [--requests 32] [--budget 67108864]
    python bench/emp_unread.py --bridges /tmp/old-tree   # an older bridges/ to compare

Memory can only be measured, not asserted with care for time, so this is a
bench; ``tests/bridges/test_memory_budget.py`` asserts the bound itself.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import msgpack

from typing import Any

from _proc import rss_bytes
from bridges.emp import Connection, Data, Hello
from bridges.epoxy import PUBLISHERS_SERVICE, ConfigReceived, Response, Role, SubscribeRequest
from bridges.epoxy import Connection as EpoxyMachine

SERVER = r"""
import sys, trio
sys.path.insert(0, sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
from rstreams.demo import app
budget = {"max_connection_memory": int(sys.argv[1])} if int(sys.argv[1]) else {}
if sys.argv[3] == "emp":
    from bridges.emp import EmpAppServer, EmpConfig
    server = EmpAppServer(app, config=EmpConfig(**budget))
else:
    from bridges.epoxy import EpoxyAppServer, EpoxySettings
    server = EpoxyAppServer(app, settings=EpoxySettings(**budget))
async def main():
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        print(listeners[0].socket.getsockname()[1], flush=True)
trio.run(main)
"""


def open_client(port: int, protocol: str) -> tuple[socket.socket, Any]:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    machine = Connection() if protocol == "emp" else EpoxyMachine(Role.CLIENT)
    sock.sendall(machine.data_to_send())
    while not any(isinstance(event, (Hello, ConfigReceived)) for event in machine.events()):
        machine.receive_data(sock.recv(65536))
    return sock, machine


def ask(machine: Any, name: str) -> None:
    if isinstance(machine, Connection):
        machine.send_request(name.encode())
    else:
        machine.send_request(PUBLISHERS_SERVICE, "Subscribe", SubscribeRequest(publisher=name))


def read_responses(sock: socket.socket, machine: Any, count: int, deadline: float) -> tuple[int, int]:
    """(responses with elements, error responses)."""
    elements = errors = 0
    sock.settimeout(30)
    while elements + errors < count and time.monotonic() < deadline:
        data = sock.recv(1 << 20)
        if not data:
            break
        machine.receive_data(data)
        for event in machine.events():
            if isinstance(event, Data) and event.request_response is not None:
                ok = "elements" in msgpack.unpackb(event.body)
            elif isinstance(event, Response):
                ok = not event.is_error
            else:
                continue
            elements += ok
            errors += not ok
    return elements, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--budget", type=int, default=0, help="max_connection_memory; 0: the default")
    parser.add_argument("--name", default="blob?count=4&size=1048576")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds to watch VmRSS")
    parser.add_argument("--protocol", choices=("emp", "epoxy"), default="emp")
    parser.add_argument("--bridges", default="", help="a directory holding another bridges/ package")
    args = parser.parse_args()
    env = dict(os.environ)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(args.budget), args.bridges, args.protocol], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        time.sleep(0.5)
        before = rss_bytes(server.pid)
        clients = [open_client(port, args.protocol) for _ in range(args.connections)]
        sent = 0
        for sock, machine in clients:
            for _ in range(args.requests):
                ask(machine, args.name)
            data = machine.data_to_send()
            sock.sendall(data)
            sent += len(data)
        peak = before
        end = time.monotonic() + args.settle
        while time.monotonic() < end:
            peak = max(peak, rss_bytes(server.pid))
            time.sleep(0.1)
        print(f"server VmRSS before: {before / 2**20:.1f} MiB; highest while {args.connections} clients x "
              f"{args.requests} requests ({sent} bytes sent) did not read: {peak / 2**20:.1f} MiB "
              f"(growth {(peak - before) / 2**20:.1f} MiB)")
        deadline = time.monotonic() + 120
        got = [read_responses(sock, machine, args.requests, deadline) for sock, machine in clients]
        print(f"then each client read (responses with elements, error responses): {got}")
        for sock, _ in clients:
            sock.close()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
