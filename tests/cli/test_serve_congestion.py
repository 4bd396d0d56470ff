"""``rstreams serve --loopback-congestion-control`` reaches every listener.

Sessions over loopback switch to a congestion control that does not pace
(``rstreams/_loopback.py``); the flag chooses which one, or ``host`` to keep
the host's, for the wire-v0 sessions and for the connections of ``--emp``,
``--relink``, ``--micromsg2`` and ``--epoxy`` alike, as
``--max-connection-memory`` does (tests/cli/test_serve_budget.py). What a
session does with the setting on real sockets is tests/runtime/test_loopback.py's.
"""

from __future__ import annotations

from typing import Any

import pytest

import rstreams
import rstreams.cli._serve
from rstreams.cli import main
from rstreams.support import DEFAULT_LOOPBACK_CONGESTION_CONTROL

LISTENERS = ["--tcp", "127.0.0.1:0", "--emp", "127.0.0.1:0", "--relink", "127.0.0.1:0"]
LISTENERS += ["--micromsg2", "127.0.0.1:0", "--epoxy", "127.0.0.1:0"]


def _served_with(monkeypatch: pytest.MonkeyPatch, flag: list[str]) -> dict[str, str | None]:
    """The congestion control each listener would give loopback connections,
    by scheme ("tcp" for the wire-v0 sessions): the whole command, up to
    where it would start serving."""
    given: dict[str, Any] = {}

    async def record(server: rstreams.Server, *args: Any, services: list[Any], **kwargs: Any) -> int:
        given.update(server=server, services=services)
        return 0

    monkeypatch.setattr(rstreams.cli._serve, "serve_until_stopped", record)
    assert main(["serve", "rstreams.demo:app", *LISTENERS, *flag]) == 0
    chosen = {"tcp": given["server"].config.loopback_congestion_control}
    for service in given["services"]:
        settings = getattr(service.server, "settings", None) or service.server.config
        chosen[service.scheme] = settings.loopback_congestion_control
    return chosen


@pytest.mark.parametrize(
    "flag, expected",
    [
        ([], DEFAULT_LOOPBACK_CONGESTION_CONTROL),
        (["--loopback-congestion-control", "cubic"], "cubic"),
        (["--loopback-congestion-control", "host"], None),
    ],
    ids=["default", "named", "host"],
)
def test_every_listener_gets_the_loopback_congestion_control(
    monkeypatch: pytest.MonkeyPatch, flag: list[str], expected: str | None
) -> None:
    assert DEFAULT_LOOPBACK_CONGESTION_CONTROL == "reno"
    assert _served_with(monkeypatch, flag) == {scheme: expected for scheme in ("tcp", "emp", "relink", "mm2", "epoxy")}


@pytest.mark.parametrize("name", ["", "bb r", "reno;", "x" * 16, "réno"])
def test_a_name_the_kernel_could_not_have_is_a_usage_error(capsys: pytest.CaptureFixture[str], name: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "rstreams.demo:app", "--tcp", "127.0.0.1:0", "--loopback-congestion-control", name])
    assert exit_info.value.code == 2
    assert "--loopback-congestion-control: expected a congestion control's name" in capsys.readouterr().err
