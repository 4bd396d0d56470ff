"""pyzmq (libzmq, C, with its own I/O thread): what a Python user who cares
about speed picks, measured on the same cases as rstreams.

Every socket keeps libzmq's and pyzmq's defaults (SNDHWM and RCVHWM 1000
messages, no other option set) except ``LINGER`` on the server's stream
sockets, which only bounds how long a close may wait for a peer that died.
One ZeroMQ message per element, one frame per message: no batching of
elements into messages, no multipart.

The server (``python bench/_zmq.py PORT``) binds three sockets and prints
their ports, one line each, in this order; each is served by its own thread
with blocking calls (pyzmq releases the GIL while it waits, so an idle
thread costs nothing):

* **streams** (REP): a request is a JSON object ``{"name", "endpoint",
  "copy"}``, where ``name`` is an rstreams-style publisher name
  (``blob?count=N&size=S`` or ``stamps?rate=R&count=N``). The server replies
  ``ok``, connects a fresh PUSH socket to ``endpoint`` (a PULL socket the
  client bound for this stream), sends the elements with one ``send`` each,
  then one empty message as end of stream, and closes the PUSH socket.
  ``blob`` elements are cut from bytes built ahead of time (256 distinct
  ones below 64 KiB, memoryviews of one pattern above), as in the rstreams
  demo; with ``copy`` false they are sent with ``copy=False`` (pyzmq sends
  above 64 KiB without a copy by default anyway). ``stamps`` sends
  ``time.perf_counter_ns()`` as 8 big-endian bytes at the given rate, on the
  same schedule as the rstreams ``stamps`` publisher.
* **REQ/REP** (REP): every request is answered with 8 zero bytes.
* **DEALER/ROUTER** (ROUTER): every ``[identity, request]`` is answered with
  ``[identity, 8 zero bytes]``.

The client functions open their sockets per measurement (one Context per
process) and time the same span as the rstreams client: from the request to
the end of stream, or from the first request to the last answer.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import zmq

HOST = "127.0.0.1"
SPLIT = 64 * 1024
ANSWER = b"\x00" * 8
#: Bounds a close on a peer that went away; never reached in a run.
SERVER_LINGER_MS = 10_000

_context: zmq.Context | None = None  # type: ignore[type-arg]


def context() -> zmq.Context:  # type: ignore[type-arg]
    global _context
    if _context is None:
        _context = zmq.Context()
    return _context


# ---- the server -------------------------------------------------------------


def _elements(name: str) -> tuple[int, Any]:
    parts = urlsplit(name)
    params = dict(parse_qsl(parts.query))
    count = int(params.get("count", 10))
    if parts.path != "blob":
        raise ValueError(f"no such publisher: {name}")
    size = int(params.get("size", 1024))
    if size <= SPLIT:
        pattern = bytes(range(256)) * (size // 256 + 2)
        distinct = [pattern[offset : offset + size] for offset in range(256)]
        return count, lambda i: distinct[i % 256]
    view = memoryview(bytes(range(256)) * (size // 256 + 2))
    return count, lambda i: view[i % 256 : i % 256 + size]


def _send_stamps(push: zmq.Socket, rate: float, count: int) -> None:  # type: ignore[type-arg]
    """``count`` stamps at ``rate`` a second; a late wake-up sends every
    stamp already due, one send each, as the rstreams ``stamps`` does."""
    send = push.send
    start = time.monotonic()
    for index in range(count):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(time.perf_counter_ns().to_bytes(8, "big"))


def _serve_streams(socket: zmq.Socket) -> None:  # type: ignore[type-arg]
    ctx = context()
    while True:
        request = json.loads(socket.recv())
        name = request["name"]
        socket.send(b"ok")
        push = ctx.socket(zmq.PUSH)
        push.connect(request["endpoint"])
        try:
            if name.startswith("stamps"):
                params = dict(parse_qsl(urlsplit(name).query))
                _send_stamps(push, float(params.get("rate", 10_000)), int(params.get("count", 10_000)))
            else:
                count, element = _elements(name)
                send = push.send
                if request.get("copy", True):
                    for i in range(count):
                        send(element(i))
                else:
                    for i in range(count):
                        send(element(i), copy=False)
            push.send(b"")
        finally:
            push.close(linger=SERVER_LINGER_MS)


def _serve_rep(socket: zmq.Socket) -> None:  # type: ignore[type-arg]
    recv, send = socket.recv, socket.send
    while True:
        recv()
        send(ANSWER)


def _serve_router(socket: zmq.Socket) -> None:  # type: ignore[type-arg]
    recv, send = socket.recv_multipart, socket.send_multipart
    while True:
        identity, _request = recv()
        send([identity, ANSWER])


def serve(port: int) -> None:
    ctx = context()
    threads = []
    for kind, serve_one in ((zmq.REP, _serve_streams), (zmq.REP, _serve_rep), (zmq.ROUTER, _serve_router)):
        socket = ctx.socket(kind)
        if port:
            socket.bind(f"tcp://{HOST}:{port}")
            port += 1
            bound = int(socket.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        else:
            bound = socket.bind_to_random_port(f"tcp://{HOST}")
        print(bound, flush=True)
        threads.append(threading.Thread(target=serve_one, args=(socket,), daemon=True))
    for thread in threads:
        thread.start()
    try:
        threads[0].join()
    except KeyboardInterrupt:
        pass


# ---- the client -------------------------------------------------------------


def _request_stream(port: int, name: str, copy: bool) -> tuple[zmq.Socket, float]:  # type: ignore[type-arg]
    ctx = context()
    pull = ctx.socket(zmq.PULL)
    pull.linger = 0
    endpoint_port = pull.bind_to_random_port(f"tcp://{HOST}")
    req = ctx.socket(zmq.REQ)
    req.linger = 0
    req.connect(f"tcp://{HOST}:{port}")
    try:
        start = time.perf_counter()
        req.send(json.dumps({"name": name, "endpoint": f"tcp://{HOST}:{endpoint_port}", "copy": copy}).encode())
        if req.recv() != b"ok":
            raise RuntimeError("the pyzmq server refused the stream")
    finally:
        req.close()
    return pull, start


def stream(port: int, name: str, copy: bool = True) -> dict[str, float]:
    """Read ``name`` from the server's streams socket (its first port),
    one ``recv`` per element; ``copy=False`` receives ``zmq.Frame`` s."""
    pull, start = _request_stream(port, name, copy)
    elements = nbytes = 0
    try:
        recv = pull.recv
        if copy:
            while True:
                message = recv()
                if not message:
                    break
                elements += 1
                nbytes += len(message)
        else:
            while True:
                frame = recv(copy=False)
                size = len(frame)
                if not size:
                    break
                elements += 1
                nbytes += size
        elapsed = time.perf_counter() - start
    finally:
        pull.close()
    return {"elements": elements, "bytes": nbytes, "seconds": elapsed}


def latency(port: int, rate: float, count: int) -> dict[str, Any]:
    pull, _start = _request_stream(port, f"stamps?rate={rate}&count={count}", True)
    latencies: list[float] = []
    first_stamp = last = 0
    try:
        recv = pull.recv
        clock = time.perf_counter_ns
        while True:
            message = recv()
            now = clock()
            if not message:
                break
            stamp = int.from_bytes(message, "big")
            if not latencies:
                first_stamp = stamp
            latencies.append((now - stamp) / 1000.0)
            last = now
    finally:
        pull.close()
    return {"latencies_us": latencies, "span_s": (last - first_stamp) / 1e9}


def round_trips(ports: list[int], total: int, concurrency: int) -> dict[str, float]:
    """Sequential (``concurrency`` 1): REQ to the server's REQ/REP port (its
    second). Otherwise DEALER to its ROUTER port (its third), keeping
    ``concurrency`` requests in flight: send that many, then one more for
    each answer, in one thread. One round trip before the clock starts
    completes the connection (the ZMTP handshake), as the other systems'
    sessions are open before theirs."""
    ctx = context()
    if concurrency == 1:
        req = ctx.socket(zmq.REQ)
        req.linger = 0
        req.connect(f"tcp://{HOST}:{ports[1]}")
        try:
            req.send(b"one")
            req.recv()
            send, recv = req.send, req.recv
            start = time.perf_counter()
            for _ in range(total):
                send(b"one")
                recv()
            elapsed = time.perf_counter() - start
        finally:
            req.close()
        return {"elements": total, "bytes": 0, "seconds": elapsed}
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(f"tcp://{HOST}:{ports[2]}")
    try:
        dealer.send(b"one")
        dealer.recv()
        send, recv = dealer.send, dealer.recv
        start = time.perf_counter()
        sent = min(concurrency, total)
        for _ in range(sent):
            send(b"one")
        for _ in range(total):
            recv()
            if sent < total:
                send(b"one")
                sent += 1
        elapsed = time.perf_counter() - start
    finally:
        dealer.close()
    return {"elements": total, "bytes": 0, "seconds": elapsed}


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
