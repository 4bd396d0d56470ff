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
from typing import Any

from rstreams.support import Bridge, BridgeService, Scheme, ServeContext

from ..kit import ListenerService
from ._app import EpoxyAppServer
from ._settings import DEFAULT_SETTINGS
from ._client import connect_epoxy_url, publish_epoxy_url
from ._settings import DEFAULT_PORT, DEFAULT_TLS_PORT

__all__ = ["BRIDGE"]


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from ._cli import add_serve_arguments

    add_serve_arguments(parser)


def _services(context: ServeContext, args: argparse.Namespace) -> Sequence[BridgeService]:
    addresses = getattr(args, "epoxy", None)
    if not addresses:
        return []
    settings = replace(DEFAULT_SETTINGS, max_connection_memory=context.max_connection_memory)
    server = EpoxyAppServer(context.app, settings=settings, max_connections=context.max_connections)
    return [ListenerService(server, addresses, context.ssl_context, scheme="epoxy", secure_scheme="epoxys")]


def _add_commands(subparsers: Any) -> None:
    from ._cli import add_parser

    add_parser(subparsers)


def _error_status(exc: BaseException) -> tuple[int, str] | None:
    from ._cli import error_status

    return error_status(exc)


BRIDGE = Bridge(
    name="epoxy",
    summary="Bond Epoxy: an app as the service rstreams.Publishers (Subscribe, Publish)",
    schemes=(
        Scheme(name="epoxy", default_port=DEFAULT_PORT, form="epoxy://HOST[:PORT]"),
        Scheme(name="epoxys", secure=True, default_port=DEFAULT_TLS_PORT, form="epoxys://HOST[:PORT]"),
    ),
    connect=connect_epoxy_url,
    add_serve_arguments=_add_serve_arguments,
    services=_services,
    add_commands=_add_commands,
    error_status=_error_status,
    publish=publish_epoxy_url,
)
