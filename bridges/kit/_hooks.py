"""A bridge's command-line hooks, imported only when the command line calls them.

Every bridge registers three hooks with :class:`rstreams.support.Bridge`
(``add_serve_arguments``, ``add_commands``, ``error_status``) that live in
its ``_cli`` module, which imports ``rstreams.cli``. The library must never
import the command line, so each hook imports that module when called:
:class:`LazyCli` is that indirection, written once.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["LazyCli"]


@dataclass(frozen=True, slots=True)
class LazyCli:
    """The hooks of the CLI module ``module`` (``"bridges.emp._cli"``), which
    defines ``add_serve_arguments(parser)``, ``add_parser(subparsers)`` and
    ``error_status(exc)``; each is imported at its first call."""

    module: str

    def add_serve_arguments(self, parser: argparse.ArgumentParser) -> None:
        importlib.import_module(self.module).add_serve_arguments(parser)

    def add_commands(self, subparsers: Any) -> None:
        importlib.import_module(self.module).add_parser(subparsers)

    def error_status(self, exc: BaseException) -> tuple[int, str] | None:
        status: tuple[int, str] | None = importlib.import_module(self.module).error_status(exc)
        return status
