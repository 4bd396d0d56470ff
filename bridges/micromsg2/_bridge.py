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
from typing import Any

from rstreams.support import Bridge, BridgeService, Scheme, ServeContext

from ..kit import ListenerService
from ._broker import BROKER_SETTINGS, MicroMsg2AppServer
from ._client import connect_mm2_url, publish_mm2_url

__all__ = ["BRIDGE"]


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from ._cli import add_serve_arguments

    add_serve_arguments(parser)


def _services(context: ServeContext, args: argparse.Namespace) -> Sequence[BridgeService]:
    addresses = getattr(args, "micromsg2", None)
    if not addresses:
        return []
    settings = replace(BROKER_SETTINGS, max_connection_memory=context.max_connection_memory)
    server = MicroMsg2AppServer(context.app, settings=settings, max_connections=context.max_connections)
    return [ListenerService(server, addresses, context.ssl_context, scheme="mm2", secure_scheme="mm2s")]


def _add_commands(subparsers: Any) -> None:
    from ._cli import add_parser

    add_parser(subparsers)


def _error_status(exc: BaseException) -> tuple[int, str] | None:
    from ._cli import error_status

    return error_status(exc)


BRIDGE = Bridge(
    name="mm2",
    summary="MicroMsg2: a broker for the app's publishers and topics (batch-acks as demand, filters)",
    schemes=(
        Scheme(name="mm2", form="mm2://HOST:PORT"),
        Scheme(name="mm2s", secure=True, form="mm2s://HOST:PORT"),
    ),
    connect=connect_mm2_url,
    add_serve_arguments=_add_serve_arguments,
    services=_services,
    add_commands=_add_commands,
    error_status=_error_status,
    publish=publish_mm2_url,
)
