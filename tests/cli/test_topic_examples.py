"""The pub/sub examples against ``rstreams serve examples.demo:app``, as run from the README."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import trio

import rstreams

from ._support import ROOT, ServeProcess


def run_example(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, input=input, capture_output=True, text=True, timeout=30
    )


def test_chat_clients_see_each_others_messages(demo_server: ServeProcess) -> None:
    alice = run_example("examples/chat.py", "alice", demo_server.url, input="hello room\nanyone here?\n")
    assert alice.returncode == 0, alice.stderr
    assert "alice: hello room" in alice.stdout and "alice: anyone here?" in alice.stdout
    # bob joins later and sees the history first, then his own line.
    bob = run_example("examples/chat.py", "bob", demo_server.url, input="hi alice\n")
    assert bob.returncode == 0, bob.stderr
    lines = bob.stdout.splitlines()
    assert lines.index("alice: hello room") < lines.index("bob: hi alice")


async def test_sensor_feed_reaches_a_latest_subscriber(demo_server: ServeProcess) -> None:
    async with rstreams.open_session(demo_server.url) as session:
        async with session.subscribe("sensors?policy=latest", prefetch=1) as newest:
            feed = await trio.run_process(
                [sys.executable, "examples/sensors.py", demo_server.url, "--count", "40", "--rate", "100"],
                cwd=ROOT,
                capture_stdout=True,
            )
            assert b"published 40 readings" in feed.stdout
            with trio.fail_after(10):
                reading = msgpack.unpackb(await newest.__anext__())
    assert set(reading) == {"sensor", "ts", "value"}
