"""The bridge kit: what every bridge to another protocol is built on.

A bridge is a sans-I/O codec and state machine for its protocol, plus a
mapping onto rstreams and a command line. Everything else is here, written
once (``docs/bridges/README.md`` shows how EMP uses it):

* :class:`BridgeConnection`: the trio side of a sans-I/O machine: a reader
  that reads only while someone waits for input, one writer with bounded
  waits, the end recorded once and raised as a typed error in every waiter,
  keepalive pings, the handshake's timeout;
* :class:`InboundQueue`: demand-paced inbound delivery (TCP carries the
  pressure back to a protocol without flow control);
* :class:`SendWindow`: windowed outbound delivery (at most W unacknowledged,
  for protocols whose acknowledgements are demand);
* :class:`RequestSlots`: bounded concurrent requests;
* :class:`PendingCall`, :class:`PendingCalls`, :func:`pace_calls`: a request
  and the response it awaits, a connection's calls by id, and calls sent
  only within a subscriber's demand;
* :func:`open_tcp_stream`, :func:`open_connection`, :func:`start_connection`:
  connecting, over TCP or TLS;
* :class:`BridgeServer`, :class:`ListenerService`: accepting, and serving
  behind ``rstreams serve --PROTOCOL HOST:PORT``;
* :class:`BridgePeer`, :func:`open_bridge_peer`: a bridge's client as an
  :class:`rstreams.Peer`, what ``rstreams.connect(url)`` returns;
* :func:`collect_elements`: an app's stream as one response;
* :func:`open_app_session`, :class:`TopicPublisher`: an app in this
  process, and values published into its topics (:class:`TopicRefused`
  when one is not taken, for a protocol that can tell its peer);
* :class:`MemoryBudget`: the one memory budget of a connection, which
  every buffer takes from (``LinkSettings.max_connection_memory``);
* :class:`BatchesWithinBudget`: an app's elements taken into that budget
  (and :func:`next_ask`, how many to ask for)
  only once it has room for them (a publisher's first element included,
  whose size nobody knows when it is asked for);
* :class:`DropAllowance`: the elements a filter drops, paced as if sent;
* :class:`LazyCli`: a bridge's command-line hooks, imported when called;
* :class:`LinkSettings`, :class:`BridgeError`.
"""

from ._admit import BatchesWithinBudget, next_ask
from ._app import (
    COLLECT_COPIES,
    COLLECT_MOST_ASKED,
    COLLECT_PREFETCH,
    ResponseTooLarge,
    check_name_fits,
    collect_elements,
)
from ._budget import BudgetStatistics, MemoryBudget
from ._calls import PendingCall, PendingCalls, pace_calls
from ._client import BridgePeer, open_bridge_peer
from ._config import KiB, LinkSettings, MiB, check_count
from ._connection import MEMORY_BUDGET_EXCEEDED, BridgeConnection, SansIOMachine
from ._errors import copy_error
from ._hooks import LazyCli
from bridges import BridgeError
from ._inbound import ITEM_COST, InboundQueue
from ._net import open_connection, open_tcp_stream, start_connection
from ._peer_log import MAX_LOGGED_TEXT, MAX_PEER_WARNINGS, PeerWarnings, set_peer_warnings, warn_about_peer
from ._server import BridgeServer, ListenerService
from ._slots import RequestSlots
from ._topics import TopicPublisher, TopicRefused, open_app_session
from ._drops import DROP_TICK, DropAllowance
from ._window import SendWindow

__all__ = [
    "BatchesWithinBudget",
    "BridgeConnection",
    "BridgeError",
    "TopicRefused",
    "BridgePeer",
    "BudgetStatistics",
    "BridgeServer",
    "COLLECT_COPIES",
    "check_name_fits",
    "COLLECT_MOST_ASKED",
    "COLLECT_PREFETCH",
    "ITEM_COST",
    "InboundQueue",
    "KiB",
    "LazyCli",
    "LinkSettings",
    "check_count",
    "ListenerService",
    "MAX_LOGGED_TEXT",
    "MAX_PEER_WARNINGS",
    "MEMORY_BUDGET_EXCEEDED",
    "MemoryBudget",
    "MiB",
    "PendingCall",
    "PendingCalls",
    "PeerWarnings",
    "RequestSlots",
    "ResponseTooLarge",
    "SansIOMachine",
    "SendWindow",
    "TopicPublisher",
    "collect_elements",
    "DROP_TICK",
    "DropAllowance",
    "copy_error",
    "next_ask",
    "open_app_session",
    "open_bridge_peer",
    "pace_calls",
    "set_peer_warnings",
    "warn_about_peer",
    "open_connection",
    "open_tcp_stream",
    "start_connection",
]
