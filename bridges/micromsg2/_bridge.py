"""MicroMsg2's entry in the bridge registry: ``mm2://``, ``rstreams serve --micromsg2``, ``rstreams mm2``.

Registered in ``pyproject.toml`` under the entry-point group
``rstreams.bridges`` as ``mm2 = "bridges.micromsg2:BRIDGE"``. The
command-line parts (``_cli``, which uses ``rstreams.cli``) are imported only
when the command line asks for them: the library never imports the CLI.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from rstreams.support import Bridge, BridgeService, Scheme, ServeContext

from ..kit import LazyCli, ListenerService
from ._broker import BROKER_SETTINGS, MicroMsg2AppServer
from ._client import connect_mm2_url, publish_mm2_url

__all__ = ["BRIDGE"]

#: Its command-line hooks, in ``_cli`` (imported only when called).
_CLI = LazyCli(__package__ + "._cli")


def _services(context: ServeContext, args: argparse.Namespace) -> Sequence[BridgeService]:
    addresses = getattr(args, "micromsg2", None)
    if not addresses:
        return []
    settings = replace(
        BROKER_SETTINGS,
        max_connection_memory=context.max_connection_memory,
        loopback_congestion_control=context.loopback_congestion_control,
        idle_timeout=context.idle_timeout,
    )
    server = MicroMsg2AppServer(context.app, settings=settings, max_connections=context.max_connections)
    return [ListenerService(server, addresses, context.ssl_context, scheme="mm2", secure_scheme="mm2s")]


BRIDGE = Bridge(
    name="mm2",
    summary="MicroMsg2: a broker for the app's publishers and topics (batch-acks as demand, filters)",
    schemes=(
        Scheme(name="mm2", form="mm2://HOST:PORT"),
        Scheme(name="mm2s", secure=True, form="mm2s://HOST:PORT"),
    ),
    connect=connect_mm2_url,
    add_serve_arguments=_CLI.add_serve_arguments,
    services=_services,
    add_commands=_CLI.add_commands,
    error_status=_CLI.error_status,
    publish=publish_mm2_url,
)
