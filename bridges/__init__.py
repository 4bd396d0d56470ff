"""Bridges from existing protocols to rstreams publishers and subscribers.

One subpackage per protocol (EMP, MicroMsg2, Relink, Bond Epoxy), each a
sans-I/O codec and state machine with a thin trio adapter on top. None has
landed yet; this package exists so that the layout is fixed from the start.
"""

__all__: list[str] = []
