"""``rstreams sub --stats``: the progress line (``cli/_progress``)."""

from __future__ import annotations

import io

from rstreams.cli._progress import Progress

from ._support import ServeProcess, rstreams


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_interval_with_the_rates_of_that_interval_then_the_totals() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, clock)
    progress.add(500, 4000)
    assert out.getvalue() == ""  # less than a second: nothing yet
    clock.now = 101.0
    progress.add(500, 4000)
    clock.now = 103.0
    progress.add(3000, 24000)
    progress.finish()
    assert out.getvalue().splitlines() == [
        "rstreams: 1k elements  1k el/s  8kB  8kB/s",
        "rstreams: 4k elements  1.5k el/s  32kB  12kB/s",  # 3000 elements over 2 s
        "rstreams: 4k elements  1.33k el/s  32kB  10.7kB/s",  # the whole run: 3 s
    ]


def test_sub_stats_reports_on_stderr_and_leaves_stdout_alone(demo_server: ServeProcess) -> None:
    result = rstreams("sub", demo_server.url, "range?count=1000", "--format", "hex", "--stats")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [b"%016x" % i for i in range(1000)]
    # The last line is the totals: 1000 elements of 8 bytes.
    assert result.stderr.splitlines()[-1].startswith(b"rstreams: 1k elements  ")
    assert b"  8kB  " in result.stderr.splitlines()[-1]
