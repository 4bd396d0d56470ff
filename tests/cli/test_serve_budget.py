"""``rstreams serve --max-connection-memory`` reaches every bridge's listener too.

One budget per connection, whatever protocol the connection speaks (issue 18,
item 7): the flag that sets it for wire-v0 sessions sets it for the
connections of ``--emp``, ``--relink``, ``--micromsg2`` and ``--epoxy`` as well.
"""

from __future__ import annotations

import pytest

import rstreams
from rstreams.cli import build_parser
from rstreams.support import ServeContext, registered_bridges

MiB = 1024 * 1024


def _settings_of(server: object) -> object:
    for name in ("settings", "config"):
        value = getattr(server, name, None)
        if value is not None and hasattr(value, "max_connection_memory"):
            return value
    raise AssertionError(f"{server!r} has no settings with max_connection_memory")


@pytest.mark.parametrize("flag, budget", [([], rstreams.DEFAULT_CONNECTION_MEMORY), (["--max-connection-memory", "8M"], 8 * MiB)])
def test_every_bridge_listener_gets_the_connection_budget(flag: list[str], budget: int) -> None:
    listeners = ["--emp", "127.0.0.1:0", "--relink", "127.0.0.1:0", "--micromsg2", "127.0.0.1:0", "--epoxy", "127.0.0.1:0"]
    args = build_parser("serve").parse_args(["serve", "rstreams.demo:app", *listeners, *flag])
    assert args.max_connection_memory == budget
    context = ServeContext(app=rstreams.Router(), max_connection_memory=args.max_connection_memory)
    seen = set()
    for bridge in registered_bridges():
        if bridge.services is None:
            continue
        for service in bridge.services(context, args):
            assert _settings_of(service.server).max_connection_memory == budget, bridge.name
            seen.add(bridge.name)
    assert seen == {"emp", "relink", "mm2", "epoxy"}
