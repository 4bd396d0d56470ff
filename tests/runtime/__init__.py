"""Tests of the trio runtime (sessions, publishers, subscriptions, servers).

This directory is a package so that its module names (``test_session`` ...)
cannot collide with same-named modules elsewhere under ``tests/``.
"""
