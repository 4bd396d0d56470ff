"""``rstreams sub --stats``: a progress line on stderr for long runs.

Counts what the command prints anyway (elements, their bytes) per batch,
and at most once per :data:`PROGRESS_INTERVAL` writes::

    rstreams: 1.2M elements  412k el/s  9.6 MB  3.3 MB/s

The rates are over the last interval. On a terminal the line is rewritten
in place (carriage return) and ends with a newline when the stream ends;
into a file each line stands on its own. The last line always gives the
totals, with the rates over the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "PROGRESS_INTERVAL"]

#: Seconds between two progress lines.
PROGRESS_INTERVAL = 1.0


def _quantity(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}"


class Progress:
    """Elements and bytes so far, reported on ``out`` every interval.

    Args:
        out: where the lines go (stderr).
        clock: seconds, monotonic (a test passes its own).
    """

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._in_place = out.isatty()
        self.elements = 0
        self.bytes = 0
        self._started = self._last_time = clock()
        self._last_elements = self._last_bytes = 0

    def add(self, elements: int, nbytes: int) -> None:
        """Count a batch; writes a line when an interval has passed."""
        self.elements += elements
        self.bytes += nbytes
        now = self._clock()
        if now - self._last_time >= PROGRESS_INTERVAL:
            elapsed = now - self._last_time
            self._write(
                (self.elements - self._last_elements) / elapsed, (self.bytes - self._last_bytes) / elapsed, final=False
            )
            self._last_time, self._last_elements, self._last_bytes = now, self.elements, self.bytes

    def finish(self) -> None:
        """The last line: the totals and the rates over the whole run."""
        elapsed = max(self._clock() - self._started, 1e-9)
        self._write(self.elements / elapsed, self.bytes / elapsed, final=True)

    def _write(self, element_rate: float, byte_rate: float, *, final: bool) -> None:
        line = (
            f"rstreams: {_quantity(self.elements)} elements  {_quantity(element_rate)} el/s  "
            f"{_quantity(self.bytes)}B  {_quantity(byte_rate)}B/s"
        )
        if self._in_place:
            self._out.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        else:
            self._out.write(line + "\n")
        self._out.flush()
