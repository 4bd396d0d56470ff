"""Runnable examples; ``examples.demo:app`` is the demo app (``rstreams serve examples.demo:app``)."""
