"""The ``rstreams`` command line (serve, sub, pub arrive with the CLI issue)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ._version import __version__

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rstreams", description="Reactive Streams over the network, on trio.")
    parser.add_argument("--version", action="version", version=f"rstreams {__version__}")
    parser.parse_args(argv)
    print(f"rstreams {__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
