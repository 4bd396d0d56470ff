"""EMP's entry in the bridge registry: its URL schemes, ``rstreams serve --emp``, ``rstreams emp``.

Registered in ``pyproject.toml`` under the entry-point group
``rstreams.bridges`` as ``emp = "bridges.emp:BRIDGE"``. The command-line
parts (``_cli``, which uses ``rstreams.cli``) are imported only when the
command line asks for them: the library never imports the CLI.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rstreams.support import Bridge, BridgeService, Scheme, ServeContext

from ..kit import LazyCli, ListenerService
from ._app import EmpAppServer
from ._client import FRAMINGS, connect_emp_url
from ._config import EmpConfig

__all__ = ["BRIDGE"]

#: Its command-line hooks, in ``_cli`` (imported only when called).
_CLI = LazyCli(__package__ + "._cli")


def _services(context: ServeContext, args: argparse.Namespace) -> Sequence[BridgeService]:
    addresses = getattr(args, "emp", None)
    if not addresses:
        return []
    config = EmpConfig(
        framing=FRAMINGS[args.emp_framing],
        max_connection_memory=context.max_connection_memory,
        loopback_congestion_control=context.loopback_congestion_control,
        idle_timeout=context.idle_timeout,
    )
    server = EmpAppServer(context.app, config=config, max_connections=context.max_connections)
    return [ListenerService(server, addresses, context.ssl_context, scheme="emp", secure_scheme="emps")]


BRIDGE = Bridge(
    name="emp",
    summary="EMP (Extensible Messaging Protocol): request-response as one-element streams",
    schemes=(
        Scheme(name="emp", form="emp://HOST:PORT[?framing=author]"),
        Scheme(name="emps", secure=True, form="emps://HOST:PORT[?framing=author]"),
    ),
    connect=connect_emp_url,
    add_serve_arguments=_CLI.add_serve_arguments,
    services=_services,
    add_commands=_CLI.add_commands,
    error_status=_CLI.error_status,
)
