"""``rstreams serve --max-connection-memory`` reaches every bridge's listener too.

One budget per connection, whatever protocol the connection speaks (issue 18,
item 7): the flag that sets it for wire-v0 sessions sets it for the
connections of ``--emp``, ``--relink``, ``--micromsg2`` and ``--epoxy`` as well.
So does ``--idle-timeout``: a bridge's peer that went quiet holds no slot for
ever either (``LinkSettings.idle_timeout``).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

import rstreams
import rstreams.cli._serve
import rstreams.protocol
from rstreams.cli import build_parser, main
from rstreams import ConnectionMemoryTooSmall, SessionConfig
from rstreams.cli._common import parse_size
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


def test_the_serve_command_hands_the_budget_to_its_wire_sessions_and_every_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole command, up to where it would start serving: what
    # serve_until_stopped is given is what the listeners would run with.
    given: dict[str, Any] = {}

    async def record(server: rstreams.Server, *args: Any, services: list[Any], **kwargs: Any) -> int:
        given.update(server=server, services=services)
        return 0

    monkeypatch.setattr(rstreams.cli._serve, "serve_until_stopped", record)
    listeners = ["--tcp", "127.0.0.1:0", "--emp", "127.0.0.1:0", "--relink", "127.0.0.1:0"]
    listeners += ["--micromsg2", "127.0.0.1:0", "--epoxy", "127.0.0.1:0"]
    assert main(["serve", "rstreams.demo:app", *listeners, "--max-connection-memory", "8M"]) == 0
    assert given["server"].config.max_connection_memory == 8 * MiB
    budgets = {service.scheme: _settings_of(service.server).max_connection_memory for service in given["services"]}
    assert budgets == {"emp": 8 * MiB, "relink": 8 * MiB, "mm2": 8 * MiB, "epoxy": 8 * MiB}


@pytest.mark.parametrize("flag, timeout", [([], 300.0), (["--idle-timeout", "7"], 7.0), (["--idle-timeout", "0"], None)])
def test_the_serve_command_hands_its_idle_timeout_to_every_bridge(
    monkeypatch: pytest.MonkeyPatch, flag: list[str], timeout: float | None
) -> None:
    given: dict[str, Any] = {}

    async def record(server: rstreams.Server, *args: Any, services: list[Any], **kwargs: Any) -> int:
        given.update(server=server, services=services)
        return 0

    monkeypatch.setattr(rstreams.cli._serve, "serve_until_stopped", record)
    listeners = ["--tcp", "127.0.0.1:0", "--emp", "127.0.0.1:0", "--relink", "127.0.0.1:0"]
    listeners += ["--micromsg2", "127.0.0.1:0", "--epoxy", "127.0.0.1:0"]
    assert main(["serve", "rstreams.demo:app", *listeners, *flag]) == 0
    assert given["server"].config.idle_timeout == timeout
    timeouts = {service.scheme: _settings_of(service.server).idle_timeout for service in given["services"]}  # type: ignore[attr-defined]
    assert timeouts == {"emp": timeout, "relink": timeout, "mm2": timeout, "epoxy": timeout}


@pytest.mark.parametrize(
    "text, size",
    [("65536", 65536), ("64B", 64), ("64K", 64 * 1024), ("64k", 64 * 1024), ("8M", 8 * MiB), ("8MiB", 8 * MiB), ("8mb", 8 * MiB), (" 1G ", 1024 * MiB)],
)
def test_a_size_is_read_with_or_without_its_unit(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "M", "64i", "64ib", "64iB", "64X", "64MM", "6 4M", "-1M", "0", "1.5M", "64MiBB"])
def test_anything_else_is_refused_with_the_flags_words(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a"):
        parse_size(text)


def test_a_budget_too_small_for_a_split_part_is_refused_in_the_flags_words(capsys: pytest.CaptureFixture[str]) -> None:
    # The library's typed error, worded by the flag for the command line;
    # a budget of exactly two parts' worth is still taken.
    part = rstreams.protocol.DEFAULT_LIMITS.split_threshold
    with pytest.raises(ConnectionMemoryTooSmall, match="too small for one split part per half"):
        SessionConfig.for_connection_memory(part)
    assert SessionConfig.for_connection_memory(4 * part).max_connection_memory == 4 * part
    with pytest.raises(SystemExit):
        build_parser("serve").parse_args(["serve", "rstreams.demo:app", "--max-connection-memory", str(part)])
    assert f"--max-connection-memory {part} is too small for one split part per half" in capsys.readouterr().err
