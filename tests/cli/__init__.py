"""Tests of the command line (``rstreams serve / sub / pub``) and the demo app.

A package, like ``tests/runtime``, so that its module names cannot collide
with same-named test modules elsewhere under ``tests/``.
"""
