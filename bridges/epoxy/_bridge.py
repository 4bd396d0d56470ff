"""Epoxy's entry in the bridge registry: its URL schemes, ``rstreams serve --epoxy``, ``rstreams epoxy``.

Registered in ``pyproject.toml`` under the entry-point group
``rstreams.bridges`` as ``epoxy = "bridges.epoxy:BRIDGE"``. The command-line
parts (``_cli``, which uses ``rstreams.cli``) are imported only when the
command line asks for them: the library never imports the CLI.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from rstreams.support import Bridge, BridgeService, Scheme, ServeContext

from ..kit import LazyCli, ListenerService
from ._app import EpoxyAppServer
from ._settings import DEFAULT_SETTINGS
from ._client import connect_epoxy_url, publish_epoxy_url
from ._settings import DEFAULT_PORT, DEFAULT_TLS_PORT

__all__ = ["BRIDGE"]

#: Its command-line hooks, in ``_cli`` (imported only when called).
_CLI = LazyCli(__package__ + "._cli")


def _services(context: ServeContext, args: argparse.Namespace) -> Sequence[BridgeService]:
    addresses = getattr(args, "epoxy", None)
    if not addresses:
        return []
    settings = replace(
        DEFAULT_SETTINGS,
        max_connection_memory=context.max_connection_memory,
        loopback_congestion_control=context.loopback_congestion_control,
        idle_timeout=context.idle_timeout,
    )
    server = EpoxyAppServer(context.app, settings=settings, max_connections=context.max_connections)
    return [ListenerService(server, addresses, context.ssl_context, scheme="epoxy", secure_scheme="epoxys")]


BRIDGE = Bridge(
    name="epoxy",
    summary="Bond Epoxy: an app as the service rstreams.Publishers (Subscribe, Publish)",
    schemes=(
        Scheme(name="epoxy", default_port=DEFAULT_PORT, form="epoxy://HOST[:PORT]"),
        Scheme(name="epoxys", secure=True, default_port=DEFAULT_TLS_PORT, form="epoxys://HOST[:PORT]"),
    ),
    connect=connect_epoxy_url,
    add_serve_arguments=_CLI.add_serve_arguments,
    services=_services,
    add_commands=_CLI.add_commands,
    error_status=_CLI.error_status,
    publish=publish_epoxy_url,
)
