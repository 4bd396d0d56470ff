"""A congestion control that does not pace, for TCP connections over loopback.

Linux lets a host pick its TCP congestion control, and many now pick BBR
(cloud images, container hosts; the machine our benchmarks run on). BBR
*paces*: it sends no faster than the delivery rate it has measured, using a
timer in the kernel. Over a network that is what keeps queues short. Over
loopback there is no network: the "delivery rate" is how fast the peer
process happens to read, and a reader that takes turns between reading and
working (every Python reader, ours included) holds that estimate down, so
the sender then waits on its own pacing timer with the peer idle.

Measured on such a host (Linux 6.18, BBR by default), two processes, 1 MiB
writes read 256 KiB at a time: a plain Python socket pair moved 2,200–3,300
MB/s under BBR and 5,400–6,800 MB/s under Reno or CUBIC; rstreams streaming
1 MiB elements, 1,700–2,200 MB/s against 2,700–3,800, and beside two busy
loops 850–1,150 against 1,300–1,800, with a third less CPU per MiB on both
sides (see bench/NOTES.md).

So a connection whose peer is on this machine's loopback is switched to a
congestion control that does not pace (``SessionConfig
.loopback_congestion_control``, Reno by default: every Linux kernel has it
and lets unprivileged processes choose it). Connections to any other
address keep the host's choice, which is the operator's to make. Where the
option does not exist (not Linux) or the kernel refuses, nothing changes.
"""

from __future__ import annotations

import ipaddress
import re
import socket

from ._logs import tcp_socket

__all__ = ["DEFAULT_LOOPBACK_CONGESTION_CONTROL", "check_congestion_control", "is_loopback_address", "unpace_loopback"]

#: The congestion control rstreams gives TCP connections over loopback.
DEFAULT_LOOPBACK_CONGESTION_CONTROL = "reno"

# Linux's TCP_CA_NAME_MAX, the buffer a congestion control's name is read into.
_NAME_MAX = 16
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % (_NAME_MAX - 1), re.ASCII)
_TCP_CONGESTION: int | None = getattr(socket, "TCP_CONGESTION", None)


def check_congestion_control(name: object) -> None:
    """Raise ValueError unless ``name`` could name a congestion control (as
    the kernel's do: letters, digits, ``_``, ``-`` and ``.``, at most 15) or
    is None."""
    if name is not None and not (type(name) is str and _NAME.fullmatch(name)):
        raise ValueError(f"loopback_congestion_control must be a congestion control's name, such as 'reno', or None; got {name!r}")


def is_loopback_address(host: str) -> bool:
    """Whether ``host`` (an address as ``getpeername`` gives it) is this
    machine's loopback: 127.0.0.0/8, ``::1`` or an IPv4-mapped 127 address."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def unpace_loopback(stream: object, algorithm: str | None = DEFAULT_LOOPBACK_CONGESTION_CONTROL) -> bool:
    """Give ``stream``'s TCP socket the congestion control ``algorithm`` if
    its peer is on loopback (see the module docstring); return whether it
    was changed. ``algorithm`` None, a stream without a TCP socket (memory
    streams, pipes), a peer elsewhere, a platform without the option, or a
    kernel that refuses: nothing changes, and no error."""
    if algorithm is None or _TCP_CONGESTION is None:
        return False
    sock = tcp_socket(stream)
    if sock is None:
        return False
    try:
        peer = sock.getpeername()
        if not is_loopback_address(str(peer[0])):
            return False
        wanted = algorithm.encode("ascii")
        current = sock.getsockopt(socket.IPPROTO_TCP, _TCP_CONGESTION, _NAME_MAX).split(b"\0", 1)[0]
        if current == wanted:
            return False
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_CONGESTION, wanted)
    except (OSError, UnicodeError):
        return False  # closed, not TCP, or the kernel says no: keep what it has
    return True
