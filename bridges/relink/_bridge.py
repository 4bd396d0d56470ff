"""Relink's entry in the bridge registry: ``relink://``, ``rstreams serve --relink``, ``rstreams relink``.

Registered in ``pyproject.toml`` under the entry-point group
``rstreams.bridges`` as ``relink = "bridges.relink:BRIDGE"``. The
command-line parts (``_cli``, which uses ``rstreams.cli``) are imported only
when the command line asks for them: the library never imports the CLI.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rstreams.support import Bridge, BridgeService, Scheme, ServeContext

from ..kit import LazyCli, ListenerService
from ._app import RelinkAppServer
from ._client import connect_relink_url
from ._settings import RelinkSettings

__all__ = ["BRIDGE"]

#: Its command-line hooks, in ``_cli`` (imported only when called).
_CLI = LazyCli(__package__ + "._cli")


def _services(context: ServeContext, args: argparse.Namespace) -> Sequence[BridgeService]:
    addresses = getattr(args, "relink", None)
    if not addresses:
        return []
    # (send_window is checked by its argparse type)
    settings = RelinkSettings(
        send_window=args.relink_window,
        max_connection_memory=context.max_connection_memory,
        loopback_congestion_control=context.loopback_congestion_control,
        idle_timeout=context.idle_timeout,
    )
    server = RelinkAppServer(
        context.app, endpoint=args.relink_endpoint, settings=settings, max_connections=context.max_connections
    )
    return [
        ListenerService(
            server,  # type: ignore[arg-type]  # the shape ListenerService uses: serve_tcp, protocol, aclose
            addresses,
            context.ssl_context,
            scheme="relink",
            secure_scheme="relinks",
            path="/" + args.relink_endpoint,
        )
    ]


BRIDGE = Bridge(
    name="relink",
    summary="Relink: a channel is a stream, consumed acknowledgements are demand, links survive reconnection",
    schemes=(
        Scheme(name="relink", form="relink://HOST:PORT[/ENDPOINT]"),
        Scheme(name="relinks", secure=True, form="relinks://HOST:PORT[/ENDPOINT]"),
    ),
    connect=connect_relink_url,
    add_serve_arguments=_CLI.add_serve_arguments,
    services=_services,
    add_commands=_CLI.add_commands,
    error_status=_CLI.error_status,
)
