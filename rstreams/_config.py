"""Session settings: every limit and timeout, named and explained, in one place."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ._auth import Authenticate, Authorize
from ._loopback import DEFAULT_LOOPBACK_CONGESTION_CONTROL, check_congestion_control
from .protocol import DEFAULT_CONNECTION_MEMORY, DEFAULT_LIMITS, LocalProtocolError, ProtocolLimits, check_token

__all__ = [
    "SessionConfig",
    "DEFAULT_CONFIG",
    "DEFAULT_SERVER_CONFIG",
    "DEFAULT_IDLE_TIMEOUT",
    "NAME_MEMORY_ALLOWANCE",
    "STREAM_MEMORY_COST",
    "ConnectionMemoryTooSmall",
]

KiB = 1024

#: What one open stream (a publication serving the peer, or one of our
#: subscriptions) is charged against its connection's outbound half of
#: ``max_connection_memory``, so that the number of streams a peer can open
#: is bounded too. Measured, not guessed: a server's resident memory grows
#: by 5.6 KB per ``range?count=1000000000`` stream left waiting for demand
#: (10,000 of them: +54 MB, RSS of ``rstreams serve``), most of it the
#: publisher's task and its coroutine frames, with the session's and the
#: protocol's records of the stream. (It was 8.1 KB while the demo's
#: ``range`` built a run of elements before any demand; a publisher that
#: holds more of its own before demand costs more than this.)
STREAM_MEMORY_COST = 6 * KiB

#: Of ``STREAM_MEMORY_COST``, what a stream's publisher name (with its
#: parsed parameters) may hold without being charged beyond it: the measured
#: stream's name (about 450 bytes, counted by ``SubscribeRequest.name_memory``
#: as 565) and the constant's half a kilobyte above what was measured. A
#: longer name is charged what it holds beyond this, as the session counts it.
NAME_MEMORY_ALLOWANCE = 1 * KiB


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """How a session reads, writes, buffers and gives up.

    Attributes:
        limits: what the peer may send, and how elements are split.
        handshake_timeout: seconds to wait for the peer's hello; a peer that
            stays silent longer is sent goodbye and dropped.
        drain_timeout: on a graceful close, seconds to keep writing queued
            elements before the goodbye (what is still queued then is
            dropped and counted in ``statistics().elements_dropped``).
        goodbye_timeout: seconds to wait for the peer's goodbye after ours.
            (These three and ``busy_poll`` are finite, >= 0.)
        read_size: bytes asked of the transport per receive (at most
            ``max_connection_memory``, as ``write_size``).
        write_size: about how many bytes the writer coalesces per send.
        max_queued_bytes: per publication, bytes queued but not yet written
            before ``sink.send`` waits: with demand, this bounds the memory a
            fast publisher can pin behind a slow connection (an empty
            element counts one byte, so a queue of them is bounded too). Twice
            ``write_size`` by default, so that a publisher fills the next
            write while the writer sends the current one: with the two
            equal, a write took about the whole queue and, whenever the
            writer came round before the publisher, the next write carried
            what the last had left over (one 1 KiB element after every
            255, a third of the writes).
        max_unsent_control: bytes of answers to what the peer sent (control
            messages: subscribed and onError answering its subscribes, our
            requests and cancels; and the elements of publishers that
            answered a subscribe at once) queued and not yet handed to the
            transport, above which the reader stops reading until the
            writer has taken them: a peer
            that asks and never reads the answers cannot make the session
            buffer them without bound; its own sends block instead. (One
            read's answers may go past it, and the writer holds what it
            took while the peer does not read: at most about twice this.)
            A peer that sends more requests than this many bytes of answers
            before it reads any blocks itself: generous, so that bursts of
            thousands of subscribes written at once still get through.
        max_connection_memory: the memory budget of this connection, in
            bytes (default :data:`~rstreams.DEFAULT_CONNECTION_MEMORY`, 64
            MiB), in two fixed halves. The outbound half bounds what this
            side holds for the peer: control messages, every publication's
            queued elements together, what the writer holds unsent, and
            ``STREAM_MEMORY_COST`` per open stream; once it is full every
            publisher waits (backpressure, never an error), and a subscribe
            that would take the streams' share (three quarters of the
            half) beyond it is answered onError ``memory budget exceeded:
            ...``. The inbound half bounds what the peer sent and this side
            holds: the unfinished split elements of all streams together
            and the unparsed rest of a message (more is the peer's doing:
            goodbye ``protocol error: memory budget exceeded: ...``), and
            elements received and not yet taken by the application (the
            reader stops reading while they and the rest fill the half).
            ``limits.max_element_size`` and ``limits.max_message_size``
            must fit in the inbound half. See docs/PROTOCOL.md section 5.
        busy_poll: seconds the reader polls the socket before it sleeps
            when the peer's next message is due (a ``fetch`` waits for its
            answer; the peer's subscribes were just answered; a stream's
            elements just arrived), as long as such messages have lately
            come within that time (plain TCP only; 0 turns it off). Spends
            up to that much CPU per read to save waking a sleeping core,
            which on loopback or a fast LAN is a third or more of a round
            trip (see ``_direct_socket``).
        precise_timers: a session that serves publishers (it has an app)
            makes the trio run's timers wake to the microsecond as it starts
            (:func:`~rstreams.use_precise_timers`, Linux): a publisher paced
            with ``trio.sleep_until`` at 10,000 elements a second sends each
            on time instead of a dozen at once every millisecond, whether
            the program was started with ``trio.run`` or ``rstreams.run``.
            It costs a wake-up for each deadline that falls due. False
            leaves the run's timers as they are (the whole run's: any other
            session, or ``rstreams.run``, may still have turned them on).
        loopback_congestion_control: the TCP congestion control of a
            connection whose peer is on this machine's loopback (Linux), if
            the host's differs: default ``"reno"``, which does not pace. A
            host that uses BBR paces loopback to the rate the peer last
            read at, which halved the throughput of large elements here;
            connections to other addresses keep the host's choice. None
            keeps the host's choice everywhere. See ``rstreams/_loopback.py``.
        idle_timeout: seconds after which a session whose peer sent nothing
            (keepalive pings and pongs aside) and that has no stream open
            either way is closed, with goodbye ``idle timeout: ...``; None
            (the default for sessions we open) never. Servers default to
            :data:`DEFAULT_IDLE_TIMEOUT` (see :data:`DEFAULT_SERVER_CONFIG`).
            Checked every quarter of it while streams are open, so a session
            closes between ``idle_timeout`` and 1.25 times it after its last
            stream ended.
        keepalive_interval: announce the keepalive extension in our hello
            and, when the peer's lists it too, ping it this many seconds
            after its last pong; None: do not announce it (the peer may
            still not ping us then). Default 30 s: below the idle timeouts
            of common NATs and load balancers (60 s and up), at the cost of
            a 3-byte ping and pong per half minute.
        keepalive_timeout: seconds a ping may wait for its pong; then the
            peer is taken for dead, the session says goodbye
            (``keepalive timeout: ...``) and closes, and its streams end
            with ``SessionBroken``. A dead peer is found at most
            ``keepalive_interval + keepalive_timeout`` after it last
            answered (default 30 s: a minute in all).
        token: a bearer token to carry in our hello (a client's; never in
            repr or logs); None: none.
        authenticate: a server's hook, awaited with the peer's token (None
            without one) and :class:`~rstreams.PeerInfo` once its hello is
            in and before any of its subscribes is answered; returns the
            :class:`~rstreams.Principal`, or None to refuse the peer with
            goodbye ``authentication failed``. Bounded by
            ``handshake_timeout`` (running out refuses too). None: every
            peer is admitted.
        authorize: called with the principal and each publisher name (the
            path, without the query) the peer subscribes to; False answers
            onError ``not authorized: NAME`` and the session stays. Needs
            ``authenticate``.
    """

    limits: ProtocolLimits = field(default_factory=lambda: DEFAULT_LIMITS)
    handshake_timeout: float = 10.0
    drain_timeout: float = 5.0
    goodbye_timeout: float = 5.0
    read_size: int = 256 * KiB
    write_size: int = 256 * KiB
    max_queued_bytes: int = 512 * KiB
    max_unsent_control: int = 4096 * KiB
    max_connection_memory: int = DEFAULT_CONNECTION_MEMORY
    busy_poll: float = 200e-6
    precise_timers: bool = True
    loopback_congestion_control: str | None = DEFAULT_LOOPBACK_CONGESTION_CONTROL
    idle_timeout: float | None = None
    keepalive_interval: float | None = 30.0
    keepalive_timeout: float = 30.0
    token: str | None = field(default=None, repr=False)
    authenticate: Authenticate | None = field(default=None, repr=False)
    authorize: Authorize | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("idle_timeout", "keepalive_interval", "keepalive_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:  # also refuses nan
                raise ValueError(f"{name} must be positive (or None to turn it off)")
        for name in ("handshake_timeout", "drain_timeout", "goodbye_timeout", "busy_poll"):
            value = getattr(self, name)
            # Finite: each bounds a wait (rule 10: goodbye waits a bounded
            # time) or a spin; nan would fail inside trio, mid-session.
            if not 0 <= value < math.inf:  # also refuses nan
                raise ValueError(f"{name} must not be negative, nan or infinite, got {value!r}")
        for name in ("read_size", "write_size", "max_queued_bytes", "max_unsent_control", "max_connection_memory"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("read_size", "write_size"):
            # A read's buffer and a write's collected bytes are the
            # connection's too (10**30 died in os.read, mid-session).
            value = getattr(self, name)
            if value > self.max_connection_memory:
                raise ValueError(
                    f"{name} ({value} bytes) must fit in max_connection_memory ({self.max_connection_memory} bytes)"
                )
        half = self.max_connection_memory // 2
        if self.token is not None:
            # Hello's own rule, said when the config is made, not when a
            # session opens.
            try:
                check_token(self.token)
            except LocalProtocolError as exc:
                raise ValueError(f"token: {exc}") from None
        for name in ("authenticate", "authorize"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(f"{name} must be an async function or None, got {getattr(self, name)!r}")
        for name in ("max_element_size", "max_message_size"):
            value = getattr(self.limits, name)
            if value > half:
                raise ValueError(
                    f"limits.{name} ({value} bytes) must fit in the inbound half of max_connection_memory"
                    f" ({self.max_connection_memory} bytes, half {half}): raise the budget or lower the limit"
                )
        check_congestion_control(self.loopback_congestion_control)
        if self.authorize is not None and self.authenticate is None:
            raise ValueError("authorize needs authenticate (it is given the principal authenticate returned)")

    @classmethod
    def for_connection_memory(cls, size: int, **settings: Any) -> SessionConfig:
        """A config with ``max_connection_memory=size`` and the other
        ``settings``; below the default budget, the element and message
        limits shrink to fit its inbound half, as the config requires (one
        largest element per half).

        What ``rstreams serve --max-connection-memory`` uses, and a bridge
        for the in-process session it serves an app through, so that the
        app's side of a bridge connection obeys the bridge's budget too.

        Raises:
            ConnectionMemoryTooSmall: ``size`` leaves no room for one split
                part per half (a ``ValueError``).
            ValueError: another setting is invalid.
        """
        limits = settings.pop("limits", DEFAULT_LIMITS)
        half = size // 2
        if limits.max_element_size > half or limits.max_message_size > half:
            try:
                limits = replace(
                    limits,
                    max_element_size=min(limits.max_element_size, half),
                    max_message_size=min(limits.max_message_size, half),
                )
            except ValueError:
                raise ConnectionMemoryTooSmall(
                    f"a connection memory budget of {size} bytes is too small for one split part per half"
                ) from None
        return cls(limits=limits, max_connection_memory=size, **settings)


class ConnectionMemoryTooSmall(ValueError):
    """A connection memory budget too small for one split part per half
    (:meth:`SessionConfig.for_connection_memory`): its own type, so that a
    caller can word it in its own terms without matching the text."""


DEFAULT_CONFIG = SessionConfig()

#: Seconds a server keeps a connection that sends nothing and holds no
#: stream open. Five minutes: a client that connects and then waits for a
#: person (a browser tab, a REPL) keeps its connection through any short
#: pause, while connections that were opened and forgotten (a leaked client,
#: a scanner that got as far as hello) give their slot of ``max_connections``
#: back within minutes. A client that wants to hold an unused connection
#: longer subscribes to something, or reconnects.
DEFAULT_IDLE_TIMEOUT = 300.0

#: What a ``Server`` uses when given no config: the defaults, plus the idle
#: timeout a server needs against peers that hold connections for nothing.
DEFAULT_SERVER_CONFIG = SessionConfig(idle_timeout=DEFAULT_IDLE_TIMEOUT)
