"""Runnable examples; the demo app is ``rstreams.demo:app`` (``rstreams demo``), re-exported here as ``examples.demo:app``."""
