"""``rstreams pub URL NAME``: publish lines into a running server's topic or publisher.

The protocol has no "push" message: only a subscriber's demand moves
elements. So the client publishes the way :func:`rstreams.publish_to_topic`
does, by the convention the topics and the demo's ``echo`` follow: it serves
a publisher of its own, ``stdin``, on the connection it opened, then
subscribes to a route of the server that subscribes back to it:

* ``NAME`` without a ``source`` parameter is a topic: the client subscribes
  to ``NAME/publish?source=stdin`` (the route ``Topic.mount`` serves). The
  server asks for lines only while the topic has room, so a full topic holds
  the reading of standard input back.
* ``NAME`` with one (``echo?source=``) names any publisher that subscribes
  back to the ``source`` it is given: the client fills in ``stdin`` and
  prints whatever that publisher streams back (the demo's ``echo`` returns
  each line).

Input is read only on the server's demand. The command ends when the stream
it subscribed to does: a topic completes it once the client's publisher
completed (end of input) and the topic accepted every line. Along the way
the client asks the topic to confirm how many lines it holds
(``confirm=1``), so that a run cut short says how many are in for sure:
where to start again without losing a line.

Over a bridge whose protocol can publish into a topic (the registry's
``Bridge.publish``: ``mm2://``, whose SENDs the broker acknowledges once
the topic took them, and ``epoxy://``, whose ``Publish`` events the server
runs in order), ``NAME`` is a topic and the bridge carries the lines, read
only as fast as its protocol takes them. Bridges without ``publish`` (EMP,
Relink: request-response and channels that cannot reach a topic) are a
usage error naming the schemes that can publish.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

import trio

from .._connect import open_session
from .._errors import PublisherError, SessionClosed
from .._publish import Router, Sink
from .._topic_client import CONFIRM_PARAMETER, read_confirmations
from .._url import SCHEMES, url_scheme
from ._client import (
    SignalStop,
    check_name,
    client_ssl,
    client_token,
    client_url,
    report,
    session_closed,
    silence_stdout,
    stop_at_signal,
)
from ._common import EXIT_CONNECTION, EXIT_DECODE, EXIT_FAILURE, EXIT_GOODBYE, EXIT_OK, EXIT_USAGE, CommandError, run_command
from ._lines import MAX_LINES_AT_ONCE, LineReader, lines_phrase

if TYPE_CHECKING:
    from .._registry import Bridge, PublishFunction

__all__ = ["LINE_FORMATS", "SOURCE", "publish_route", "run_client"]

#: The name of the publisher the client serves on its connection.
SOURCE = "stdin"

STDIN_FD = 0


class LineError(ValueError):
    """A line that is not what ``--format`` says (not JSON)."""


def _raw(line: bytes) -> bytes:
    return line


def _json_value(line: bytes) -> object:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise LineError(f"not JSON ({exc}): {line[:80]!r}") from None


def _jsonl(line: bytes) -> bytes:
    return json.dumps(_json_value(line), separators=(",", ":"), ensure_ascii=False).encode()


def _msgpack(line: bytes) -> bytes:
    import msgpack

    packed: bytes = msgpack.packb(_json_value(line))
    return packed


#: How one input line becomes one element; blank lines are skipped by the
#: formats that read JSON (a JSON document cannot be empty).
LINE_FORMATS: dict[str, Callable[[bytes], bytes]] = {"raw": _raw, "jsonl": _jsonl, "msgpack": _msgpack}


def publish_route(name: str, source: str = SOURCE) -> str:
    """The route to subscribe to so that ``name`` reads from our ``source``.

    ``chat`` → ``chat/publish?source=stdin&confirm=1`` (the topic confirms
    how many lines it holds as it goes); ``echo?source=`` →
    ``echo?source=stdin`` (other parameters kept).
    """
    path, question, query = name.partition("?")
    parameters = parse_qsl(query, keep_blank_values=True)
    if _names_a_publisher(name):  # (the one rule for it: _publish asks it too)
        parameters = [(key, source if key == "source" else value) for key, value in parameters]
        return f"{path}?{urlencode(parameters)}"
    return f"{path}/publish?{urlencode([*parameters, ('source', source), (CONFIRM_PARAMETER, '1')])}"


def _names_a_publisher(name: str) -> bool:
    # NAME?source=...: a publisher reading our source, not a topic.
    return any(key == "source" for key, _ in parse_qsl(name.partition("?")[2], keep_blank_values=True))


class _LineSource:
    # The client's publisher: one line per element, read only on demand.
    # A line that --format refuses ends the input there: the source
    # completes, so that the server keeps every line before it (a topic
    # accepts them and completes the stream), and the command reports the
    # line and exits 5.

    def __init__(self, lines: LineReader, encode: Callable[[bytes], bytes], skip_blank: bool) -> None:
        self.lines = lines
        self.encode = encode
        self.skip_blank = skip_blank
        self.sent = 0
        #: Of those sent, how many the topic confirmed it holds (0 until a
        #: confirmation comes, and always where none can: NAME?source=, Epoxy).
        self.confirmed = 0
        self.bad_line: str | None = None
        self._handed_out = 0  # elements handed to a bridge's publish since it last asked

    async def publish(self, sink: Sink) -> None:
        while True:
            await sink.wait_demand()  # read nothing the server did not ask for
            first = await self._next_element()
            if first is None:
                return
            # With it, the lines read already, as far as demand goes: one
            # step, and one message on the wire, for all of them.
            lines, elements = [first[0]], [first[1]]
            self._take_ready_lines(min(sink.demand, MAX_LINES_AT_ONCE) - 1, lines, elements)
            try:
                # Queued as demand and the queue's bound allow; what is not
                # (or all, if cancelled first) goes back, to be read again.
                taken = await sink.send_some(elements)
            except BaseException:
                self.lines.unread_lines(lines)
                raise
            self.lines.unread_lines(lines[taken:])
            self.sent += taken

    def confirm(self, count: int) -> None:
        # (rstreams.support.ConfirmedElements) The first ``count`` lines
        # are in the topic: a bridge that learns it (MicroMsg2's acks).
        self.confirmed = max(count, self.confirmed)

    def progress(self, name: str) -> str:
        """How far a run cut short got: the lines sent, and of them those the
        topic confirmed (what a user who must start again needs: ``tail -n
        +N`` from the line after the confirmed ones loses nothing, and may
        send again some that were in)."""
        sent = lines_phrase(self.sent)
        if not self.confirmed:
            return f"{sent} sent to {name} before it, none of them confirmed"
        if self.confirmed >= self.sent:
            return f"{sent} sent to {name} before it, all of them confirmed"
        return f"{sent} sent to {name} before it, the first {self.confirmed} of them confirmed"

    def __aiter__(self) -> _LineSource:
        return self

    async def __anext__(self) -> bytes:
        # The same lines as an async iterable, for a bridge's publish, which
        # pulls the next one only when its protocol can take it. The element
        # handed out before this call was published (or is on its way).
        self.sent += self._handed_out
        self._handed_out = 0
        first = await self._next_element()
        if first is None:
            raise StopAsyncIteration
        self._handed_out = 1
        return first[1]

    async def _next_element(self) -> tuple[bytes, bytes] | None:
        # The next line that is not skipped, and its element; None at the
        # end of input, or at a line --format refuses (bad_line says which).
        while True:
            line = await self.lines.readline()
            if line is None:
                return None
            if not self._skipped(line):
                break
        try:
            return line, self.encode(line)
        except LineError as exc:
            self.bad_line = f"line {self.sent + 1}: {exc}"
            return None

    def _skipped(self, line: bytes) -> bool:
        return self.skip_blank and not line.strip()

    def take_ready(self, max_count: int) -> list[bytes]:
        # (rstreams.support.ReadyElements) The lines already read, after
        # the one __anext__ handed out: a bridge sends them in one write.
        elements: list[bytes] = []
        self._take_ready_lines(max_count, [], elements)
        self._handed_out += len(elements)
        return elements

    def _take_ready_lines(self, max_count: int, lines: list[bytes], elements: list[bytes]) -> None:
        # Up to max_count more of the lines read already, and their
        # elements, appended to the two lists; never waits. A line --format
        # refuses is left for the next readline, which reports it.
        for _ in range(max_count):
            while (line := self.lines.readline_nowait()) is not None and self._skipped(line):
                pass
            if line is None:
                return
            try:
                element = self.encode(line)
            except LineError:
                self.lines.unread(line)
                return
            lines.append(line)
            elements.append(element)


def _open_input(path: str | None) -> int:
    if path is None or path == "-":
        return STDIN_FD
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise CommandError(f"cannot read {path!r}: {exc.strerror}", EXIT_USAGE) from None


async def _publish(args: argparse.Namespace, url: str, fd: int) -> int:
    source = _LineSource(LineReader(fd), LINE_FORMATS[args.format], skip_blank=args.format != "raw")
    app = Router()
    app.add(SOURCE, source.publish)
    route = publish_route(args.name)
    into_topic = not _names_a_publisher(args.name)
    ssl_context = client_ssl(url, args.ca, args.cert, args.key)
    out = sys.stdout.buffer
    status = EXIT_OK
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            stop = stop_at_signal(signals, nursery)
            nursery.start_soon(source.lines.run)
            try:
                async with open_session(url, app=app, ssl_context=ssl_context, token=client_token(args)) as session:
                    if into_topic:
                        async with session.subscribe(route, prefetch=0) as confirmations:
                            await read_confirmations(confirmations, source.confirm)
                    else:
                        async with session.subscribe(route) as answers:
                            async for element in answers:
                                out.write(element + b"\n")
                                out.flush()
                if source.bad_line is not None:
                    status = report(
                        f"--format {args.format}: {source.bad_line} (the {source.sent} lines before it were published)",
                        EXIT_DECODE,
                    )
            except BrokenPipeError:
                silence_stdout()  # a normal way to stop listening to what comes back
            except OSError as exc:
                status = report(f"cannot connect to {url}: {exc.strerror or exc}", EXIT_CONNECTION)
            except PublisherError as exc:
                status = report(f"publisher error: {exc.message}", EXIT_FAILURE)
            except SessionClosed as exc:
                status = session_closed(exc, progress=source.progress(args.name) if source.sent else "")
            nursery.cancel_scope.cancel()
    return _finish(stop, status, source, source.sent, args.name)


async def _publish_over_bridge(args: argparse.Namespace, url: str, fd: int, bridge: Bridge, publish: PublishFunction) -> int:
    source = _LineSource(LineReader(fd), LINE_FORMATS[args.format], skip_blank=args.format != "raw")
    ssl_context = client_ssl(url, args.ca)
    status = EXIT_OK
    published = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            stop = stop_at_signal(signals, nursery)
            nursery.start_soon(source.lines.run)
            try:
                published = await publish(url, args.name, source, ssl_context=ssl_context)
                if source.bad_line is not None:
                    status = report(
                        f"--format {args.format}: {source.bad_line} (the {published} lines before it were published)",
                        EXIT_DECODE,
                    )
            except ValueError as exc:
                status = report(str(exc), EXIT_USAGE)
            except PublisherError as exc:
                # (a topic the server does not have, say: as over tcp://)
                status = report(f"publisher error: {exc.message}", EXIT_FAILURE)
            except Exception as exc:
                answer = bridge.error_status(exc) if bridge.error_status is not None else None
                if answer is not None:
                    # (How far it got, when the connection went: not for a refusal.)
                    ended = answer[0] in (EXIT_CONNECTION, EXIT_GOODBYE) and source.sent
                    tail = f" ({source.progress(args.name)})" if ended else ""
                    status = report(answer[1] + tail, answer[0])
                elif isinstance(exc, OSError):
                    status = report(f"cannot connect to {url}: {exc.strerror or exc}", EXIT_CONNECTION)
                else:
                    raise
            nursery.cancel_scope.cancel()
    return _finish(stop, status, source, published, args.name)


def _finish(stop: SignalStop, status: int, source: _LineSource, published: int, name: str) -> int:
    # The last line of a publishing run, and its exit status. Stopped by
    # Ctrl-C or SIGTERM with lines sent, it says how many, as a lost
    # connection does, so that a user knows where to start again; done,
    # how many were ``published`` (as the path that published counts them).
    if stop.status is not None:
        if source.sent:
            signame = signal.Signals(stop.status - 128).name
            print(f"rstreams: stopped by {signame}: {source.progress(name)}", file=sys.stderr, flush=True)
        return stop.status
    if status == EXIT_OK:
        print(f"rstreams: published {lines_phrase(published)} into {name}", file=sys.stderr, flush=True)
    return status


def _bridge_publisher(url: str, scheme: str, name: str) -> tuple[Bridge, PublishFunction]:
    # The bridge answering ``scheme``, if it can publish into a topic.
    from .._registry import UnsupportedScheme, find_scheme, registered_bridges

    try:
        bridge, _ = find_scheme(url, scheme)
    except UnsupportedScheme as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    if bridge.publish is None:
        can = [*(f"{known}://" for known in SCHEMES)]
        can += [f"{each.name}://" for other in registered_bridges() if other.publish is not None for each in other.schemes]
        raise CommandError(
            f"pub cannot publish over {scheme}:// ({bridge.name} has no way to publish into a topic); "
            f"it publishes over {', '.join(can)}",
            EXIT_USAGE,
        )
    if "?" in name:
        raise CommandError(
            f"over {scheme}:// NAME is a topic, without parameters ({name!r}); "
            "a NAME?source= publisher needs the rstreams protocol (tcp://, ws://, ...)",
            EXIT_USAGE,
        )
    return bridge, bridge.publish


def run_client(args: argparse.Namespace) -> int:
    """``rstreams pub [URL] NAME`` (the command-line module's ``run`` without ``--serve``)."""
    if not args.name or args.name.startswith("?"):
        raise CommandError("NAME must name a topic or publisher", EXIT_USAGE)
    url = client_url(args.url, args.name)
    check_name(args.name)
    scheme = url_scheme(url)
    if scheme in SCHEMES:
        fd = _open_input(args.file)
        try:
            return run_command(lambda: _publish(args, url, fd))
        finally:
            if fd != STDIN_FD:
                os.close(fd)
    bridge, publish = _bridge_publisher(url, scheme, args.name)
    fd = _open_input(args.file)
    try:
        return run_command(lambda: _publish_over_bridge(args, url, fd, bridge, publish))
    finally:
        if fd != STDIN_FD:
            os.close(fd)
