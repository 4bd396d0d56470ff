"""TCP keepalive on a bridge's socket: how a peer that vanished without a word is found.

MicroMsg2 and Epoxy have no ping, so a client that lost power, or sits
behind a network partition, sends no FIN and no RST: its connection looks
open for ever, and on a server it holds a connection slot and its memory
until the server restarts (a long-running broker collects them up to
``max_connections``, then turns everyone away as busy). The kernel can tell:
with ``SO_KEEPALIVE`` it probes a connection that has been silent for
``idle`` seconds, every ``PROBE_INTERVAL`` seconds, and after
``PROBE_COUNT`` unanswered probes it resets the connection, which the
reader then reports as lost. Protocols that do ping (EMP, Relink) get it
too: it costs nothing while data flows, and covers them between pings.
"""

from __future__ import annotations

import socket

import trio

from rstreams.support import tcp_socket

__all__ = ["PROBE_COUNT", "PROBE_INTERVAL", "keep_tcp_alive"]

#: Seconds between two keepalive probes, once the first is due.
PROBE_INTERVAL = 10
#: Unanswered probes after which the kernel gives the connection up.
PROBE_COUNT = 6


def keep_tcp_alive(stream: trio.abc.Stream, idle: int | None) -> bool:
    """Turn TCP keepalive on for ``stream``'s socket (TLS unwrapped), the
    first probe after ``idle`` seconds of silence; return whether it was
    set. None, a stream without a TCP socket (memory streams, pipes), or a
    platform or socket that refuses: nothing changes, and no error."""
    if idle is None:
        return False
    sock = tcp_socket(stream)
    if sock is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; macOS has TCP_KEEPALIVE for the first
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, PROBE_INTERVAL)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, PROBE_COUNT)
    except OSError:
        return False  # closed already, or the kernel says no
    return True
