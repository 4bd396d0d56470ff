"""Bridges from existing protocols to rstreams publishers and subscribers.

One subpackage per protocol (EMP, MicroMsg2, Relink, Bond Epoxy), each a
sans-I/O codec and state machine with a thin trio adapter on top, and a
mapping onto rstreams publishers and subscribers. EMP (``bridges.emp``) is
the first and sets the pattern; the shared error base is in
``bridges._common``.
"""

__all__: list[str] = []
