"""Bond Epoxy for rstreams (sans-I/O half): Bond's encodings in ``bridges.epoxy.bond``."""

__all__: list[str] = []
