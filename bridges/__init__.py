"""Bridges from existing protocols to rstreams publishers and subscribers.

One subpackage per protocol (EMP, and after it Relink, MicroMsg2 and Bond
Epoxy), each a sans-I/O codec and state machine, a mapping onto rstreams
publishers and subscribers, and a command line, all built on the bridge kit
(``bridges.kit``). Each registers itself under the entry-point group
``rstreams.bridges``, which is how ``rstreams.connect`` and the ``rstreams``
command find it: nothing in the runtime names a bridge.

``BridgeError``, the base of every bridge's errors, is in ``bridges.errors``,
and ``ProtocolMachine``, the base of every bridge's sans-I/O machine, in
``bridges.machine`` with ``StateTable``, the one way a bridge's state table
refuses a step (modules without trio, for the bridges' sans-I/O code); all
three are re-exported here.
"""

from .errors import BridgeError
from .machine import ProtocolMachine, StateTable

__all__ = ["BridgeError", "ProtocolMachine", "StateTable"]
